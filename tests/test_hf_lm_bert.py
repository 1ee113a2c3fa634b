"""GPT-2-class and BERT-class models in and out of attnlab (issue 38). Every model is made here with random weights
(perturbed, so no tensor hides behind a 0 or a 1) and `save_pretrained`; `transformers` is the reference:
- an imported GPT2LMHeadModel (tied and untied) gives HF's per-token log-probabilities (1e-4), its greedy
  continuations (the same suppressed ids) and its tokenizer's ids; vocab.json + merges.txt give what tokenizer.json
  gives; the run generates, is explored with the neuron view and served;
- an imported BertForMaskedLM gives HF's attention weights of every layer and head (1e-5, output_attentions=True)
  for single sentences and pairs in one padded batch, with HF's ids and token types; vocab.txt alone gives the same;
- an attnlab LM exported as GPT2LMHeadModel (or BioGptForCausalLM: tied embeddings scaled by sqrt(D)) gives
  attnlab's logits (1e-5) and, through AutoTokenizer, attnlab's ids; export -> import -> export is bit-equal;
- what no class expresses, and what attnlab does not import, is refused with one line."""

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fastapi.testclient import TestClient  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

import attnlab  # noqa: E402
from attnlab.app.cli import main  # noqa: E402
from attnlab.app.server import create_app, load_models  # noqa: E402
from attnlab.core.checkpoint import resolve_checkpoint, save_weights  # noqa: E402
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402
from attnlab.decode.sampling import generate  # noqa: E402
from attnlab.families.lm import load_lm_config  # noqa: E402
from attnlab.runs.workflow import load_run, train  # noqa: E402
from conftest import make_pairs, one_thread  # noqa: E402
from test_huggingface import assert_import_refused  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")
TEXTS = ["the red house", "my old door opens", "a cat sees the big green window", "x", "Zürich 東京 naïve",
         "literal <|endoftext|> [SEP] text", "tab\there"]


def perturb(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))


def corpus() -> list[str]:
    return [a for a, _ in make_pairs(300, seed=1)] + [b for _, b in make_pairs(300, seed=2)] + TEXTS


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    L = max(map(len, rows))
    return torch.tensor([r + [value] * (L - len(r)) for r in rows])


# ------------------------------------------------------------------------------------------------ GPT-2
def gpt2_folder(root, tied: bool):
    """A byte-level BPE (trained here; <|endoftext|> last, as in GPT-2) and a GPT2LMHeadModel saved together."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=320, show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])
    eot = tok.token_to_id("<|endoftext|>")
    folder = root / f"gpt2-{'tied' if tied else 'untied'}"
    cfg = transformers.GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=16, n_layer=2, n_head=4,
                                  bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=tied)
    torch.manual_seed(3)
    model = transformers.GPT2LMHeadModel(cfg)
    perturb(model, 4 + tied)
    model.save_pretrained(str(folder))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                         eos_token="<|endoftext|>").save_pretrained(str(folder))
    tok.model.save(str(folder))  # vocab.json and merges.txt as well, <|endoftext|> last in vocab.json as in GPT-2's
    (folder / "vocab.json").write_text(json.dumps({**json.loads((folder / "vocab.json").read_text()),
                                                   "<|endoftext|>": eot}))
    return folder


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """{"tied"/"untied": (HF folder, imported run)}."""
    root, out = tmp_path_factory.mktemp("gpt2"), {}
    for tied in (True, False):
        folder = gpt2_folder(root, tied)
        assert main(["import", str(folder), "--out", str(root / f"run-{tied}")]) == 0
        out["tied" if tied else "untied"] = folder, root / f"run-{tied}"
    return out


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_gpt2_import_gives_hf_log_probs_greedy_continuations_and_ids(gpt2, kind):
    folder, run_dir = gpt2[kind]
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    run = load_run(run_dir)
    lm, tok = run.model, run.tokenizers.tgt
    assert run.cfg.model.lm.activation == "gelu_tanh" and not run.cfg.model.lm.scale_embeddings
    eot = hf.config.eos_token_id
    assert tok.rows[BOS_ID] == tok.rows[EOS_ID] == eot and tok.rows[PAD_ID] == tok.rows[UNK_ID] == -1
    for text in TEXTS:  # the ids: HF's, in attnlab's order
        assert [tok.rows[i] for i in tok.encode(text)] == hf_tok(text).input_ids, text
    # per-token log-probs of a right-padded batch: HF reads <|endoftext|> + text, attnlab [BOS] + text
    hf_ids = [[eot] + hf_tok(t).input_ids for t in TEXTS]
    x_hf = pad(hf_ids, eot)
    mask = pad([[1] * len(r) for r in hf_ids], 0)
    x_att = pad([[BOS_ID] + tok.encode(t) for t in TEXTS], PAD_ID)
    with torch.no_grad():
        lp_hf = hf(input_ids=x_hf, attention_mask=mask).logits.log_softmax(-1)  # (B, T, V)
        lp_att = lm(x_att).log_softmax(-1)  # (B, T, V + 3)
    real = mask.bool()
    hf_to_att = torch.tensor([EOS_ID if h == eot else tok.rows.index(h) for h in range(hf.config.vocab_size)])
    assert float((lp_hf - lp_att[..., hf_to_att]).abs()[real].max()) < 1e-4  # every HF column
    targets = x_hf[:, 1:]
    per_token = (lp_hf[:, :-1].gather(-1, targets[..., None]) - lp_att[:, :-1].gather(-1, hf_to_att[targets][..., None]))
    assert float(per_token.abs()[real[:, 1:]].max()) < 1e-4
    assert float(lp_att[..., [PAD_ID, BOS_ID, UNK_ID]].exp().max()) == 0.0  # the rows GPT-2 has not
    # greedy continuations: HF with the ids attnlab never generates suppressed (its BOS is its EOS: kept)
    suppress = sorted({tok.rows[i] for i in (PAD_ID, BOS_ID, *tok.control_ids)} - {-1, eot})
    for prompt in ["the red house", "a cat", "Zürich", ""]:
        ours = generate(lm, tok, prompt, num=1, max_len=25, temperature=0.0)[0]
        x = torch.tensor([[eot] + (hf_tok(prompt).input_ids if prompt else [])])
        with torch.no_grad():
            theirs = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=25, do_sample=False,
                                 suppress_tokens=suppress, pad_token_id=eot)[0, x.size(1):].tolist()
        assert theirs == [tok.rows[i] for i in ours.tokens] + ([eot] if ours.finished else []), prompt


def test_gpt2_vocab_and_merges_give_the_ids_of_tokenizer_json(gpt2, tmp_path):
    folder = tmp_path / "no-tokenizer-json"
    shutil.copytree(gpt2["tied"][0], folder)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    assert main(["import", str(folder), "--out", str(tmp_path / "run")]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))  # GPT2Tokenizer from vocab.json + merges.txt
    tok = load_run(tmp_path / "run").tokenizers.tgt
    for text in TEXTS:
        assert [tok.rows[i] for i in tok.encode(text)] == hf_tok(text).input_ids, text


def test_gpt2_run_generates_explores_and_serves(gpt2, capsys):
    run_dir = gpt2["tied"][1]
    assert main(["generate", str(run_dir), "--prompt", "the red", "--temperature", "0", "--max-len", "5"]) == 0
    assert capsys.readouterr().out.startswith("the red")
    ex = attnlab.load(run_dir).explore("the red house", max_new=4)
    m = ex.maps["lm_self"]
    assert m.q is not None and m.rows[0] == "<|endoftext|>" and m.rows[1:4] == ["the", "\u2581", "red"]  # "Ġ": "▁"
    s = m.scores(1, 2).softmax(-1)  # the neuron view's q . k * scale gives the weights
    assert float((s - m.weights[1, 2]).abs().max()) < 1e-5
    client = TestClient(create_app(load_models([run_dir], max_chars=200)), raise_server_exceptions=False)
    name = client.get("/api/models").json()[0]["name"]
    r = client.post("/api/explore", json={"model": name, "sentence": "the red", "max_new": 3})
    assert r.status_code == 200, r.text
    eid = r.json()["id"]
    for key in ("lm_self", "lm_self_rollout"):
        assert client.get(f"/api/explore/{eid}/weights", params={"map": key, "layer": 1}).status_code == 200
    assert client.get(f"/api/explore/{eid}/neuron", params={"map": "lm_self", "layer": 1, "head": 3}).status_code == 200


# ------------------------------------------------------------------------------------------------ BERT
def bert_folder(root):
    """A WordPiece tokenizer (trained here) and a BertForMaskedLM saved together, and the HF tokenizer."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus(), trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    folder = root / "bert"
    hf_tok = transformers.BertTokenizer(vocab=tok.get_vocab())
    hf_tok.save_pretrained(str(folder))
    cfg = transformers.BertConfig(vocab_size=len(hf_tok), hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=32, max_position_embeddings=64, type_vocab_size=2)
    torch.manual_seed(5)
    model = transformers.BertForMaskedLM(cfg)
    perturb(model, 6)
    model.save_pretrained(str(folder))
    return folder, hf_tok


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    folder, hf_tok = bert_folder(root)
    assert main(["import", str(folder), "--out", str(root / "run")]) == 0
    return folder, hf_tok, root / "run"


PAIRS = [("the red house", "a cat sees the big green window"), ("x", None), ("Zürich? 東京", "my old door opens"),
         ("a cat sees the big green window and the red house", None)]


def test_bert_import_gives_hf_attention_weights_for_sentences_and_pairs(bert):
    folder, hf_tok, run_dir = bert
    hf = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    run = load_run(run_dir)
    tok, encoder = run.tokenizers.src, run.model
    enc = [hf_tok(a, b) if b else hf_tok(a) for a, b in PAIRS]
    for (a, b), e in zip(PAIRS, enc):  # HF's ids (in attnlab's order) and token types
        ids, types = tok.encode_pair(a, b)
        assert [tok.rows[i] for i in ids] == e["input_ids"] and types == e["token_type_ids"], (a, b)
    x = pad([e["input_ids"] for e in enc], hf_tok.pad_token_id)
    types = pad([e["token_type_ids"] for e in enc], 0)
    mask = pad([[1] * len(e["input_ids"]) for e in enc], 0)
    to_att = {h: a for a, h in enumerate(tok.rows)}
    with torch.no_grad():
        theirs = torch.stack(hf(input_ids=x, attention_mask=mask, token_type_ids=types,
                                output_attentions=True).attentions, dim=1)  # (B, N, H, L, L)
        ours = encoder.attention_maps(torch.tensor([[to_att[h] for h in r] for r in x.tolist()]), mask.bool(), types)
    assert ours.shape == theirs.shape == (4, 3, 4, x.size(1), x.size(1))
    real = (mask[:, :, None] * mask[:, None, :]).bool()[:, None, None].expand_as(ours)  # real query and key
    assert float((ours - theirs).abs()[real].max()) < 1e-5
    pad_key = (~mask.bool())[:, None, None, None, :] & mask.bool()[:, None, None, :, None]  # real query, pad key
    assert float(ours[pad_key.expand_as(ours)].abs().max()) == 0
    imported = json.loads((run_dir / "imported.json").read_text())
    assert imported["architecture"] == "BertForMaskedLM" and "cls.predictions.bias" in imported["left_out"]


def test_bert_vocab_txt_gives_the_ids_of_tokenizer_json(bert, tmp_path):
    folder = tmp_path / "vocab-only"
    shutil.copytree(bert[0], folder)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    (folder / "vocab.txt").write_text("".join(p + "\n" for p, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (folder / "tokenizer.json").unlink()
    assert main(["import", str(folder), "--out", str(tmp_path / "run")]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    tok = load_run(tmp_path / "run").tokenizers.src
    for a, b in PAIRS:
        ids, types = tok.encode_pair(a, b)
        e = hf_tok(a, b) if b else hf_tok(a)
        assert [tok.rows[i] for i in ids] == e["input_ids"] and types == e["token_type_ids"], (a, b)


def test_bert_run_explores_pairs_with_every_view_and_serves(bert, capsys):
    run_dir = bert[2]
    ex = attnlab.load(run_dir).explore("the red house", "a cat sees")
    key = "pair"
    m = ex.maps[key]
    assert m.rows[0] == "[CLS]" and m.rows.count("[SEP]") == 2 and m.q is not None and f"{key}_rollout" in ex.maps
    assert m.rows[m.split - 1] == "[SEP]" and m.rows[m.split:] == ["a", "cat", "sees", "[SEP]"]  # b starts there
    assert float((m.scores(2, 1).softmax(-1) - m.weights[2, 1]).abs().max()) < 1e-5  # the neuron view
    alone = attnlab.load(run_dir).explore("the red house").maps["self"]
    assert alone.rows.count("[SEP]") == 1 and alone.split is None
    client = TestClient(create_app(load_models([run_dir], max_chars=200)), raise_server_exceptions=False)
    info = client.get("/api/models").json()[0]
    assert info["kind"] == "pair"
    r = client.post("/api/explore", json={"model": info["name"], "sentence": "the red house", "sentence_b": "a cat"})
    assert r.status_code == 200, r.text
    eid = r.json()["id"]
    assert [m["split"] for m in r.json()["maps"]] == [5, 5]  # [CLS] the red house [SEP] | a cat [SEP]
    for layer in range(3):
        w = client.get(f"/api/explore/{eid}/weights", params={"map": key, "layer": layer})
        assert w.status_code == 200
    assert client.get(f"/api/explore/{eid}/neuron", params={"map": key, "layer": 2, "head": 3}).status_code == 200
    r = client.post("/api/explore", json={"model": info["name"], "sentence": "the red house"})  # b is optional
    assert r.status_code == 200, r.text
    assert main(["train", "--resume", str(run_dir)]) == 2 and "does not train" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ LM export
LM_VARIANTS = {  # name: (model.lm settings, the class it becomes)
    "tied-unscaled-learned": (["model.lm.scale_embeddings=false", "model.lm.positions=learned",
                               "model.lm.activation=gelu_tanh"], "GPT2LMHeadModel"),
    "untied-scaled-sinusoidal-nobias": (["model.lm.tie_embeddings=false", "model.lm.bias=false",
                                         "model.lm.activation=gelu"], "GPT2LMHeadModel"),
    "tied-scaled-sinusoidal": ([], "BioGptForCausalLM"),  # attnlab's default LM: GPT-2 cannot scale a tied matrix
}


def lm_run(d, name: str, settings: list[str]):
    (d / "text.txt").write_text("".join(s + " Zürich\n" for s in corpus()), encoding="utf-8")
    cfg = load_lm_config(None, ["data.corpus=text", f"data.train={d / 'text.txt'}", "data.dev_size=20",
                                "data.test_size=20", "tokenizer.vocab_size=300", "model.lm.d_model=16",
                                "model.lm.h=4", "model.lm.d_ff=40", "model.lm.layers=2", "model.lm.max_len=64",
                                "train.max_steps=1", "train.max_tokens=600", "train.eval_every=1",
                                "train.progress=false", "train.keep_last=1", *settings])
    with one_thread():
        train(cfg, d / name)
    run = load_run(d / name)
    perturb(run.model, 7)
    if run.model.generator.bias is not None:  # GPT-2's lm_head has no bias: an untied run exports with a zero one
        run.model.generator.bias.data.zero_()
    save_weights(run.model, resolve_checkpoint(d / name), d / name)
    return d / name


@pytest.mark.parametrize("name", list(LM_VARIANTS))
def test_lm_export_loads_with_attnlab_logits_and_ids_and_round_trips(tmp_path, name):
    settings, cls = LM_VARIANTS[name]
    run_dir = lm_run(tmp_path, name, settings)
    assert main(["export", str(run_dir), "--to", "huggingface", "--out", str(tmp_path / "a")]) == 0
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"), output_loading_info=True)
    assert type(hf).__name__ == cls and not any(info.values()), info
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "a"))
    run = load_run(run_dir)
    tok = run.tokenizers.tgt
    for text in TEXTS + ["  two  spaces ", ""]:  # the tokenizer puts BOS first, as attnlab's LM reads
        assert hf_tok(text).input_ids == [BOS_ID] + tok.encode(text), text
    x = pad([[BOS_ID] + tok.encode(t) for t in TEXTS], PAD_ID)
    mask = (torch.arange(x.size(1))[None] < torch.tensor([len(tok.encode(t)) + 1 for t in TEXTS])[:, None])
    with torch.no_grad():
        ours, theirs = run.model(x), hf.eval()(input_ids=x, attention_mask=mask.long()).logits
    assert float((ours - theirs).abs()[mask].max()) < 1e-5
    assert main(["import", str(tmp_path / "a"), "--out", str(tmp_path / "run")]) == 0
    assert main(["export", str(tmp_path / "run"), "--to", "huggingface", "--out", str(tmp_path / "b")]) == 0
    a, b = load_file(str(tmp_path / "a/model.safetensors")), load_file(str(tmp_path / "b/model.safetensors"))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a/tokenizer.json").read_bytes() == (tmp_path / "b/tokenizer.json").read_bytes()


@pytest.mark.parametrize("settings, words", [
    (["model.lm.norm=post"], "model.lm.norm = 'post'"),
    (["model.lm.layer_norm_eps=1e-6"], "layer_norm_eps = 1e-06 with tied, scaled embeddings"),
    (["model.lm.scale_embeddings=false", "tokenizer.kind=char"], "tokenizer.kind = 'char'"),
])
def test_lm_export_refuses_what_no_class_expresses(tmp_path, capsys, settings, words):
    run_dir = lm_run(tmp_path, "run", settings)
    capsys.readouterr()
    assert main(["export", str(run_dir), "--to", "huggingface", "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


def test_an_untied_output_bias_is_refused(tmp_path, capsys):
    run_dir = lm_run(tmp_path, "run", ["model.lm.tie_embeddings=false"])
    run = load_run(run_dir)
    run.model.generator.bias.data.fill_(0.1)
    save_weights(run.model, resolve_checkpoint(run_dir), run_dir)
    capsys.readouterr()
    assert main(["export", str(run_dir), "--to", "huggingface", "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bias" in err and "is not zero" in err


# ------------------------------------------------------------------------------------------------ refusals
def test_import_refusals_are_one_line(gpt2, bert, tmp_path, capsys):
    cases = {}

    def variant(name, src, edit):
        shutil.copytree(src, tmp_path / name)
        edit(tmp_path / name)
        return tmp_path / name

    def config(d, **changes):
        (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()), **changes}))

    def drop(d, name):
        sd = load_file(str(d / "model.safetensors"))
        sd.pop(name)
        save_file(sd, str(d / "model.safetensors"))

    gpt2_dir, bert_dir = gpt2["tied"][0], bert[0]
    cases["layer-scaled"] = (variant("a", gpt2_dir, lambda d: config(d, scale_attn_by_inverse_layer_idx=True)),
                             "scale_attn_by_inverse_layer_idx")
    cases["activation"] = (variant("b", gpt2_dir, lambda d: config(d, activation_function="quick_gelu")),
                           "activation_function is \"quick_gelu\"")
    cases["layers"] = (variant("c", gpt2_dir, lambda d: config(d, n_layer=3)), "no tensor h.2")
    cases["vocab"] = (variant("d", gpt2_dir, lambda d: config(d, vocab_size=500)), "vocab_size 500")
    cases["relative"] = (variant("e", bert_dir, lambda d: config(d, position_embedding_type="relative_key")),
                         "position_embedding_type")
    cases["missing"] = (variant("f", bert_dir, lambda d: drop(d, "bert.encoder.layer.1.output.dense.bias")),
                        "no tensor encoder.layer.1.output.dense.bias")
    cases["tokenizer"] = (variant("g", bert_dir, lambda d: (d / "tokenizer.json").unlink()), "no tokenizer")
    cases["tokenizer-json"] = (variant("h", gpt2_dir, lambda d: (d / "tokenizer.json").write_text('{"model": ')),
                               "not a readable tokenizer.json")
    assert_import_refused(cases, tmp_path, capsys)
