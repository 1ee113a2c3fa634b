"""Decomposable attention (attnlab.nn.decomposable): masks, shapes, an explicit per-pair reference of the paper's
equations, and a tiny synthetic paraphrase task learnt (with its alignment) in seconds by the one trainer."""

import random

import pytest
import torch

from attnlab.nn.attention import padding_mask
from attnlab.nn.decomposable import DecomposableAttention, DecomposableConfig
from attnlab.core.errors import AttnlabError

V = 50


def padded_batch(lengths_a, lengths_b, seed=0):
    g = torch.Generator().manual_seed(seed)
    la, lb = torch.tensor(lengths_a), torch.tensor(lengths_b)
    a_mask, b_mask = padding_mask(la), padding_mask(lb)  # (B, La), (B, Lb)
    a = torch.randint(4, V, a_mask.shape, generator=g) * a_mask
    b = torch.randint(4, V, b_mask.shape, generator=g) * b_mask
    return a, a_mask, b, b_mask


def tiny_model(intra: bool, seed: int = 0, max_distance: int = 2) -> DecomposableAttention:
    torch.manual_seed(seed)
    model = DecomposableAttention(V, DecomposableConfig(emb_dim=12, hidden_dim=16, intra_attention=intra,
                                                        max_distance=max_distance))
    if intra:
        with torch.no_grad():
            model.distance_bias.normal_()  # zero at init: make the distance buckets matter
    return model.eval()


@pytest.mark.parametrize("intra", [False, True])
def test_weights_sum_to_one_over_real_tokens_and_are_zero_on_padding(intra):
    model = tiny_model(intra)
    a, a_mask, b, b_mask = padded_batch([5, 2, 4], [3, 6, 1])
    _, w = model.forward_with_weights(a, a_mask, b, b_mask)
    checks = [(w.a_to_b, a_mask, b_mask), (w.b_to_a, b_mask, a_mask)]
    if intra:
        checks += [(w.intra_a, a_mask, a_mask), (w.intra_b, b_mask, b_mask)]
    for weights, q_mask, k_mask in checks:
        sums = weights.sum(-1)  # (B, Lq)
        torch.testing.assert_close(sums[q_mask], torch.ones(int(q_mask.sum())))
        assert (sums[~q_mask] == 0).all()  # rows of padded tokens
        assert (weights.masked_select(~k_mask[:, None, :].expand_as(weights)) == 0).all()  # padded keys
        assert (weights >= 0).all()
    assert (w.intra_a is None) == (not intra)


@pytest.mark.parametrize("intra", [False, True])
def test_F_G_H_shapes(intra):
    model = tiny_model(intra)
    D, rep = 16, 32 if intra else 16
    a, a_mask, b, b_mask = padded_batch([5, 2], [3, 7])
    seen = {}
    for name in ("F", "G", "H", "out"):
        getattr(model, name).register_forward_hook(
            lambda mod, inp, out, name=name: seen.setdefault(name, []).append((inp[0].shape, out.shape)))
    logits = model(a, a_mask, b, b_mask)
    assert logits.shape == (2, 2)
    assert seen["F"] == [((2, 5, rep), (2, 5, D)), ((2, 7, rep), (2, 7, D))]  # F(a_bar), F(b_bar)
    assert seen["G"] == [((2, 5, 2 * rep), (2, 5, D)), ((2, 7, 2 * rep), (2, 7, D))]  # G([a; beta]), G([b; alpha])
    assert seen["H"] == [((2, 2 * D), (2, D))]  # H([v1; v2])
    assert seen["out"] == [((2, D), (2, 2))]


def reference_logits(model: DecomposableAttention, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The paper's equations for ONE unpadded pair, written out with explicit loops and torch.softmax."""
    def embed(x):
        return model.project(model.embed(x))  # (L, D)

    def intra(x):
        fx = model.F_intra(x)
        K = model.cfg.max_distance
        rows = []
        for i in range(len(x)):
            scores = torch.stack([fx[i] @ fx[j] + model.distance_bias[max(-K, min(K, i - j)) + K]
                                  for j in range(len(x))])
            rows.append(torch.softmax(scores, 0) @ x)
        return torch.cat([x, torch.stack(rows)], dim=-1)

    xa, xb = embed(a), embed(b)
    if model.cfg.intra_attention:
        xa, xb = intra(xa), intra(xb)
    e = torch.stack([torch.stack([model.F(xa[i]) @ model.F(xb[j]) for j in range(len(xb))])
                     for i in range(len(xa))])  # (La, Lb)
    beta = torch.stack([torch.softmax(e[i], 0) @ xb for i in range(len(xa))])  # eq. 2
    alpha = torch.stack([torch.softmax(e[:, j], 0) @ xa for j in range(len(xb))])
    v1 = sum(model.G(torch.cat([xa[i], beta[i]])) for i in range(len(xa)))  # eq. 3, 4
    v2 = sum(model.G(torch.cat([xb[j], alpha[j]])) for j in range(len(xb)))
    return model.out(model.H(torch.cat([v1, v2])))  # eq. 5


@pytest.mark.parametrize("intra", [False, True])
def test_batched_padded_model_equals_the_per_pair_reference(intra):
    model = tiny_model(intra, max_distance=2).double()
    la, lb = [6, 1, 4], [2, 5, 6]
    a, a_mask, b, b_mask = padded_batch(la, lb, seed=3)
    with torch.no_grad():
        logits = model(a, a_mask, b, b_mask)
        for k in range(3):
            ref = reference_logits(model, a[k, :la[k]], b[k, :lb[k]])
            torch.testing.assert_close(logits[k], ref, rtol=1e-10, atol=1e-10)


def test_gradients_reach_every_parameter():
    model = tiny_model(True).train()
    a, a_mask, b, b_mask = padded_batch([5, 3], [4, 6])
    model(a, a_mask, b, b_mask).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


@pytest.mark.parametrize("bad, match", [({"hidden_dim": 0}, "hidden_dim"), ({"dropout": 1.0}, "dropout"),
                                        ({"n_classes": 1}, "n_classes")])
def test_config_errors_name_the_value(bad, match):
    with pytest.raises(AttnlabError, match=match):
        DecomposableConfig(**bad)


# ---------------------------------------------------------------------------------------------- learning
N_WORDS = 12  # words 4..15 of "language a" have synonyms 16..27 in "language b"


def synonym(w: int) -> int:
    return w + N_WORDS


def synthetic_pairs(n: int, seed: int):
    """a: 3-6 distinct words; b positive: the synonyms of a in shuffled order; b negative: the same, but one
    word's synonym replaced by another word's (so only aligning every token tells them apart)."""
    from attnlab.data.paraphrase import ParaphrasePair

    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        words = rng.sample(range(4, 4 + N_WORDS), rng.randint(3, 6))
        syn = [synonym(w) for w in words]
        rng.shuffle(syn)
        label = i % 2
        if not label:
            other = rng.choice([w for w in range(4, 4 + N_WORDS) if w not in words])
            syn[rng.randrange(len(syn))] = synonym(other)
        text = lambda ids: " ".join(map(str, ids))  # noqa: E731
        pairs.append(ParaphrasePair(text(words), text(syn), label, "", "", "same" if label else "chapter"))
    return pairs


class IdsOfText:
    pad_id = 0

    @staticmethod
    def ids(sentences):
        return [[int(t) for t in s.split()] for s in sentences]


def test_learns_a_synthetic_paraphrase_task_and_its_alignment(tmp_path):
    from attnlab.families.pairs import PairDataset, PairTask, predict_pairs
    from attnlab.training.trainer import Trainer, TrainConfig

    torch.manual_seed(0)
    model = DecomposableAttention(4 + 2 * N_WORDS, DecomposableConfig(emb_dim=16, hidden_dim=32, dropout=0.0))
    train, test = PairDataset(synthetic_pairs(2000, 1), IdsOfText), PairDataset(synthetic_pairs(200, 2), IdsOfText)
    cfg = TrainConfig(seed=1, max_steps=400, max_tokens=384, lr=3e-3, label_smoothing=0.0, eval_every=400,
                      log_every=50, progress=False, keep_last=1, device="cpu")
    Trainer(model, cfg, train, test, tmp_path, task=PairTask(0)).fit()
    acc = (predict_pairs(model, test) == torch.tensor(test.labels)).float().mean().item()
    assert acc >= 0.9
    # the soft alignment of a positive pair puts each word's largest weight on its synonym
    hits = total = 0
    for a_ids, b_ids, label in (test[i] for i in range(len(test))):
        if label:
            a, b = torch.tensor([a_ids]), torch.tensor([b_ids])
            _, w = model.forward_with_weights(a, a > 0, b, b > 0)
            best = w.a_to_b[0].argmax(-1).tolist()
            hits += sum(b_ids[j] == synonym(x) for x, j in zip(a_ids, best))
            total += len(a_ids)
    # by chance: 1 / (4.5 words on average) = 0.22. Not a tight bound: over 5 initialisations (model and trainer
    # seeds 0-4) it ranged from 0.65 to 1.0, this one 0.754 (343 of 455 words), which a bound of 0.75 left 2 words
    # from failing on another CPU or torch build
    assert hits / total >= 0.5
