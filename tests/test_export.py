"""CTranslate2 export: the exported model's token log-probabilities equal attnlab's own (pre/post-norm, ReLU/GELU,
sinusoidal/learned positions, tied/untied output layer), greedy translations of a trained run are identical, the
CLI exports and translates, and RNN runs are refused. Exports are written like checkpoints (issue 36): never
through a symlink in a run or export folder, a kill leaves the old export or none, a stale or tampered export is
rebuilt (the run's own) or refused with one line (one named with --ct2-model)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from attnlab import load  # noqa: E402
from attnlab.app.cli import main  # noqa: E402
from attnlab.core.errors import AttnlabError  # noqa: E402
from attnlab.data.tokenizers import BOS_ID, EOS_ID, SPECIALS  # noqa: E402
from attnlab.interop.ctranslate2 import transformer_spec  # noqa: E402
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq  # noqa: E402
from attnlab.runs.workflow import export_run  # noqa: E402
from conftest import benchmark_module, check_export_spares_a_foreign_model, tiny_experiment  # noqa: E402

V = 40


@pytest.fixture(scope="module")
def tiny_runs(tiny_runs, tmp_path_factory):
    """This module's copies of the session's runs: an export to its default place writes into the run directory,
    which the other modules share."""
    root = tmp_path_factory.mktemp("export_runs")
    return {name: shutil.copytree(run, root / name) for name, run in tiny_runs.items()}


@pytest.mark.parametrize("norm, activation, positions, tie", [
    ("pre", "relu", "sinusoidal", "all"), ("post", "relu", "sinusoidal", "none"),
    ("pre", "gelu", "learned", "decoder"), ("post", "gelu", "learned", "all")])
def test_exported_log_probs_equal_attnlab(tmp_path, norm, activation, positions, tie):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, h=4, d_ff=64, enc_layers=2, dec_layers=2, dropout=0.0, norm=norm,
                            activation=activation, positions=positions, tie_embeddings=tie, max_len=64)
    model = TransformerSeq2Seq(V, V, cfg).eval()
    with torch.no_grad():  # away from the initialisation's zero biases and unit gains
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), V)]
    spec = transformer_spec(model, vocab, vocab)
    spec.validate()
    spec.optimize()
    (tmp_path / "ct2").mkdir()
    spec.save(str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    g = torch.Generator().manual_seed(1)
    for S, T in ((7, 5), (3, 9)):
        src = torch.randint(len(SPECIALS), V, (S,), generator=g).tolist() + [EOS_ID]
        tgt = torch.randint(len(SPECIALS), V, (T,), generator=g).tolist()
        with torch.no_grad():
            logits = model(torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[BOS_ID] + tgt]))
        ours = logits.log_softmax(-1)[0].gather(1, torch.tensor(tgt + [EOS_ID])[:, None])[:, 0]  # (T + 1,)
        theirs = translator.score_batch([[vocab[i] for i in src]], [[vocab[i] for i in tgt]])[0].log_probs
        torch.testing.assert_close(torch.tensor(theirs), ours, atol=1e-4, rtol=1e-4)


def test_greedy_translations_of_a_trained_run_are_identical(tiny_runs, tmp_path):
    from attnlab.decode.translate import CTranslate2Translator

    run = tiny_runs["transformer"]
    out = export_run(run, tmp_path / "ct2")
    ours = load(run).translator
    theirs = CTranslate2Translator(out, ours.tokenizers, ours.decode)
    sentences = ["the red house", "my old door opens", "a cat sees the big green window and the small red door",
                 "the", "and and and and and and and and and"]
    a = [t[0].text for t in ours.translate(sentences, beam_size=1)]
    b = [t[0].text for t in theirs.translate(sentences, beam_size=1)]
    assert a == b


def test_cli_export_translate_and_refusals(tiny_runs, tmp_path, capsys):
    run = tiny_runs["transformer"]
    src = tmp_path / "in.txt"
    src.write_text("the red house\nmy cat\n")
    assert main(["export", str(run), "--to", "ctranslate2", "--quantization", "int8", "--out",
                 str(tmp_path / "int8")]) == 0
    assert (tmp_path / "int8" / "model.bin").is_file()
    assert (tmp_path / "int8" / "tokenizer" / "tokenizer.json").is_file()  # tokenizing needs no attnlab
    capsys.readouterr()
    assert main(["translate", str(run), str(src), "--beam", "1", "--device", "cpu"]) == 0
    torch_out = capsys.readouterr().out
    assert main(["translate", str(run), str(src), "--beam", "1", "--engine", "ctranslate2", "--ct2-model",
                 str(tmp_path / "int8")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(torch_out.splitlines()) == 2
    assert main(["export", str(tiny_runs["rnn"]), "--to", "ctranslate2", "--out", str(tmp_path / "rnn")]) == 2
    assert "cannot be exported to CTranslate2" in capsys.readouterr().err
    # decoding an RNN run with CTranslate2: the same refusal, not an internal error (it read a Transformer's config)
    assert main(["translate", str(tiny_runs["rnn"]), str(src), "--engine", "ctranslate2"]) == 2
    err = capsys.readouterr().err
    assert "nor run by it" in err and "internal error" not in err
    with pytest.raises(AttnlabError, match="quantization"):
        export_run(run, tmp_path / "x", quantization="int3")


def test_attention_of_the_export_is_the_last_layers_mean_over_heads_and_served(tiny_runs):
    """CTranslate2 returns the last decoder layer's cross-attention averaged over heads: equal to attnlab's, and
    `attnlab serve --engine ctranslate2` answers with it (one layer, one head) and attnlab's translation."""
    from fastapi.testclient import TestClient

    from attnlab.app.server import create_app, load_models
    from attnlab.decode.translate import CTranslate2Translator

    run = tiny_runs["transformer"]
    ours = load(run).translator
    theirs = CTranslate2Translator(export_run(run), ours.tokenizers, ours.decode)
    a = ours.translate(["the red house", "my cat"], beam_size=1, need_weights=True)
    b = theirs.translate(["the red house", "my cat"], beam_size=1, need_weights=True)
    for x, y in zip(a, b):
        assert x[0].tgt_tokens == y[0].tgt_tokens
        torch.testing.assert_close(y[0].attention, x[0].attention[:, -1].mean(1), atol=1e-5, rtol=0)
    client = TestClient(create_app(load_models([run], engine="ctranslate2")), raise_server_exceptions=False)
    r = client.post("/api/translate", json={"model": "transformer", "sentence": "the red house", "beam": 1})
    assert r.status_code == 200 and (r.json()["layers"], r.json()["heads"]) == (1, 1)
    assert r.json()["translation"] == a[0][0].text


@pytest.mark.parametrize("norm, activation, positions", [("pre", "relu", "sinusoidal"), ("post", "gelu", "learned")])
def test_exported_language_model_log_probs_equal_attnlab(tmp_path, norm, activation, positions):
    """The decoder-only LM through ctranslate2.Generator: the log-probability of every next token equals
    attnlab's."""
    from attnlab.interop.ctranslate2 import language_model_spec
    from attnlab.nn.lm import LMModelConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(V, LMModelConfig(d_model=32, h=4, d_ff=64, layers=2, dropout=0.0, norm=norm,
                                           activation=activation, positions=positions, max_len=64)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), V)]
    spec = language_model_spec(model, vocab)
    spec.validate()
    spec.optimize()
    (tmp_path / "lm").mkdir()
    spec.save(str(tmp_path / "lm"))
    generator = ctranslate2.Generator(str(tmp_path / "lm"), device="cpu")
    tokens = [BOS_ID] + torch.randint(len(SPECIALS), V, (9,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ours = model(torch.tensor([tokens])).log_softmax(-1)[0, :-1].gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]
    theirs = generator.score_batch([[vocab[i] for i in tokens]])[0].log_probs
    torch.testing.assert_close(torch.tensor(theirs), ours, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------- exports written like checkpoints
SENTENCES = "the red house\nmy old door opens\na cat sees the big green window\n"


@pytest.fixture
def run_copy(tiny_runs, tmp_path):
    """A private copy of the trained Transformer run (the tests below damage it) and an input file."""
    (tmp_path / "in.txt").write_text(SENTENCES)
    return shutil.copytree(tiny_runs["transformer"], tmp_path / "run")


def translate(run, capsys, *extra) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `attnlab translate RUN in.txt --beam 1 ...` in this process."""
    capsys.readouterr()
    rc = main(["translate", str(run), str(run.parent / "in.txt"), "--beam", "1", "--device", "cpu", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


TAMPER = benchmark_module("export_tamper")  # the benchmark's decoys and snapshots, with the full counts
snapshot = TAMPER.snapshot


FILE_LINKS = ("model.bin", "config.json", "shared_vocabulary.json", "attnlab.json", "tokenizer/tokenizer.json")


@pytest.mark.parametrize("position", FILE_LINKS + ("tokenizer", "."))
@pytest.mark.parametrize("how", ["export", "export --out", "translate"])
def test_no_write_through_a_symlink_in_an_export_folder(run_copy, tmp_path, capsys, position, how):
    """A symlink at any position of an export folder (a file, the tokenizer folder, the export folder itself) to a
    decoy: `attnlab export` (default place or --out) and `translate --engine ctranslate2` never write into the
    decoy; a linked file or tokenizer folder is replaced by the export's own, a linked export folder refused."""
    out = tmp_path / "out" if how == "export --out" else run_copy / "ctranslate2-best-float32"
    assert main(["export", str(run_copy)] + (["--out", str(out)] if how == "export --out" else [])) == 0
    decoys = tmp_path / "decoys"
    (decoys / "folder").mkdir(parents=True)
    (decoys / "file").write_bytes(b"decoy")
    target = out / position if position != "." else out
    if position in FILE_LINKS:
        target.unlink()
        target.symlink_to(decoys / "file")
    else:
        shutil.rmtree(target)
        target.symlink_to(decoys / "folder", target_is_directory=True)
    capsys.readouterr()
    if how == "translate":
        rc, _, err = translate(run_copy, capsys, "--engine", "ctranslate2")
    else:
        rc = main(["export", str(run_copy)] + (["--out", str(out)] if how == "export --out" else []))
        err = capsys.readouterr().err
    assert snapshot(decoys) == {"file": b"decoy"}  # no decoy modified, nothing written into the decoy folder
    if position == ".":  # the export folder itself: refused, naming it
        assert rc == 2 and "is a symlink" in err and str(out) in err and len(error_lines(err)) == 1
    else:
        assert rc == 0 and not target.is_symlink()
        assert "model.bin" in snapshot(out)


@pytest.mark.parametrize("position", ["tokenizer", "checkpoints", "eval", "config.json", "metrics.jsonl",
                                      "tokenizer/tokenizer.json", "checkpoints/best.json", "checkpoints/latest.json",
                                      "checkpoints/step_00000020.json", "eval/dev.json"])
def test_no_write_through_a_symlink_in_a_run_folder(tiny_runs, tmp_path, capsys, position):
    """A symlink in a run folder to a decoy (a copy of what it replaces, so that reading it succeeds): `train
    --resume` (config, metrics, checkpoints, tokenizer) and `evaluate` (eval/) never write into it: a linked
    folder we write into is refused with one line naming it, a linked file is replaced (metrics.jsonl, appended
    to, is refused)."""
    run = shutil.copytree(tiny_runs["transformer"], tmp_path / "run")
    # The resumed validation improves on a best score this low whatever its BLEU, so best.json is rewritten and
    # step 20 pruned: the check does not depend on the tiny run's training outcome.
    state_file = run / "checkpoints" / "step_00000020.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "best_score": -1e29}))
    decoys = tmp_path / "decoys"
    target = run / position
    TAMPER.link_to_decoy(target, decoys, folder=position in ("tokenizer", "checkpoints", "eval"))
    before = snapshot(decoys)
    capsys.readouterr()
    if position.startswith("eval"):
        rc = main(["evaluate", str(run), "--split", "dev", "--device", "cpu", "--beam", "1", "--max-sentences", "5"])
    else:
        rc = main(["train", "--resume", str(run), "--set", "train.max_steps=22"])
    err = capsys.readouterr().err
    assert snapshot(decoys) == before  # no decoy modified, nothing written into a decoy folder
    if position in ("checkpoints", "eval"):
        assert rc == 2 and error_lines(err) == [f"attnlab: error: {target}: is a symlink; attnlab never writes "
                                                "through a link inside a run or export folder (remove the link)"]
    elif position.startswith("tokenizer"):  # resume only reads the tokenizer (through the link: no write)
        assert rc == 0
    else:  # replaced by the run's own file
        assert rc == 0 and not target.is_symlink(), err


def error_lines(stderr: str) -> list[str]:
    """The error lines of a command's stderr (the rest is its log)."""
    return [line for line in stderr.splitlines() if line.startswith("attnlab:")]


def test_a_new_run_refuses_a_linked_tokenizer_folder(tiny_tsv, tmp_path):
    from attnlab.runs.workflow import train

    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "decoy").mkdir()
    (run / "tokenizer").symlink_to(tmp_path / "decoy", target_is_directory=True)
    with pytest.raises(AttnlabError, match="tokenizer: is a symlink"):
        train(tiny_experiment(tiny_tsv, "transformer", max_steps=1), run)
    assert not list((tmp_path / "decoy").iterdir())


def test_a_kill_during_the_export_leaves_the_old_export_or_none(run_copy, capsys, monkeypatch):
    """CTranslate2 writes model.bin into a private folder that is renamed into place when complete: an export
    interrupted while model.bin is half written leaves no export (or the old one), and the next `translate
    --engine ctranslate2` exports again. A truncated model.bin and a kill's leftovers are rebuilt too."""
    rc, reference, _ = translate(run_copy, capsys)
    assert rc == 0
    out = run_copy / "ctranslate2-best-float32"
    shutil.rmtree(out, ignore_errors=True)
    spec_class = type(transformer_spec(*_tiny_model_and_vocab()))

    def killed_save(self, output_dir):
        (Path(output_dir) / "model.bin").write_bytes(b"\0" * 1000)  # half a model.bin, then the kill
        raise KeyboardInterrupt

    for _ in range(2):  # no export yet, then an old one
        old = snapshot(out) if out.exists() else None
        with monkeypatch.context() as m:
            m.setattr(spec_class, "save", killed_save)
            assert main(["export", str(run_copy)]) == 130
        assert (snapshot(out) if out.exists() else None) == old  # the old export or none
        assert not list(run_copy.glob(".ctranslate2*"))  # nothing half-made left
        assert translate(run_copy, capsys, "--engine", "ctranslate2")[:2] == (0, reference)
    good = snapshot(out)
    # what a SIGKILL leaves: an export cut short (no manifest, a truncated model.bin) beside a staging folder
    (out / "attnlab.json").unlink()
    (out / "model.bin").write_bytes(good["model.bin"][:5000])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a process that has ended
    staging = run_copy / f".ctranslate2-best-float32.p{dead}.0badcafe.tmp"
    shutil.copytree(out, staging)
    rc, text, err = translate(run_copy, capsys, "--engine", "ctranslate2")
    assert (rc, text) == (0, reference) and snapshot(out) == good
    assert not staging.exists()  # the next export of the run cleaned the killed one's staging folder (issue 47)
    # the same export named with --ct2-model: refused with one line naming the file, no traceback
    (out / "model.bin").write_bytes(good["model.bin"][:5000])
    rc, text, err = translate(run_copy, capsys, "--engine", "ctranslate2", "--ct2-model", str(out))
    assert rc == 2 and text == "" and "model.bin" in err and len(error_lines(err)) == 1


def _tiny_model_and_vocab():
    model = TransformerSeq2Seq(V, V, TransformerConfig(d_model=8, h=2, d_ff=16, enc_layers=1, dec_layers=1,
                                                       max_len=16))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), V)]
    return model, vocab, vocab


def test_a_stale_export_is_rebuilt(run_copy, capsys):
    """After the checkpoint `--checkpoint last` names moved (as `train --resume` does), `translate --engine
    ctranslate2` exports again instead of reusing the old export, and translates like the PyTorch engine."""
    from attnlab.core.checkpoint import load_weights, resolve_checkpoint, save_weights
    from attnlab.core.fileio import write_json

    rc, before, _ = translate(run_copy, capsys, "--engine", "ctranslate2", "--checkpoint", "last")
    assert rc == 0
    out = run_copy / "ctranslate2-last-float32"
    old = snapshot(out)
    model = load(run_copy).translator.model
    load_weights(model, resolve_checkpoint(run_copy, "last"))
    with torch.no_grad():  # another step's weights: a different greedy output
        model.generator.weight.copy_(model.generator.weight.roll(1, 0))
    save_weights(model, run_copy / "checkpoints" / "step_00000099.safetensors")
    shutil.copy(run_copy / "checkpoints" / "step_00000020.json", run_copy / "checkpoints" / "step_00000099.json")
    write_json(run_copy / "checkpoints" / "latest.json", {"step": 99, "name": "step_00000099"})
    rc, torch_out, _ = translate(run_copy, capsys, "--checkpoint", "last")
    assert rc == 0 and torch_out != before
    rc, ct2_out, _ = translate(run_copy, capsys, "--engine", "ctranslate2", "--checkpoint", "last")
    assert (rc, ct2_out) == (0, torch_out)
    assert snapshot(out)["model.bin"] != old["model.bin"]
    assert '"step_00000099.safetensors"' in (out / "attnlab.json").read_text()


def shuffle(tokens):
    return tokens[:4] + tokens[5:6] + tokens[4:5] + tokens[6:]


TAMPERS = {  # name: (file, what it does to the file's bytes)
    "model.bin truncated": ("model.bin", lambda b: b[: len(b) // 2]),
    "model.bin byte flipped": ("model.bin", lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0x01])
                               + b[len(b) // 2 + 1:]),
    "model.bin zeroed": ("model.bin", lambda b: bytes(len(b))),
    "config.json bad JSON": ("config.json", lambda b: b[:-5]),
    "decoder_start_token": ("config.json", lambda b: b.replace(b'"decoder_start_token": "<s>"',
                                                              b'"decoder_start_token": "</s>"')),
    "layer_norm_epsilon 1e300": ("config.json", lambda b: b.replace(b"1e-05", b"1e300")),
    "layer_norm_epsilon -1": ("config.json", lambda b: b.replace(b"1e-05", b"-1")),
    "layer_norm_epsilon 0.5": ("config.json", lambda b: b.replace(b"1e-05", b"0.5")),  # in range, not attnlab's
    "vocabulary shuffled": ("shared_vocabulary.json",
                            lambda b: json.dumps(shuffle(json.loads(b))).encode()),
    "vocabulary entry renamed": ("shared_vocabulary.json",
                                 lambda b: json.dumps(json.loads(b)[:-1] + ["renamed"]).encode()),
    "vocabulary entry missing": ("shared_vocabulary.json", lambda b: json.dumps(json.loads(b)[:-1]).encode()),
}


@pytest.fixture(scope="module")
def exported(tiny_runs, tmp_path_factory):
    """A copy of the trained Transformer run with its own export (the tamper tests damage the export, and put it
    back after), and the PyTorch engine's translation of in.txt."""
    run = shutil.copytree(tiny_runs["transformer"], tmp_path_factory.mktemp("tamper") / "run")
    (run.parent / "in.txt").write_text(SENTENCES)
    out = run / "ctranslate2-best-float32"
    shutil.rmtree(out, ignore_errors=True)
    export_run(run, out)
    return run, [t[0].text + "\n" for t in load(run).translator.translate(SENTENCES.splitlines(), beam_size=1)]


@pytest.mark.parametrize("rehash", [False, True], ids=["manifest", "rehashed manifest"])
@pytest.mark.parametrize("name", list(TAMPERS))
def test_a_tampered_export_is_rebuilt_or_refused(exported, capsys, name, rehash):
    """Every tamper family, on the run's own export (rebuilt, then translated like the PyTorch engine) and on an
    export named with --ct2-model (refused: exit 2, one line naming the file), also when the tamperer rewrote the
    manifest's hashes (then the files themselves are checked against the run's tokenizer). No traceback, no wrong
    translation with exit 0 (but a flipped weight byte under a rewritten manifest, which only the hash finds)."""
    from attnlab.interop.ctranslate2 import export_files

    run, reference = exported
    reference = "".join(reference)
    own = run / "ctranslate2-best-float32"
    good = snapshot(own)
    file, tamper = TAMPERS[name]
    try:
        for explicit in (True, False):
            (own / file).write_bytes(tamper(good[file]))
            assert (own / file).read_bytes() != good[file]
            if rehash:
                manifest = json.loads(good["attnlab.json"])
                manifest["files"] = export_files(own)
                (own / "attnlab.json").write_text(json.dumps(manifest))
            rc, text, err = translate(run, capsys, "--engine", "ctranslate2",
                                      *(["--ct2-model", str(own)] if explicit else []))
            if rc == 0 and rehash and name == "model.bin byte flipped":
                continue  # a valid model with one weight changed: only the manifest's hash could tell
            if explicit:
                assert rc == 2 and text == "" and str(own) in err and len(error_lines(err)) == 1, err
            else:
                assert (rc, text) == (0, reference), err
                assert snapshot(own)[file] == good[file]
    finally:
        for f, data in good.items():
            (own / f).write_bytes(data)


def test_export_out_must_not_be_the_current_folder_or_hold_other_files(run_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_copy), "--out", ""]) == 2
    assert "current folder" in capsys.readouterr().err and not (tmp_path / "model.bin").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main(["export", str(run_copy), "--out", str(tmp_path / "mine")]) == 2
    assert "notes.txt" in capsys.readouterr().err and (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert main(["export", str(run_copy), "--out", str(tmp_path / "new")]) == 0  # and again over its own export
    assert main(["export", str(run_copy), "--out", str(tmp_path / "new")]) == 0
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["attnlab.json", "config.json", "model.bin",
                                                                    "shared_vocabulary.json", "tokenizer"]


def test_a_ct2_export_never_replaces_a_model_folder_another_tool_made(tiny_runs, tmp_path, capsys):
    """A downloaded model named as --out is never replaced (it was, exit 0)."""
    check_export_spares_a_foreign_model(tiny_runs["transformer"], "ctranslate2",
                                        ("config.json", "model.bin", "shared_vocabulary.json"), tmp_path, capsys)
