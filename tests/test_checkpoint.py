"""The checkpoint format: weights round-trip, tied weights stored once, views of one buffer (as cuDNN's flattened
RNN weights are) saved, mismatches refused with a clear error."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from attnlab.core.checkpoint import load_weights, save_weights
from attnlab.core.errors import AttnlabError
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq


class FlatViews(nn.Module):
    """Two parameters that are views of one flat buffer, like torch.nn.GRU's weights after flatten_parameters."""

    def __init__(self):
        super().__init__()
        flat = torch.randn(12)
        self.a = nn.Parameter(flat[:6].view(2, 3))
        self.b = nn.Parameter(flat[6:].view(3, 2))
        with torch.no_grad():
            self.a.set_(flat.untyped_storage(), 0, (2, 3))
            self.b.set_(flat.untyped_storage(), 6, (3, 2))


def test_views_of_one_buffer_round_trip(tmp_path):
    torch.manual_seed(0)
    m = FlatViews()
    assert m.a.untyped_storage().data_ptr() == m.b.untyped_storage().data_ptr()
    save_weights(m, tmp_path / "w.safetensors")
    m2 = FlatViews()
    load_weights(m2, tmp_path / "w.safetensors")
    assert torch.equal(m2.a, m.a) and torch.equal(m2.b, m.b)


def test_tied_weights_stored_once_and_restored(tmp_path):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1, tie_embeddings="all")
    m = TransformerSeq2Seq(30, 30, cfg)
    save_weights(m, tmp_path / "w.safetensors")
    with safe_open(str(tmp_path / "w.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert sum(k in keys for k in ("src_embed.weight", "tgt_embed.weight", "generator.weight")) == 1
    torch.manual_seed(1)
    m2 = TransformerSeq2Seq(30, 30, cfg)
    load_weights(m2, tmp_path / "w.safetensors")
    for (k, v), (_, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(v, v2), k
    assert m2.generator.weight is m2.src_embed.weight


def test_the_same_weights_always_give_the_same_bytes(tmp_path):
    """safetensors writes a file's metadata in a random order on each save; a compact run's two metadata keys
    (aliases, quantization) made a re-pack of the same weights differ byte for byte. Eight saves: all identical,
    metadata keys sorted in the header, and the file still reads back in safetensors and attnlab."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1, tie_embeddings="all")
    m = TransformerSeq2Seq(30, 30, cfg)
    paths = [tmp_path / f"w{i}.safetensors" for i in range(8)]
    for p in paths:
        save_weights(m, p, quantization="int8")
    data = [p.read_bytes() for p in paths]
    assert all(d == data[0] for d in data)
    n = int.from_bytes(data[0][:8], "little")
    meta = json.loads(data[0][8:8 + n])["__metadata__"]
    assert list(meta) == sorted(meta) and len(meta) == 2
    with safe_open(str(paths[0]), framework="pt") as f:
        assert f.metadata() == meta
    m2 = TransformerSeq2Seq(30, 30, cfg)
    load_weights(m2, paths[0])
    for (k, v), (_, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.allclose(v, v2, atol=0.02), k  # int8: one step of a row's scale at most


def test_gru_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    m = nn.GRU(4, 5, num_layers=2, bidirectional=True)
    save_weights(m, tmp_path / "w.safetensors")
    m2 = nn.GRU(4, 5, num_layers=2, bidirectional=True)
    load_weights(m2, tmp_path / "w.safetensors")
    x = torch.randn(3, 2, 4)
    assert torch.equal(m(x)[0], m2(x)[0])


def test_mismatch_is_a_clear_error(tmp_path):
    save_weights(nn.Linear(3, 4), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="does not fit the model"):
        load_weights(nn.Linear(3, 5), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="missing"):
        load_weights(nn.Sequential(nn.Linear(3, 4)), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="no such checkpoint"):
        load_weights(nn.Linear(3, 4), tmp_path / "nope.safetensors")



@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_types_are_converted_to_the_models(tmp_path, dtype):
    """Weights written in half, bfloat16 or double precision (by another tool) load as the model's float32."""
    torch.manual_seed(0)
    m = nn.Linear(3, 4)
    save_file({k: v.to(dtype) for k, v in m.state_dict().items()}, str(tmp_path / "w.safetensors"))
    m2 = nn.Linear(3, 4)
    load_weights(m2, tmp_path / "w.safetensors")
    assert m2.weight.dtype == torch.float32
    assert torch.equal(m2.weight, m.weight.to(dtype).float())


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8, torch.int64,
                                   torch.bool, torch.complex64])
def test_unusual_dtypes_are_one_line_errors(tmp_path, dtype):
    """float8 weights used to crash in torch.isfinite (not implemented for them); integers, booleans and complex
    numbers are no weights of a float model either."""
    m = nn.Linear(3, 4)
    save_file({k: v.to(dtype) for k, v in m.state_dict().items()}, str(tmp_path / "w.safetensors"))
    with pytest.raises(AttnlabError, match=rf"w\.safetensors: tensor (weight|bias) is {dtype}"):
        load_weights(nn.Linear(3, 4), tmp_path / "w.safetensors")


def test_float64_beyond_float32_is_refused(tmp_path):
    save_file({"weight": torch.full((4, 3), 1e300, dtype=torch.float64), "bias": torch.zeros(4, dtype=torch.float64)},
              str(tmp_path / "w.safetensors"))
    with pytest.raises(AttnlabError, match="tensor weight holds NaN or infinite values"):
        load_weights(nn.Linear(3, 4), tmp_path / "w.safetensors")


def test_unusual_dtypes_in_an_optimizer_state_are_refused():
    from attnlab.core.checkpoint import optimizer_tensors, restore_optimizer

    model = nn.Linear(3, 4)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    tensors, meta = optimizer_tensors(optimizer)
    tensors = {k: v.to(torch.float8_e4m3fn) if k.endswith("exp_avg") else v for k, v in tensors.items()}
    with pytest.raises(AttnlabError, match=r"state does not fit .*torch\.float8_e4m3fn"):
        restore_optimizer(torch.optim.Adam(model.parameters()), tensors, meta)



def test_an_adam_state_without_its_moments_is_refused():
    """A renamed tensor (found by fuzzing the safetensors header) left a parameter's state without exp_avg: Adam's
    next step raised KeyError."""
    from attnlab.core.checkpoint import optimizer_tensors, restore_optimizer

    model = nn.Linear(3, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    tensors, meta = optimizer_tensors(optimizer)
    tensors = {k.replace("exp_avg_sq", "exp_avX_sq"): v for k, v in tensors.items()}
    with pytest.raises(AttnlabError, match="the state of parameter 0 lacks exp_avg_sq"):
        restore_optimizer(torch.optim.AdamW(model.parameters()), tensors, meta)


# ---------------------------------------------------------------------------------------------- crash safety
class Killed(BaseException):
    """A simulated kill: a BaseException, so no `except Exception` cleans up after it, as after SIGKILL."""


def _series_trainer(run_dir, max_steps, scores, snapshots):
    """A tiny series model under the trainer; the dev 'accuracy' at step s is scores[s] (the selection score), and
    every checkpoint call records the weights and score it saves."""
    import attnlab.training.trainer as trainer_mod
    from attnlab.families.series import RegressionTask, SeriesDataConfig, make_splits
    from attnlab.nn.series import SeriesModelConfig, SeriesRNN
    from attnlab.training.trainer import TrainConfig, Trainer

    torch.manual_seed(0)
    splits = make_splits(SeriesDataConfig(task="sine", length=80, window=5, dev_fraction=0.2))
    cfg = TrainConfig(max_steps=max_steps, max_tokens=8, eval_every=2, log_every=1, keep_last=1, progress=False,
                      device="cpu", label_smoothing=0.0, lr=0.01)
    holder = {}

    def dev_eval(model):
        return {"accuracy": scores[holder["trainer"].state.step]}

    trainer = Trainer(SeriesRNN(SeriesModelConfig(hidden_dim=2), 5), cfg, splits.train, splits.dev, run_dir,
                      dev_eval=dev_eval, task=RegressionTask())
    holder["trainer"] = trainer
    real_save = trainer_mod.save_checkpoint

    def recording_save(ckpt_dir, step, model, optimizer, state, keep_last, best=False):
        snapshots[step] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, state["best_score"])
        return real_save(ckpt_dir, step, model, optimizer, state, keep_last, best=best)

    trainer_mod.save_checkpoint = recording_save
    return trainer, lambda: setattr(trainer_mod, "save_checkpoint", real_save)


def _check_consistent(run_dir, snapshots, scores):
    """latest and best name complete checkpoints whose weights are those saved at the step they name; best's score
    is that step's; resolve_checkpoint agrees; nothing temporary is left."""
    from attnlab.core.checkpoint import read_pointer, resolve_checkpoint
    from attnlab.nn.series import SeriesModelConfig, SeriesRNN

    ckpt = run_dir / "checkpoints"
    for pointer in ("latest.json", "best.json"):
        p = read_pointer(ckpt, pointer)
        if p is None:
            assert pointer == "best.json"
            continue
        for suffix in (".safetensors", ".train.safetensors", ".json"):
            assert (ckpt / f"{p['name']}{suffix}").is_file(), (pointer, p, suffix)
        model = SeriesRNN(SeriesModelConfig(hidden_dim=2), 5)
        load_weights(model, ckpt / f"{p['name']}.safetensors")
        for k, v in model.state_dict().items():
            assert torch.equal(v, snapshots[p["step"]][0][k]), (pointer, p, k)
        if pointer == "best.json":
            assert p["score"] == scores[p["step"]] == max(scores[s] for s in scores if s <= p["step"])
            assert resolve_checkpoint(run_dir, "best") == ckpt / f"{p['name']}.safetensors"


def test_a_kill_at_every_write_boundary_of_a_checkpoint_loses_nothing(tmp_path, monkeypatch):
    """Kill (a BaseException) before and after every rename and before every delete of the checkpoint at step 4
    (not the best) and at step 6 (a new best), one boundary per run; after each: latest and best load and hold
    the weights of the step they name, resume reaches step 8, no temporary file and no step after latest remain,
    and metrics.jsonl holds each step once."""
    import os
    from pathlib import Path

    import attnlab.training.trainer as trainer_mod

    scores = {2: 0.5, 4: 0.4, 6: 0.9, 8: 0.95}  # step 4 is not an improvement, 6 and 8 are
    real_replace, real_unlink = os.replace, Path.unlink
    killed_runs = 0
    for target in (4, 6):
        boundaries, kill_at = None, 1
        while boundaries is None or kill_at <= boundaries:
            run_dir = tmp_path / (f"t{target}_k{kill_at}" if boundaries is not None else f"t{target}_count")
            snapshots: dict = {}
            trainer, restore = _series_trainer(run_dir, 6, scores, snapshots)
            events = []

            def tick():
                events.append(1)
                if boundaries is not None and len(events) == kill_at:
                    raise Killed

            def replace(a, b):
                tick()
                real_replace(a, b)
                tick()

            def unlink(self, missing_ok=False):
                tick()
                real_unlink(self, missing_ok=missing_ok)

            saving = trainer_mod.save_checkpoint

            def armed_save(ckpt_dir, step, *args, **kwargs):
                if step != target:
                    return saving(ckpt_dir, step, *args, **kwargs)
                monkeypatch.setattr(os, "replace", replace)
                monkeypatch.setattr(Path, "unlink", unlink)
                try:
                    return saving(ckpt_dir, step, *args, **kwargs)
                finally:
                    monkeypatch.setattr(os, "replace", real_replace)
                    monkeypatch.setattr(Path, "unlink", real_unlink)

            trainer_mod.save_checkpoint = armed_save
            try:
                if boundaries is None:  # a first, unharmed run counts the boundaries of the target checkpoint
                    trainer.fit()
                    boundaries = len(events)
                    assert boundaries >= 8  # 4 renames (3 step files, latest), before and after each
                    restore()
                    continue
                with pytest.raises(Killed):
                    trainer.fit()
            finally:
                restore()
            killed_runs += 1
            _check_consistent(run_dir, snapshots, scores)
            resumed, restore = _series_trainer(run_dir, 8, scores, snapshots)
            try:
                resumed.resume()
                resumed.fit()
            finally:
                restore()
            _check_consistent(run_dir, snapshots, scores)
            ckpt = run_dir / "checkpoints"
            assert json.loads((ckpt / "latest.json").read_text())["step"] == 8
            assert json.loads((ckpt / "best.json").read_text())["step"] == 8
            assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]
            steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                     if "loss" in json.loads(line)]
            assert steps == list(range(1, 9)), steps
            kill_at += 1
    assert killed_runs >= 30
    print(f"killed at {killed_runs} write boundaries, all consistent after the kill and after resuming")


@pytest.mark.parametrize("pointer, message", [
    ({"name": "../../outside", "step": 1}, "key 'name' must be a checkpoint of this folder"),
    ({"name": "/etc/passwd", "step": 1}, "key 'name' must be a checkpoint of this folder"),
    ({"name": "step_00000003", "step": 4}, "key 'step' must be 3"),
    ({"name": "step_00000003", "step": "3"}, "key 'step' must be 3"),
    (["step_00000003"], "expected a JSON object"),
])
def test_a_pointer_can_only_name_a_checkpoint_of_its_folder(tmp_path, pointer, message):

    from attnlab.core.checkpoint import resolve_checkpoint

    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    (ckpt / "latest.json").write_text(json.dumps(pointer))
    with pytest.raises(AttnlabError, match=message) as e:
        resolve_checkpoint(tmp_path, "last")
    assert str(ckpt / "latest.json") in str(e.value)


def test_pruning_keeps_what_the_pointers_name(tmp_path):
    """keep_last = 1: the newest step stays, and so does the best one; steps after latest (left by a kill) are not
    pruning's business but recover's, which also removes temporary files."""

    from attnlab.core.checkpoint import prune, recover

    ckpt = tmp_path
    for step in (2, 4, 6, 8):
        for suffix in (".safetensors", ".train.safetensors", ".json"):
            (ckpt / f"step_{step:08d}{suffix}").write_text("x")
    (ckpt / ".step_00000008.safetensors.abc123").write_text("partial")
    (ckpt / "latest.json").write_text(json.dumps({"name": "step_00000006", "step": 6}))
    (ckpt / "best.json").write_text(json.dumps({"name": "step_00000002", "step": 2, "score": 1.0}))
    prune(ckpt, keep_last=1)
    assert sorted(p.name for p in ckpt.glob("step_*.json")) == ["step_00000002.json", "step_00000006.json",
                                                                "step_00000008.json"]
    removed = recover(ckpt)
    assert {p.name for p in removed} == {".step_00000008.safetensors.abc123", "step_00000008.safetensors",
                                         "step_00000008.train.safetensors", "step_00000008.json"}
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "best.json", "latest.json", "step_00000002.json", "step_00000002.safetensors",
        "step_00000002.train.safetensors", "step_00000006.json", "step_00000006.safetensors",
        "step_00000006.train.safetensors"]
