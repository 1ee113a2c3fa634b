"""Hugging Face in and out (issue 38): an exported run loads with `transformers`' Auto classes and no attnlab code,
its teacher-forced logits equal attnlab's to 1e-4 (fp32), greedy `generate` equals attnlab's greedy search token
for token, the tokenizer gives attnlab's ids; a config no class expresses is refused with one line. An imported
MarianMT model (made here with random weights, swish, OPUS-MT's special ids) gives HF's log-probabilities and
greedy outputs; export -> import -> export is bit-equal. No network: every model is made locally."""

import json
import random
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from attnlab.app.cli import main  # noqa: E402
from attnlab.app.workflow import load_run, train  # noqa: E402
from attnlab.core.checkpoint import resolve_checkpoint, save_weights  # noqa: E402
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from attnlab.decode.search import greedy_search, max_output_length  # noqa: E402
from attnlab.families.translation import experiment_from_dict  # noqa: E402
from attnlab.interop.huggingface import hidden_permutation  # noqa: E402
from attnlab.nn.transformer import PositionalEncoding  # noqa: E402
from conftest import make_pairs, one_thread  # noqa: E402

SENTENCES = ["the red house", "my old door opens", "a cat sees the big green window", "x", "",
             "Zürich 東京 naïve", "literal </s> <unk> <s>", "  two  spaces "]
VARIANTS = {  # name: (model.transformer settings, tokenizer.joint)
    "post-none-sep-gelu": ({"norm": "post", "tie_embeddings": "none", "activation": "gelu"}, False),
    "post-decoder-nobias": ({"norm": "post", "tie_embeddings": "decoder", "bias": False}, True),
    "post-all-silu": ({"norm": "post", "tie_embeddings": "all", "activation": "silu"}, True),
    "pre-all-gelu": ({"norm": "pre", "tie_embeddings": "all", "activation": "gelu"}, True),
}


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer: "Recommended: pip install sacremoses" (never used)
        return fn(*args, **kwargs)


def experiment(tiny_tsv, transformer: dict, joint: bool, kind: str = "unigram"):
    return experiment_from_dict({
        "data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                 "test": [str(tiny_tsv / "test.tsv")]},
        "tokenizer": {"kind": kind, "vocab_size": 300, "joint": joint},
        "model": {"family": "transformer", "transformer": {"d_model": 16, "h": 4, "d_ff": 40, "enc_layers": 2,
                                                           "dec_layers": 2, "max_len": 128, **transformer}},
        "train": {"max_steps": 2, "max_tokens": 800, "eval_every": 2, "log_every": 1, "seed": 3, "progress": False,
                  "keep_last": 1, "eval_max_sentences": 4},
    })


def fill_random(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random (biases and LayerNorm gains too): a tensor mapped to the wrong place cannot hide
    behind a zero or a one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1:
                p.copy_((1 if "norm" in name and name.endswith("weight") else 0) + 0.2 * noise)
            else:
                p.add_(0.5 * noise * p.std())


@pytest.fixture(scope="module")
def runs(tiny_tsv, tmp_path_factory):
    """{variant: run directory}: trained 2 steps, then every weight made random and saved as its best checkpoint."""
    root = tmp_path_factory.mktemp("hf_runs")
    out = {}
    with one_thread():
        for k, (name, (transformer, joint)) in enumerate(VARIANTS.items()):
            train(experiment(tiny_tsv, transformer, joint), root / name)
            run = load_run(root / name)
            fill_random(run.model, seed=k)
            save_weights(run.model, resolve_checkpoint(root / name), root / name)
            out[name] = root / name
    return out


def pad(seqs: list[list[int]], value: int = PAD_ID) -> torch.Tensor:
    L = max(map(len, seqs))
    return torch.tensor([s + [value] * (L - len(s)) for s in seqs])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_export_loads_and_computes_what_attnlab_computes(runs, tmp_path, name, capsys):
    out = tmp_path / "hf"
    assert main(["export", str(runs[name]), "--to", "huggingface", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out), output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    expected = "PegasusForConditionalGeneration" if name.startswith("pre") else "MarianMTModel"
    assert type(model).__name__ == expected
    hf, tok = model.eval(), quiet(transformers.AutoTokenizer.from_pretrained, str(out))
    run = load_run(runs[name])
    att, pair = run.model, run.tokenizers
    # the tokenizer: attnlab's ids (source + EOS, target + EOS)
    for text in SENTENCES:
        assert tok(text).input_ids == pair.src.encode(text) + [EOS_ID], text
        assert tok(text_target=text).input_ids == pair.tgt.encode(text) + [EOS_ID], text
    # teacher-forced logits, right-padded batches of different lengths
    rng = random.Random(1)
    V = min(pair.src.vocab_size, pair.tgt.vocab_size)
    src = [[rng.randrange(4, V) for _ in range(rng.randint(1, 15))] + [EOS_ID] for _ in range(6)]
    tgt = [[rng.randrange(4, V) for _ in range(rng.randint(1, 15))] for _ in range(6)]
    x, lengths, y_in = pad(src), torch.tensor([len(s) for s in src]), pad([[BOS_ID] + t for t in tgt])
    with torch.no_grad():
        ours = att(x, lengths, y_in)  # (B, T, V)
        theirs = hf(input_ids=x, attention_mask=(x != PAD_ID).long(), decoder_input_ids=y_in).logits
    real = torch.arange(y_in.size(1))[None] < torch.tensor([len(t) + 1 for t in tgt])[:, None]  # (B, T)
    assert float((ours - theirs).abs()[real].max()) < 1e-4
    # greedy: attnlab's per-sentence limit, HF one sentence at a time with the exported generation_config
    ids = [pair.src.encode(s) + [EOS_ID] for s in SENTENCES]
    limits = max_output_length(torch.tensor([len(s) for s in ids]))
    with torch.no_grad():
        hyps = greedy_search(att, pad(ids), torch.tensor([len(s) for s in ids]), limits, banned=pair.tgt.control_ids)
        for i, text in enumerate(SENTENCES):
            gen = hf.generate(**tok(text, return_tensors="pt"), max_new_tokens=int(limits[i]))[0, 1:].tolist()
            ours_ids = hyps[i][0].tokens + ([EOS_ID] if hyps[i][0].finished else [])
            assert gen == ours_ids, text
            assert tok.decode(gen, skip_special_tokens=True) == pair.tgt.decode(ours_ids).strip(), text
    card = (out / "README.md").read_text()
    assert "2 steps" in card and "AutoModelForSeq2SeqLM.from_pretrained(DIR)" in card


def test_sinusoids_agree_after_the_permutation():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding
    for D in (15, 16, 64):
        theirs = MarianSinusoidalPositionalEmbedding(50, D).create_weight()
        ours = PositionalEncoding(D, 50).pe[:, hidden_permutation(D)]
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("overrides, joint, kind, setting", [
    ({"positions": "learned"}, True, "unigram", "positions = 'learned'"),
    ({"layer_norm_eps": 1e-6}, True, "unigram", "layer_norm_eps"),
    ({"norm": "pre", "tie_embeddings": "decoder"}, True, "unigram", "tie_embeddings = 'decoder' with norm = 'pre'"),
    ({}, True, "char", "tokenizer.kind = 'char'"),
])
def test_refused_configs_give_one_line(tiny_tsv, tmp_path, capsys, overrides, joint, kind, setting):
    with one_thread():
        train(experiment(tiny_tsv, {"norm": "post", **overrides}, joint, kind), tmp_path / "run")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--to", "huggingface", "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and setting in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


def test_export_refuses_a_foreign_folder_and_an_rnn_run(runs, tiny_runs, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main(["export", str(runs["post-all-silu"]), "--to", "huggingface", "--out", str(tmp_path / "mine")]) == 2
    assert "notes.txt" in capsys.readouterr().err and (tmp_path / "mine" / "notes.txt").is_file()
    assert main(["export", str(tiny_runs["rnn"]), "--to", "huggingface", "--out", str(tmp_path / "rnn")]) == 2
    err = capsys.readouterr().err
    assert "cannot be exported to Hugging Face" in err and len(err.strip().splitlines()) == 1
