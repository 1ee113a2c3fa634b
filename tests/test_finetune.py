"""Fine-tuning a whole translation run (`attnlab train CONFIG --init RUN_DIR`, issue 38): a MarianMT model made
here (OPUS-MT's conventions, random weights) is imported, and a run started from it computes what `transformers`
computes with that model before its first update and reads text with its tokenizer (checked against
MarianTokenizer); a fine-tune stopped and resumed gives the uninterrupted run's weights bit for bit; a config
that disagrees with the run, a run of another family and a missing run are refused with one line."""

import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from attnlab.app.api import train as api_train  # noqa: E402
from attnlab.app.cli import main  # noqa: E402
from attnlab.core.checkpoint import resolve_checkpoint  # noqa: E402
from attnlab.core.errors import AttnlabError  # noqa: E402
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from attnlab.families.table import load_family_config  # noqa: E402
from attnlab.families.translation import ExperimentConfig, PretrainedConfig  # noqa: E402
from attnlab.runs.run import typed_config  # noqa: E402
from attnlab.runs.workflow import load_run  # noqa: E402
from conftest import make_pairs, one_thread  # noqa: E402
from test_huggingface import imported_opus  # noqa: E402

TRAIN = {"max_tokens": 600, "lr": 0.003, "eval_every": 3, "log_every": 1, "seed": 5, "progress": False,
         "keep_last": 1, "eval_max_sentences": 4, "num_threads": 1}


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(the MarianMT folder, the run `attnlab import` made of it)."""
    return imported_opus(tmp_path_factory.mktemp("finetune"), "imported")


def pad(seqs: list[list[int]], value: int = PAD_ID) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [value] * (width - len(s)) for s in seqs])  # (B, L)


def write_config(path, tiny_tsv, **sections) -> str:
    """A fine-tuning config: data and train only (no model, no tokenizer: they are the run's)."""
    cfg = {"data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                    "test": [str(tiny_tsv / "test.tsv")]},
           "train": TRAIN, **sections}
    path.write_text(json.dumps(cfg))
    return str(path)


def weights(run_dir, which="last") -> dict[str, torch.Tensor]:
    return load_file(str(resolve_checkpoint(run_dir, which)))


def test_update_0_is_the_imported_model_and_its_tokenizer(marian, tiny_tsv, tmp_path):
    folder, imported = marian
    config = write_config(tmp_path / "ft.json", tiny_tsv)
    with one_thread():
        assert main(["train", config, "--init", str(imported), "--out", str(tmp_path / "ft"),
                     "--set", "train.max_steps=0"]) == 0
    start, theirs = weights(tmp_path / "ft"), weights(imported)
    assert sorted(start) == sorted(theirs) and all(torch.equal(start[k], theirs[k]) for k in theirs)
    run = load_run(tmp_path / "ft")
    stored = json.loads((tmp_path / "ft/config.json").read_text())
    assert stored["pretrained"]["init"] == str(imported) and stored["tokenizer"]["kind"] == "marian"
    # the independent reference: transformers' MarianMT and MarianTokenizer of the folder that was imported
    hf = transformers.MarianMTModel.from_pretrained(str(folder)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer: "Recommended: pip install sacremoses" (never used)
        hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    rows = torch.tensor(run.tokenizers.src.rows)
    hf_to_att = torch.full((hf.config.vocab_size,), -1)
    hf_to_att[rows[rows >= 0]] = torch.arange(len(rows))[rows >= 0]
    texts = make_pairs(6, seed=11)
    src = [hf_tok(s).input_ids for s, _ in texts]
    tgt = [hf_tok(text_target=t).input_ids for _, t in texts]
    for s, ids in zip(texts, src):
        assert hf_to_att[ids].tolist() == run.tokenizers.src.encode(s[0]) + [EOS_ID]
    mask = torch.tensor([[1] * len(s) + [0] * (max(map(len, src)) - len(s)) for s in src])
    y_out = pad(tgt, -100)
    real = y_out != -100
    with torch.no_grad():
        lp_hf = hf(input_ids=pad(src, hf.config.pad_token_id), attention_mask=mask,
                   decoder_input_ids=pad([[hf.config.decoder_start_token_id] + t[:-1] for t in tgt],
                                         hf.config.pad_token_id)).logits.log_softmax(-1)  # (B, T, V)
        lp_att = run.model(pad([hf_to_att[s].tolist() for s in src]), mask.sum(1),
                           pad([[BOS_ID] + hf_to_att[t[:-1]].tolist() for t in tgt])).log_softmax(-1)
    assert float((lp_hf - lp_att[..., hf_to_att]).abs()[real].max()) < 1e-4


def test_a_fine_tune_resumed_equals_the_uninterrupted_one(marian, tiny_tsv, tmp_path):
    imported = marian[1]
    config = write_config(tmp_path / "ft.json", tiny_tsv)
    with one_thread():
        assert main(["train", config, "--init", str(imported), "--out", str(tmp_path / "straight"),
                     "--set", "train.max_steps=6"]) == 0
        # the Python API and the config key: the same run, stopped after 3 updates, then resumed
        api_train(config, tmp_path / "halves", overrides={"pretrained.init": str(imported), "train.max_steps": 3})
        assert main(["train", "--resume", str(tmp_path / "halves"), "--set", "train.max_steps=6"]) == 0
    a, b, start = weights(tmp_path / "straight"), weights(tmp_path / "halves"), weights(imported)
    assert sorted(a) == sorted(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=k)
    assert any(not torch.equal(a[k], start[k]) for k in a)  # it did train
    steps = [json.loads(x)["step"] for x in (tmp_path / "halves/metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and max(steps) == 6


def test_a_config_without_a_model_is_completed_from_the_run(marian, tiny_tsv, tmp_path):
    """A file or a dict config with the key and no model section gets the run's model and its family's row (the
    row of a config without [model] is the RNN's until it is completed)."""
    cfg = {"data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")]}, "train": TRAIN,
           "pretrained": {"init": str(marian[1])}}
    family, typed, _ = typed_config(cfg, [])
    assert family.name == "transformer" and typed.model.family == "transformer"
    assert typed.model.transformer.activation == "silu" and typed.model.transformer.d_model == 16
    assert typed.tokenizer.kind == "marian"
    assert "model" not in cfg and "tokenizer" not in cfg  # the caller's dict is left as it was
    config = write_config(tmp_path / "ft.json", tiny_tsv)
    family, typed, _ = typed_config(config, [f"pretrained.init={marian[1]}"])
    assert family.name == "transformer" and typed.model.transformer.activation == "silu"
    family, typed = load_family_config(config, [f"pretrained.init={marian[1]}"])  # attnlab summary, data prepare
    assert family.name == "transformer" and typed.tokenizer.kind == "marian"


@pytest.fixture
def refused(marian, tiny_tsv, tmp_path, capsys):
    """f(*argv) -> the one line `attnlab train` printed on stderr, after checking exit code 2."""
    def run(*argv: str) -> str:
        assert main(["train", *argv, "--out", str(tmp_path / "never")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert not (tmp_path / "never").exists()
        return err
    return run


def test_refusals(marian, tiny_tsv, tmp_path, refused):
    imported = str(marian[1])
    config = write_config(tmp_path / "ft.json", tiny_tsv)
    err = refused(config, "--init", imported, "--set", "model.transformer.d_model=32")
    assert "model.transformer.d_model = 32 disagrees" in err and "whose model.transformer.d_model is 16" in err
    err = refused(write_config(tmp_path / "rnn.json", tiny_tsv, model={"family": "rnn"}), "--init", imported)
    assert "model.family = 'rnn' disagrees" in err
    assert "tokenizer.vocab_size = 8000 disagrees" in refused(config, "--init", imported,
                                                              "--set", "tokenizer.vocab_size=8000")
    assert "not a run directory" in refused(config, "--init", str(tmp_path / "missing"))
    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "config.json").write_text(json.dumps({"model": {"family": "lm"}}))
    assert "is a language-model run" in refused(config, "--init", str(lm))
    pair = tmp_path / "pair"
    pair.mkdir()
    (pair / "config.json").write_text(json.dumps({"model": {"family": "decomposable"}}))
    assert "is not a translation run (its model.family is 'decomposable')" in refused(config, "--init", str(pair))
    (tmp_path / "lm.toml").write_text('[model]\nfamily = "lm"\n')
    assert "--init fine-tunes a translation run" in refused(str(tmp_path / "lm.toml"), "--init", imported)
    assert "choose one" in refused(config, "--init", imported, "--set", "pretrained.decoder=runs/lm")
    assert "--resume continues a run" in refused("--resume", "--init", imported)


def test_an_init_refused_at_its_weights_or_config_leaves_no_run_folder(marian, tiny_tsv, tmp_path, refused, capsys):
    """Issue 47: a run whose weights hold NaN, or whose config has no tokenizer section, is refused with one error
    line, and the new run's folder (made before the weights are read) is removed again."""
    import shutil
    config = write_config(tmp_path / "ft.json", tiny_tsv)
    nan = tmp_path / "nan-run"
    shutil.copytree(marian[1], nan)
    for path in (nan / "checkpoints").glob("step_*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
        save_file({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
                   for k, v in load_file(str(path)).items()}, str(path), metadata=meta)
    capsys.readouterr()
    assert main(["train", config, "--init", str(nan), "--out", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the corpus was prepared and logged before the weights
    assert [line for line in err if line.startswith("attnlab: error:")] == err[-1:] and "NaN or infinite" in err[-1]
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "never").exists()
    bare = tmp_path / "no-tokenizer-section"
    shutil.copytree(marian[1], bare)
    raw = json.loads((bare / "config.json").read_text())
    del raw["tokenizer"]
    (bare / "config.json").write_text(json.dumps(raw))
    assert "has no tokenizer section" in refused(config, "--init", str(bare))


def test_a_config_object_that_disagrees_is_refused_before_training(marian, tmp_path):
    with pytest.raises(AttnlabError, match="model.family = 'rnn' disagrees"):
        api_train(ExperimentConfig(pretrained=PretrainedConfig(init=str(marian[1]))), tmp_path / "never")
