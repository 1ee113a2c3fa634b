"""Greedy and beam search on tiny fake models with known answers: exhaustive enumeration of all outputs,
teacher-forced log-probs, single-sentence runs, and a hand-computed length-penalty case."""

import itertools
import math
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.decode.search import (Hypothesis, beam_init, beam_search, beam_step, greedy_search, length_penalty,
                            max_output_length, select_batch, trace_tokens)
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID

V, SRC_V = 6, 7  # target vocabulary: PAD, BOS, EOS and 3 real tokens
REAL = list(range(3, V))


@dataclass
class FakeEnc:
    bias: Tensor  # (B, V) per-sentence log-prob offset, a function of the source
    memory: tuple  # ((B, S) mask, {"lengths": (B,)})
    name: str = "enc"


@dataclass
class FakeState:
    history: tuple  # ((B,) token before the previous one, {"steps": (B,)})
    note: str = "kept"


class MarkovLM:
    """A second-order Markov model: log p(y_t | y_{t-1}, y_{t-2}, x) = log_softmax(A[y_{t-1}] + C[y_{t-2}] + bias(x)).

    y_{t-2} lives in the decoder state, so a beam search that reorders the state wrongly gets other log-probs.
    Attention is one-hot on y_{t-1} mod S, with `heads` extra dims when given.
    """

    def __init__(self, seed: int = 0, eos_bias: float = 0.0, heads: int | None = None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.A = 2 * torch.randn(V, V, generator=g, dtype=torch.float64)
        self.C = torch.randn(V, V, generator=g, dtype=torch.float64)
        self.src_emb = torch.randn(SRC_V, V, generator=g, dtype=torch.float64)
        self.eos_bias, self.heads, self.calls = eos_bias, heads, 0

    def encode(self, src: Tensor, src_lengths: Tensor) -> FakeEnc:
        mask = torch.arange(src.size(1))[None] < src_lengths[:, None]  # (B, S)
        bias = (self.src_emb[src] * mask[..., None]).sum(1)  # (B, V)
        return FakeEnc(bias, (mask, {"lengths": src_lengths}))

    def init_state(self, enc: FakeEnc) -> FakeState:
        B = enc.bias.size(0)
        return FakeState((torch.full((B,), BOS_ID), {"steps": torch.zeros(B, dtype=torch.long)}))

    def step(self, prev: Tensor, state: FakeState, enc: FakeEnc, need_weights: bool = False):
        self.calls += 1
        prev2, extra = state.history
        logits = self.A[prev] + self.C[prev2] + enc.bias  # (B, V)
        logits[:, EOS_ID] += self.eos_bias
        S = enc.memory[0].size(1)
        weights = None
        if need_weights:
            weights = F.one_hot(prev % S, S).double()  # (B, S)
            if self.heads:
                weights = weights[:, None].expand(-1, self.heads, -1)  # (B, heads, S)
        new = FakeState((prev.clone(), {"steps": extra["steps"] + 1}), state.note)
        return F.log_softmax(logits, dim=-1), new, weights


class TableLM:
    """A first-order model with the probabilities written out (PAD and BOS have probability 0)."""

    def __init__(self, rows: dict[int, dict[int, float]]) -> None:
        self.table = torch.full((V, V), float("-inf"), dtype=torch.float64)
        for prev, probs in rows.items():
            for tok, p in probs.items():
                self.table[prev, tok] = math.log(p)

    def encode(self, src, src_lengths):
        return {"src": src}

    def init_state(self, enc):
        return None

    def step(self, prev, state, enc, need_weights=False):
        return self.table[prev], state, None


def _batch(seed: int = 0, B: int = 4):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 4, 1, 2, 5][:B])
    src = torch.randint(3, SRC_V, (B, 5), generator=g)
    src[torch.arange(5)[None] >= lengths[:, None]] = PAD_ID
    return src, lengths


def _teacher_forced(model, src, lengths, b, hyp: Hypothesis):
    """Sum of the model's log-probs along hyp (and EOS if finished), with the attention rows seen."""
    enc = model.encode(src[b:b + 1], lengths[b:b + 1])
    state, prev, total, rows = model.init_state(enc), BOS_ID, 0.0, []
    for y in hyp.tokens + ([EOS_ID] if hyp.finished else []):
        log_probs, state, w = model.step(torch.tensor([prev]), state, enc, need_weights=True)
        total += log_probs[0, y].item()
        rows.append(None if w is None else w[0])
        prev = y
    return total, rows


def _brute_force(model, src, lengths, b, max_len, alpha):
    """Every finished output within max_len steps, ranked by the length-penalised score."""
    scored = []
    for n in range(max_len):
        for toks in itertools.product(REAL, repeat=n):
            lp, _ = _teacher_forced(model, src, lengths, b, Hypothesis(list(toks), 0.0, 0.0))
            scored.append((lp / length_penalty(n + 1, alpha), list(toks)))
    return sorted(scored, key=lambda s: s[0], reverse=True)


# ------------------------------------------------------------------------------------------------ helpers
def test_select_batch_nested():
    Pair = namedtuple("Pair", "x y")
    t = torch.arange(12).view(4, 3)
    obj = FakeState(([t, None, 3, "s"], {"a": Pair(t[:, 0], 2.5), "b": (t.float(),)}))
    idx = torch.tensor([2, 0, 0])
    out = select_batch(obj, idx)
    assert isinstance(out, FakeState) and out.note == "kept"
    lst, d = out.history
    assert isinstance(lst, list) and isinstance(d["a"], Pair) and isinstance(d["b"], tuple)
    assert torch.equal(lst[0], t[[2, 0, 0]]) and lst[1:] == [None, 3, "s"]
    assert d["a"].x.tolist() == [6, 0, 0] and d["a"].y == 2.5
    assert torch.equal(d["b"][0], t.float()[[2, 0, 0]])
    assert torch.equal(obj.history[0][0], t)  # the input is not modified


def test_max_output_length():
    assert max_output_length(torch.tensor([4, 10, 1])).tolist() == [16, 25, 11]
    assert max_output_length(torch.tensor([3]), ratio=2.0, offset=0).tolist() == [6]
    # decode.max_len_ratio and max_len_offset at their limits on a source at its limit: capped at MAX_LEN
    assert max_output_length(torch.tensor([65536]), ratio=100.0, offset=65536).tolist() == [65536]


def test_length_penalty_closed_form():
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 0.0) == 1.0
    assert length_penalty(7, 0.5) == pytest.approx(math.sqrt(2))


def test_beam_init_and_step_no_duplicates():
    model = MarkovLM()
    src, lengths = _batch(B=2)
    enc, state, beams = beam_init(model, src, lengths, beam_size=3, max_len=5)
    assert enc.bias.shape == (6, V) and torch.equal(enc.bias[0], enc.bias[2])
    assert beams.scores[:, 0].eq(0).all() and beams.scores[:, 1:].eq(float("-inf")).all()
    log_probs, _, _ = model.step(torch.full((6,), BOS_ID), state, enc)
    cand = beam_step(log_probs, beams.scores)
    assert cand.scores.shape == (2, 6)
    finite = torch.isfinite(cand.scores)
    assert finite.sum(1).tolist() == [4, 4]  # V minus PAD and BOS, all from beam 0
    assert cand.beam[finite].eq(0).all() and not cand.token[finite].lt(EOS_ID).any()
    assert all(len(set(cand.token[b][finite[b]].tolist())) == 4 for b in range(2))
    assert (cand.scores[:, :-1] >= cand.scores[:, 1:]).all()


# ------------------------------------------------------------------------------------------------ search
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_is_greedy(seed):
    model = MarkovLM(seed, eos_bias=-1.0)
    src, lengths = _batch(seed)
    limits = torch.tensor([3, 7, 12, 20])
    greedy = greedy_search(model, src, lengths, limits, need_weights=True)
    beam = beam_search(model, src, lengths, 1, limits, length_penalty=0.0, need_weights=True)
    for (g,), (h,) in zip(greedy, beam):
        assert g.tokens == h.tokens and g.finished == h.finished
        assert g.score == pytest.approx(h.score) and g.log_prob == pytest.approx(h.log_prob)
        assert torch.equal(g.attention, h.attention)


@pytest.mark.parametrize("seed,alpha", [(0, 0.0), (1, 0.6), (2, 2.0), (3, 1.0)])
def test_large_beam_is_exhaustive(seed, alpha):
    max_len, n_best = 3, 5
    model = MarkovLM(seed)
    src, lengths = _batch(seed, B=3)
    # 9 alive prefixes x (3 tokens + EOS) candidates at the last step: a beam of 36 never prunes
    hyps = beam_search(model, src, lengths, 36, max_len, length_penalty=alpha, n_best=n_best)
    for b in range(3):
        ref = _brute_force(model, src, lengths, b, max_len, alpha)[:n_best]
        assert [h.tokens for h in hyps[b]] == [toks for _, toks in ref]
        assert [h.score for h in hyps[b]] == pytest.approx([s for s, _ in ref])
        assert all(h.finished for h in hyps[b])


@pytest.mark.parametrize("beam_size,n_best", [(1, 1), (3, 2), (5, 5)])
def test_batched_equals_alone(beam_size, n_best):
    model = MarkovLM(4, eos_bias=-0.5, heads=2)
    src, lengths = _batch(4)
    limits = torch.tensor([6, 2, 9, 4])
    batched = beam_search(model, src, lengths, beam_size, limits, 0.6, n_best, need_weights=True)
    for b in range(4):
        (alone,) = beam_search(model, src[b:b + 1], lengths[b:b + 1], beam_size, limits[b:b + 1], 0.6, n_best,
                               need_weights=True)
        assert [h.tokens for h in batched[b]] == [h.tokens for h in alone]
        assert [h.score for h in batched[b]] == pytest.approx([h.score for h in alone])
        assert all(torch.equal(x.attention, y.attention) for x, y in zip(batched[b], alone))


def test_length_penalty_favours_longer():
    a, b = 3, 4
    model = TableLM({BOS_ID: {EOS_ID: 0.40, a: 0.55, b: 0.05}, a: {EOS_ID: 0.62, a: 0.2, b: 0.18},
                     b: {EOS_ID: 1.0}})
    src, lengths = torch.tensor([[3, 4]]), torch.tensor([2])
    (short,) = beam_search(model, src, lengths, 4, 5, length_penalty=0.0)
    (long,) = beam_search(model, src, lengths, 4, 5, length_penalty=2.0)
    # log 0.40 > log(0.55 * 0.62) raw, but log(0.55 * 0.62) / (7/6)^2 > log 0.40 / 1
    assert short[0].tokens == [] and short[0].score == pytest.approx(math.log(0.40))
    assert long[0].tokens == [a] and long[0].score == pytest.approx(math.log(0.55 * 0.62) / (7 / 6) ** 2)
    assert long[0].log_prob == pytest.approx(math.log(0.55 * 0.62))


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_log_prob_and_attention_follow_the_path(search):
    model = MarkovLM(5, eos_bias=-0.5)
    src, lengths = _batch(5)
    limits = torch.tensor([8, 3, 10, 6])
    if search == "greedy":
        hyps = greedy_search(model, src, lengths, limits, need_weights=True)
    else:
        hyps = beam_search(model, src, lengths, 4, limits, 0.6, n_best=3, need_weights=True)
    S = src.size(1)
    for b, nbest in enumerate(hyps):
        for h in nbest:
            lp, rows = _teacher_forced(model, src, lengths, b, h)
            assert h.log_prob == pytest.approx(lp)
            assert h.attention.shape == (len(h.tokens) + h.finished, S)
            prevs = [BOS_ID] + h.tokens
            expected = torch.stack([F.one_hot(torch.tensor(p % S), S).double() for p in prevs[:len(rows)]])
            assert torch.equal(h.attention, expected) and torch.equal(torch.stack(rows), expected)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_max_len_per_sentence(search):
    limits = torch.tensor([2, 7, 4, 1])
    src, lengths = _batch(6)
    never_eos = MarkovLM(6, eos_bias=-1e9)
    if search == "greedy":
        hyps = greedy_search(never_eos, src, lengths, limits, need_weights=True)
    else:
        hyps = beam_search(never_eos, src, lengths, 3, limits, 0.6, n_best=2, need_weights=True)
    for nbest, limit in zip(hyps, limits.tolist()):
        assert len(nbest) == (1 if search == "greedy" else 2)
        for h in nbest:
            assert not h.finished and len(h.tokens) == limit and h.attention.shape[0] == limit
    # with EOS reachable: every hypothesis ends within its own limit
    model = MarkovLM(7, eos_bias=-1.0)
    for nbest, limit in zip(beam_search(model, src, lengths, 3, limits, 0.6, n_best=3), limits.tolist()):
        assert all(len(h.tokens) + h.finished <= limit for h in nbest)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_search_drops_stopped_sentences_from_the_batch(beam_size):
    """A sentence at its limit leaves the batch at the next step (the model sees only the others' rows), and each
    sentence's n-best is the one it gets searched alone."""
    limits = torch.tensor([2, 7, 4, 1])
    src, lengths = _batch(6)
    rows = []

    class Counting(MarkovLM):
        def step(self, prev, state, enc, need_weights=False):
            rows.append(prev.numel())
            assert enc.bias.size(0) == prev.numel() == state.history[0].numel()
            return super().step(prev, state, enc, need_weights)

    def search(model, b=slice(None)):
        if beam_size == 1:
            return greedy_search(model, src[b], lengths[b], limits[b], need_weights=True)
        return beam_search(model, src[b], lengths[b], beam_size, limits[b], 0.6, n_best=2, need_weights=True)

    hyps = search(Counting(6, eos_bias=-1e9))
    assert rows == [beam_size * n for n in (4, 3, 2, 2, 1, 1, 1)]
    for b in range(4):
        alone = search(MarkovLM(6, eos_bias=-1e9), slice(b, b + 1))[0]
        assert [h.tokens for h in hyps[b]] == [h.tokens for h in alone]
        assert [h.score for h in hyps[b]] == pytest.approx([h.score for h in alone], abs=1e-12)
        for h, a in zip(hyps[b], alone):
            torch.testing.assert_close(h.attention, a.attention)


def test_unfinished_tops_up_the_n_best():
    a = 3
    model = TableLM({BOS_ID: {EOS_ID: 0.5, a: 0.5}, a: {a: 1.0}})  # after a, EOS is impossible
    ((done, cut),) = beam_search(model, torch.tensor([[3]]), torch.tensor([1]), 2, 3, length_penalty=0.0,
                                 n_best=2)
    assert (done.tokens, done.finished) == ([], True) and (cut.tokens, cut.finished) == ([a, a, a], False)
    assert cut.log_prob == pytest.approx(math.log(0.5))


def test_early_stop_keeps_a_longer_winner():
    a, b = 3, 4
    # PAD takes the rest of the mass and is masked, so the only alive beam after step 1 is [a] (raw log 0.19)
    model = TableLM({BOS_ID: {EOS_ID: 0.3, a: 0.19, PAD_ID: 0.51}, a: {b: 0.95, EOS_ID: 0.05}, b: {EOS_ID: 1.0}})
    src, lengths = torch.tensor([[3]]), torch.tensor([1])
    ((best,),) = beam_search(model, src, lengths, 2, 5, length_penalty=2.0)
    # log 0.19 / lp(2) < log 0.3: a bound using the next length only would stop here and return []
    assert math.log(0.19) / length_penalty(2, 2.0) < math.log(0.3)
    assert best.tokens == [a, b] and best.score == pytest.approx(math.log(0.19 * 0.95) / length_penalty(3, 2.0))


def test_early_stop():
    model = MarkovLM(8, eos_bias=6.0)  # EOS nearly certain: the bound stops the search long before max_len
    src, lengths = _batch(8)
    hyps = beam_search(model, src, lengths, 4, 50, length_penalty=0.6, n_best=2)
    assert model.calls < 20  # of 50
    assert all(len(nbest) == 2 and all(h.finished for h in nbest) for nbest in hyps)


def test_invalid_arguments():
    model = MarkovLM()
    src, lengths = _batch()
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, src, lengths, 2, 5, n_best=3)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, lengths, 0, 5)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(model, src, lengths, torch.tensor([3, 0, 1, 1]))
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(model, src, lengths, torch.tensor([3, 2]))


# ------------------------------------------------------------------------------------------------ trace
def _walk(trace, step: int, j: int) -> list[int]:
    """Tokens of candidate j at `step`, walked back by hand: its parent is the candidate that filled that slot."""
    tokens = [trace[step].token[j]]
    while step > 0:
        parent = trace[step].parent[j]
        step -= 1
        (j,) = [i for i, slot in enumerate(trace[step].slot) if slot == parent and trace[step].status[i] == "kept"]
        tokens.append(trace[step].token[j])
    return tokens[::-1]


def _ends(trace, status: str) -> list[tuple[list[int], float, float]]:
    return [(_walk(trace, rec.step, j), rec.score[j], rec.log_prob[j]) for rec in trace
            for j, st in enumerate(rec.status) if st == status]


@pytest.mark.parametrize("seed,beam_size,n_best,alpha", [(0, 2, 1, 0.6), (1, 3, 2, 0.0), (2, 5, 5, 1.0),
                                                         (3, 4, 3, 0.6)])
def test_trace_is_the_searchs_own_record(seed, beam_size, n_best, alpha):
    """With a trace the results are bit for bit those without one; the trace's finished hypotheses are the
    finished ones the search ranked (its n-best, in order), the kept beams' parents rebuild every hypothesis, and
    each step lists at most 2K candidates, best first, K kept while the sentence runs."""
    model = MarkovLM(seed, eos_bias=-0.3, heads=2)
    src, lengths = _batch(seed)
    limits = torch.tensor([6, 3, 9, 5])
    plain = beam_search(model, src, lengths, beam_size, limits, alpha, n_best, need_weights=True)
    trace = []
    traced = beam_search(model, src, lengths, beam_size, limits, alpha, n_best, need_weights=True, trace=trace)
    assert len(trace) == 4
    for b, (x, y) in enumerate(zip(plain, traced)):
        assert [(h.tokens, h.score, h.log_prob, h.finished) for h in x] == \
            [(h.tokens, h.score, h.log_prob, h.finished) for h in y]
        assert all(torch.equal(h.attention, g.attention) for h, g in zip(x, y))
        steps = trace[b]
        assert [rec.step for rec in steps] == list(range(len(steps))) and len(steps) <= limits[b]
        for rec in steps:
            assert len(rec.token) <= 2 * beam_size and rec.log_prob == sorted(rec.log_prob, reverse=True)
            kept = sorted(s for s, st in zip(rec.slot, rec.status) if st in ("kept", "unfinished"))
            assert kept == list(range(len(kept))) and len(kept) <= beam_size
            assert rec.score == pytest.approx([lp / length_penalty(rec.step + 1, alpha) for lp in rec.log_prob])
            assert all((tok == EOS_ID) == (st == "finished") for tok, st in zip(rec.token, rec.status)
                       if st != "pruned")
            for j in range(len(rec.token)):
                assert trace_tokens(steps, rec.step, j) == _walk(steps, rec.step, j)
        finished = sorted(_ends(steps, "finished"), key=lambda e: e[1], reverse=True)
        unfinished = sorted(_ends(steps, "unfinished"), key=lambda e: e[1], reverse=True)
        ranked = [(t[:-1], s, lp, True) for t, s, lp in finished] + [(t, s, lp, False) for t, s, lp in unfinished]
        assert [(h.tokens, h.score, h.log_prob, h.finished) for h in y] == ranked[:n_best]
        assert all(t[-1] == EOS_ID for t, _, _ in finished)


def test_trace_marks_unfinished_at_the_limit_and_pruned_eos():
    a = 3
    model = TableLM({BOS_ID: {EOS_ID: 0.5, a: 0.5}, a: {a: 1.0}})  # after a, EOS is impossible
    trace = []
    ((_, cut),) = beam_search(model, torch.tensor([[3]]), torch.tensor([1]), 2, 3, length_penalty=0.0, n_best=2,
                              trace=trace)
    (steps,) = trace
    assert [rec.status for rec in steps] == [["finished", "kept"], ["kept"], ["unfinished"]]
    assert [rec.token for rec in steps] == [[EOS_ID, a], [a], [a]]
    assert trace_tokens(steps, 2, 0) == cut.tokens and steps[2].slot == [0]
    # greedy-like beam 1: an EOS ranked second of 2K is pruned, never finished
    model = TableLM({BOS_ID: {a: 0.6, EOS_ID: 0.4}, a: {EOS_ID: 1.0}})
    beam_search(model, torch.tensor([[3]]), torch.tensor([1]), 1, 4, length_penalty=0.0, trace=trace)
    assert [rec.status for rec in trace[0]] == [["kept", "pruned"], ["finished"]]
