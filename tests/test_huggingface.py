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
from attnlab.core.checkpoint import resolve_checkpoint, save_weights  # noqa: E402
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from attnlab.decode.search import greedy_search, max_output_length  # noqa: E402
from attnlab.families.translation import experiment_from_dict  # noqa: E402
from attnlab.interop.marian import hidden_permutation  # noqa: E402
from attnlab.nn.transformer import PositionalEncoding  # noqa: E402
from attnlab.runs.workflow import load_run, train  # noqa: E402
from conftest import check_export_spares_a_foreign_model, make_pairs, one_thread  # noqa: E402

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


def test_a_pegasus_export_converts_with_ctranslate2s_own_converter(runs, tmp_path):
    """Issue 47: `ct2-transformers-converter` (here its class, TransformersConverter) takes the pre-norm export
    (Pegasus): CTranslate2 scores a target as attnlab does (1e-4) and decodes greedily to attnlab's tokens, starting
    from attnlab's <s> (the converter starts a Pegasus decoder with the tokenizer's pad token)."""
    ct2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    hf = tmp_path / "hf"
    assert main(["export", str(runs["pre-all-gelu"]), "--to", "huggingface", "--out", str(hf)]) == 0
    quiet(TransformersConverter(str(hf)).convert, str(tmp_path / "ct2"))
    assert json.loads((tmp_path / "ct2/config.json").read_text())["decoder_start_token"] == "<s>"
    tok = quiet(transformers.AutoTokenizer.from_pretrained, str(hf))
    translator = ct2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    run = load_run(runs["pre-all-gelu"])
    att, pair = run.model, run.tokenizers
    texts = [s for s in SENTENCES if s.strip()]
    src = [tok.convert_ids_to_tokens(tok(s).input_ids) for s in texts]
    tgt = [tok.convert_ids_to_tokens(tok(text_target=t).input_ids)[:-1] for t in reversed(texts)]
    scored = translator.score_batch(src, tgt)
    ids = [pair.src.encode(s) + [EOS_ID] for s in texts]
    y = [pair.tgt.encode(t) for t in reversed(texts)]
    with torch.no_grad():
        lp = att(pad(ids), torch.tensor([len(s) for s in ids]), pad([[BOS_ID] + t for t in y])).log_softmax(-1)
    for b, res in enumerate(scored):
        ours = lp[b, torch.arange(len(y[b]) + 1), torch.tensor(y[b] + [EOS_ID])]
        assert len(res.log_probs) == len(y[b]) + 1
        assert float((torch.tensor(res.log_probs) - ours).abs().max()) < 1e-4
    gen = json.loads((hf / "generation_config.json").read_text())
    limits = max_output_length(torch.tensor([len(s) for s in ids]))
    with torch.no_grad():
        hyps = greedy_search(att, pad(ids), torch.tensor([len(s) for s in ids]), limits, banned=pair.tgt.control_ids)
    for i, piece_list in enumerate(src):
        out = translator.translate_batch([piece_list], beam_size=1, max_decoding_length=int(limits[i]),
                                         suppress_sequences=[[p] for p in tok.convert_ids_to_tokens(
                                             gen["suppress_tokens"])])[0].hypotheses[0]
        assert out == [pair.tgt.id_to_piece(t) for t in hyps[i][0].tokens], texts[i]


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


# ------------------------------------------------------------------------------------------------ import
def opus_like_folder(root, en: list[str], es: list[str]):
    """A local MarianMT folder in OPUS-MT's conventions: separate source/target SentencePiece models, one
    vocab.json (</s> 0, <unk> 1, pieces, <pad> last), swish, a non-zero final_logits_bias, pad as decoder start."""
    import sentencepiece as spm
    folder = root / "opus-like"
    folder.mkdir()
    for name, texts in (("source", en), ("target", es)):
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(folder / name), vocab_size=60,
                                       model_type="unigram", minloglevel=2, hard_vocab_limit=False)
        (folder / f"{name}.model").rename(folder / f"{name}.spm")
        (folder / f"{name}.vocab").unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(folder / f"{name}.spm"))
        for i in range(3, sp.get_piece_size()):  # after <unk>, <s>, </s>
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    V, pad_id = len(vocab), vocab["<pad>"]
    cfg = transformers.MarianConfig(
        vocab_size=V, decoder_vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=40, decoder_ffn_dim=40, activation_function="swish",
        max_position_embeddings=128, scale_embedding=True, pad_token_id=pad_id, eos_token_id=0,
        decoder_start_token_id=pad_id, forced_eos_token_id=0, share_encoder_decoder_embeddings=True)
    torch.manual_seed(7)
    model = transformers.MarianMTModel(cfg)
    model.generation_config.bad_words_ids = [[pad_id]]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.add_(0.2 * torch.randn_like(p))
        model.final_logits_bias.copy_(0.5 * torch.randn_like(model.final_logits_bias))
    model.save_pretrained(str(folder))
    tok = quiet(transformers.MarianTokenizer, str(folder / "source.spm"), str(folder / "target.spm"),
                str(folder / "vocab.json"))
    tok.save_pretrained(str(folder))
    return folder


def imported_opus(root, name: str):
    """(an `opus_like_folder` of the synthetic task, the run directory `attnlab import` made of it as root/name),
    for the tests that use an imported Marian (fine-tuning, the browser)."""
    pairs = make_pairs(300, seed=4)
    with one_thread():
        folder = opus_like_folder(root, [a for a, _ in pairs], [b for _, b in pairs])
        assert main(["import", str(folder), "--out", str(root / name)]) == 0
    return folder, root / name


def assert_import_refused(cases: dict, tmp_path, capsys) -> None:
    """Each {name: (folder, expected)}: `attnlab import` exits 2 with one line holding `expected`, no traceback,
    and leaves no run directory."""
    for name, (folder, expected) in cases.items():
        capsys.readouterr()
        assert main(["import", str(folder), "--out", str(tmp_path / f"run-{name}")]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err, (name, err)
        assert not (tmp_path / f"run-{name}").exists()


@pytest.fixture(scope="module")
def opus(tmp_path_factory):
    pairs = make_pairs(300, seed=4)
    return opus_like_folder(tmp_path_factory.mktemp("opus"), [a for a, _ in pairs], [b for _, b in pairs])


def test_import_of_a_marian_model_computes_what_hf_computes(opus, tmp_path, capsys):
    assert main(["import", str(opus), "--out", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "run")
    hf = transformers.MarianMTModel.from_pretrained(str(opus)).eval()
    hf_tok = quiet(transformers.AutoTokenizer.from_pretrained, str(opus))
    run = load_run(tmp_path / "run")
    att, tok = run.model, run.tokenizers.src
    rows = torch.tensor(tok.rows)
    hf_to_att = torch.full((hf.config.vocab_size,), -1)
    hf_to_att[rows[rows >= 0]] = torch.arange(len(rows))[rows >= 0]
    texts = [(a, b) for a, b in make_pairs(12, seed=9)] + [("Zürich? 東京", "¡Sí, señor!")]
    for s, t in texts:  # HF ids in attnlab's order = attnlab's ids
        assert hf_to_att[hf_tok(s).input_ids].tolist() == tok.encode(s) + [EOS_ID]
    src = [hf_tok(s).input_ids for s, _ in texts]
    tgt = [hf_tok(text_target=t).input_ids for _, t in texts]  # y + </s>
    x, pad_hf = pad(src, hf.config.pad_token_id), hf.config.pad_token_id
    mask = torch.tensor([[1] * len(s) + [0] * (x.size(1) - len(s)) for s in src])
    y_in = pad([[hf.config.decoder_start_token_id] + t[:-1] for t in tgt], pad_hf)
    y_out = pad(tgt, -100)
    real = y_out != -100
    with torch.no_grad():
        lp_hf = hf(input_ids=x, attention_mask=mask, decoder_input_ids=y_in).logits.log_softmax(-1)  # (B, T, V)
        lp_att = att(pad([hf_to_att[s].tolist() for s in src]), mask.sum(1),
                     pad([[BOS_ID] + hf_to_att[t[:-1]].tolist() for t in tgt])).log_softmax(-1)  # (B, T, V + 1)
    tok_hf = lp_hf.gather(-1, y_out.clamp(min=0)[..., None])[..., 0][real]
    tok_att = lp_att.gather(-1, hf_to_att[y_out.clamp(min=0)][..., None])[..., 0][real]
    assert float((tok_hf - tok_att).abs().max()) < 1e-4
    assert float((lp_hf - lp_att[..., hf_to_att]).abs()[real].max()) < 1e-4  # every HF column
    assert float(lp_att[real][:, rows < 0].exp().max()) == 0.0  # the dead PAD row
    with torch.no_grad():  # greedy: HF bans <pad> (bad_words_ids; attnlab's BOS), no forced EOS at the limit
        gen = hf.generate(input_ids=x, attention_mask=mask, max_new_tokens=30, num_beams=1, do_sample=False,
                          forced_eos_token_id=None)
        hyps = greedy_search(att, pad([hf_to_att[s].tolist() for s in src]), mask.sum(1), 30)
    for b, (h,) in enumerate(hyps):
        theirs = gen[b, 1:].tolist()
        theirs = theirs[:theirs.index(0) + 1] if 0 in theirs else theirs
        ours = h.tokens + ([EOS_ID] if h.finished else [])
        assert hf_to_att[theirs].tolist() == ours
        assert hf_tok.decode(theirs, skip_special_tokens=True) == tok.decode(ours)
    # the command line translates with it
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s, _ in texts[:3]))
    assert main(["translate", str(tmp_path / "run"), str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    # back to Hugging Face: the original tensors, bit for bit
    assert main(["export", str(tmp_path / "run"), "--to", "huggingface", "--out", str(tmp_path / "back")]) == 0
    original, back = load_file(str(opus / "model.safetensors")), load_file(str(tmp_path / "back/model.safetensors"))
    assert sorted(back) == sorted(original) and all(torch.equal(back[k], original[k]) for k in original)


@pytest.mark.parametrize("variant", ["post-all-silu", "pre-all-gelu"])
def test_export_import_export_is_bit_equal(runs, tmp_path, variant):
    """Post-norm runs go out as MarianMT, pre-norm runs as Pegasus (issue 47: that one could not come back)."""
    assert main(["export", str(runs[variant]), "--to", "huggingface", "--out", str(tmp_path / "a")]) == 0
    assert main(["import", str(tmp_path / "a"), "--out", str(tmp_path / "run")]) == 0
    assert main(["export", str(tmp_path / "run"), "--to", "huggingface", "--out", str(tmp_path / "b")]) == 0
    a, b = load_file(str(tmp_path / "a/model.safetensors")), load_file(str(tmp_path / "b/model.safetensors"))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    for name in sorted(p.name for p in (tmp_path / "a").iterdir()):  # the configs and the tokenizer too
        if name not in ("README.md", "attnlab.json"):  # where the export came from: the run's log and hashes
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    ours, back = load_run(runs[variant]).model.state_dict(), load_run(tmp_path / "run").model.state_dict()
    assert sorted(ours) == sorted(back) and all(torch.equal(ours[k], back[k]) for k in ours)


def test_import_refusals_are_one_line(opus, tmp_path, capsys):
    import shutil
    cases = {}
    t5 = tmp_path / "t5"
    transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).save_pretrained(t5)
    cases["t5"] = (t5, "T5ForConditionalGeneration is not supported")
    for name, edit, expected in (
            ("truncated", lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:500]),
             "corrupt"),
            ("pickled", lambda d: ((d / "model.safetensors").unlink(), (d / "pytorch_model.bin").write_bytes(b"x")),
             "pytorch_model.bin"),
            ("vocab", lambda d: (d / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 2})),
             "disagree"),
            ("config", lambda d: (d / "config.json").write_text(json.dumps(
                {**json.loads((d / "config.json").read_text()), "encoder_layers": 3})), "holds 2 layers")):
        shutil.copytree(opus, tmp_path / name)
        edit(tmp_path / name)
        cases[name] = (tmp_path / name, expected)
    assert_import_refused(cases, tmp_path, capsys)


def _config_edit(**changes):
    def edit(d):
        (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()), **changes}))
    return edit


def _retyped(dtype: torch.dtype, relabel: bool = False):
    """model.safetensors with every tensor as `dtype` (relabel: float32 bytes whose header says I32)."""
    def edit(d):
        from safetensors.torch import load_file, save_file
        sd = load_file(str(d / "model.safetensors"))
        if relabel:
            raw = (d / "model.safetensors").read_bytes()
            n = int.from_bytes(raw[:8], "little")
            head = raw[8:8 + n].replace(b'"F32"', b'"I32"')
            (d / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + raw[8 + n:])
            return
        save_file({k: (v * 0 + float("nan") if dtype == torch.float32 else v.to(dtype)).contiguous()
                   for k, v in sd.items()}, str(d / "model.safetensors"))
    return edit


def _huge_header(d):
    """A safetensors header listing 300,000 empty tensors (20 MB; a million took 2.4 GB before the check)."""
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(300_000)}
    head = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head)


def test_hostile_marian_folders_are_refused_in_one_line_before_any_allocation(opus, tmp_path, capsys):
    """Issue 47: config.json values typed and bounded before anything of their size exists, a layer the config does
    not name never dropped, non-float or non-finite weights refused, a forged safetensors header refused before it
    is parsed, deeply nested JSON one line: exit 2, one line, no run folder, and (the largest case, d_model 1e9)
    well under a gigabyte."""
    import resource
    import shutil
    cases = {}
    for name, edit, expected in (
            ("d_model -1", _config_edit(d_model=-1), "d_model is -1; expected 1 to"),
            ("d_model 0", _config_edit(d_model=0), "d_model is 0"),
            ("d_model str", _config_edit(d_model="16"), 'd_model is "16"; expected an integer'),
            ("d_model float", _config_edit(d_model=16.0), "d_model is 16.0; expected an integer"),
            ("d_model 1e9", _config_edit(d_model=10**9), "d_model is 1000000000"),
            ("layers str", _config_edit(encoder_layers="2"), 'encoder_layers is "2"'),
            ("activation list", _config_edit(activation_function=["swish"]), 'activation_function is ["swish"]'),
            ("one layer named, two held", _config_edit(encoder_layers=1, decoder_layers=1), "holds 2 layers"),
            ("int32", _retyped(torch.int32), "torch.int32"),
            ("bool", _retyped(torch.bool), "torch.bool"),
            ("complex", _retyped(torch.complex64), "torch.complex64"),
            ("relabelled", _retyped(torch.int32, relabel=True), "torch.int32"),
            ("nan", _retyped(torch.float32), "NaN or infinite"),
            ("deep json", lambda d: (d / "config.json").write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
            ("huge header", _huge_header, "a header of")):
        folder = tmp_path / name.replace(" ", "_")
        shutil.copytree(opus, folder)
        edit(folder)
        cases[name] = (folder, expected)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert_import_refused(cases, tmp_path, capsys)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 1024 * 1024, f"the refusals raised this process's peak RSS by {grown_kb / 1024:.0f} MB"


def test_an_hf_export_never_replaces_a_model_folder_another_tool_made(runs, tmp_path, capsys):
    """A downloaded model named as --out is never replaced (it was, exit 0)."""
    check_export_spares_a_foreign_model(runs["pre-all-gelu"], "huggingface",
                                        ("config.json", "model.safetensors", "README.md"), tmp_path, capsys)
