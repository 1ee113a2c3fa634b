"""Greedy and beam search, written once against the decoding interface every attnlab model implements.

    class Seq2Seq(Protocol):
        def encode(self, src: Tensor, src_lengths: Tensor) -> Any          # src (B, S), src_lengths (B,)
        def init_state(self, enc: Any) -> Any
        def step(self, prev: Tensor, state: Any, enc: Any, need_weights: bool = False
                 ) -> tuple[Tensor, Any, Tensor | None]                  # log-probs (B, V), state, (B, ..., S)

`enc` and `state` are any nest of tensors with the batch in dim 0 (or objects with their own `select_batch`);
`select_batch` reorders them.

Conventions:
- ``max_len`` counts decoding steps, i.e. generated tokens including EOS. A hypothesis that reaches its limit
  without EOS is unfinished (``finished=False``); it is returned only when too few finished ones exist
  (as tensor2tensor does).
- PAD and BOS are never generated: their log-probs are masked, in greedy and beam search alike; so are the ids in
  ``banned`` (the translator passes the target tokenizer's `control_ids`: pieces that decode to a newline, a tab
  or another control character would break the one-line-per-sentence output). The mask is one index tensor made
  once per search and applied where PAD and BOS are masked: it costs the same whatever its size.
- Length penalty of GNMT (Wu et al. 2016, eq. 14): score = log P(Y|X) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha,
  where |Y| counts the EOS. alpha = 0 ranks by the raw log-prob.
- Candidates as in fairseq: the 2K best continuations of the K beams; EOS among the first K finishes a
  hypothesis, the K best non-EOS continue. K beams stay alive, and beam size 1 is exactly greedy search.
- Early stop (GNMT/tensor2tensor bound): log-probs are <= 0, so an alive beam's raw log-prob a can only fall,
  and its best reachable score is a / max lp over the lengths it can still end with. A sentence stops once it
  has n_best finished hypotheses and its best alive beam's bound cannot beat the n_best-th finished score; the
  result is then the same as searching to max_len. Beam search drops a stopped sentence's rows from the batch
  (the model's state and `enc` too) at the next step, as fairseq does: the model computes only for the
  sentences still searching. Greedy search drops a finished sentence's row the same way.
- Call the model in eval mode; search runs under torch.no_grad().
- Host waits: on a GPU, reading a tensor on the host (`.cpu()`, `.tolist()`, `.item()`, `if tensor`) waits for
  every queued step. A greedy step reads its (B',) "going on" flags once; a beam step copies what the host needs
  of it (its first K candidates, their parents and EOS flags, the new beams' scores, rows and tokens) once, as one
  (6, B, K) float64 tensor, and copies the token history once more only on a step where a hypothesis finishes or a
  sentence reaches its limit (the device has nothing queued between the two copies: one wait). The host's own
  bookkeeping (`Beams.limits`, `Beams.done`) is numpy, never a tensor. With need_weights each finished
  hypothesis's attention is copied too, and tracing copies the candidates each step. `tests/test_host_waits.py`
  counts the reads of every step.
- Tracing (``beam_search(..., trace=[])``): the search's own record of every step of every sentence
  (`TraceStep`: the 2K candidates, the beam each extends, token, scores, and whether it was kept, finished or
  pruned), written while it prunes. Off by default; with it off, nothing is recorded and the results are the same.

Shape legend: B sentences, K beam size, N = B * K rows, V vocabulary, S source length, t steps so far,
``...`` extra attention dims (heads, layers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from attnlab.core.config import MAX_LEN
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One output sentence."""

    tokens: list[int]  # without BOS and EOS
    score: float  # ranking score: log_prob / lp(|Y|) (greedy: log_prob)
    log_prob: float  # sum of the model's log-probs of the tokens, and of EOS when finished
    attention: Tensor | None = None  # (len(tokens) + finished, ..., S) on the CPU: one row per step
    finished: bool = True  # False: cut at max_len without EOS


def select_batch(obj: Any, index: Tensor) -> Any:
    """Rows `index` (dim 0) of every tensor in a nest of dataclasses, tuples, lists and dicts.

    Non-tensor leaves (None, ints, strings) are kept as they are; containers keep their types. An object with its
    own `select_batch(index)` method (a cache with room to grow: `attnlab.nn.transformer.TransformerState`) is asked
    for its rows.
    """
    if isinstance(obj, Tensor):
        return obj.index_select(0, index.to(obj.device))
    if callable(getattr(obj, "select_batch", None)) and not isinstance(obj, type):
        return obj.select_batch(index)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: select_batch(getattr(obj, f.name), index)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(select_batch(x, index) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(select_batch(x, index) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, select_batch(v, index)) for k, v in obj.items())
    return obj


def max_output_length(src_lengths: Tensor, ratio: float = 1.5, offset: int = 10, cap: int | None = None) -> Tensor:
    """Per-sentence step limit floor(ratio * source length) + offset, at most `MAX_LEN` (a longer output is never a
    translation, and its attention rows would fill the memory) and at most `cap` (the positions the model has,
    `output_cap`): src_lengths (B,) -> (B,) long."""
    if ratio < 0:
        raise ValueError(f"ratio must be >= 0, got {ratio}")
    most = MAX_LEN if cap is None else min(MAX_LEN, cap)
    return ((src_lengths.double() * ratio).floor() + offset).clamp(max=most).long()


def output_cap(model) -> int | None:
    """The most decoding steps a model's positions allow: a Transformer's max_len - 1 (at the last step its decoder
    reads BOS and every step's piece, one position each, and a step's piece may be the EOS that ends it); None for a
    model without positions (an RNN)."""
    n = getattr(getattr(model, "cfg", None), "max_len", None)
    return n - 1 if isinstance(n, int) and not isinstance(n, bool) else None


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14); |Y| includes EOS."""
    return ((5 + length) / 6) ** alpha


def _limits(max_len: int | Tensor, batch: int) -> Tensor:
    """max_len as a (B,) long tensor on the CPU."""
    limits = torch.as_tensor(max_len).long().cpu()
    if limits.dim() == 0:
        limits = limits.expand(batch)
    if limits.shape != (batch,):
        raise ValueError(f"max_len must be an int or a ({batch},) tensor, got shape {tuple(limits.shape)}")
    if (limits < 1).any():
        raise ValueError(f"max_len must be >= 1, got {limits.min().item()}")
    return limits


def banned_ids(banned: Sequence[int] = (), device: torch.device | str = "cpu") -> Tensor:
    """The ids a search never generates, as one index tensor on `device`: PAD, BOS and `banned`."""
    return torch.tensor(sorted({PAD_ID, BOS_ID, *(int(i) for i in banned)}), dtype=torch.long, device=device)


def mask_banned(log_probs: Tensor, banned: Tensor) -> Tensor:
    """log_probs (N, V) with the ids `banned` (from `banned_ids`) at -inf: never generated."""
    return log_probs.index_fill(-1, banned, NEG_INF)


# ---------------------------------------------------------------------------------------------- greedy
@torch.no_grad()
def greedy_search(model: Any, src: Tensor, src_lengths: Tensor, max_len: int | Tensor,
                  need_weights: bool = False, banned: Sequence[int] = ()) -> list[list[Hypothesis]]:
    """The most probable next token at each step, for all sentences at once; one hypothesis per sentence. A
    sentence that ends (EOS or its limit) leaves the batch at the next step, its state and `enc` rows too.
    banned: token ids never generated besides PAD and BOS (e.g. `tokenizer.control_ids`).

    Shape: src (B, S), src_lengths (B,), max_len int or (B,) -> B lists of one Hypothesis.
    """
    B = src.size(0)
    limits = _limits(max_len, B)
    never = banned_ids(banned, src.device)
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=src.device)  # (B',) the rows still decoding
    rows = torch.arange(B, device=src.device)  # (B',) each one's sentence
    limits_dev = limits.to(src.device)
    tokens = torch.full((B, int(limits.max())), PAD_ID, dtype=torch.long, device=src.device)  # (B, T)
    steps = torch.zeros(B, dtype=torch.long, device=src.device)  # steps taken per sentence
    log_prob = torch.zeros(B, dtype=torch.float64, device=src.device)
    attention = None  # (B, T, ..., S)
    for t in range(int(limits.max())):
        log_probs, state, weights = model.step(prev, state, enc, need_weights)  # (B', V)
        best, prev = mask_banned(log_probs, never).max(dim=-1)  # (B',), (B',)
        log_prob[rows] += best.double()
        steps[rows] += 1
        tokens[rows, t] = prev
        if need_weights and weights is not None:
            if attention is None:
                attention = weights.new_zeros((B, tokens.size(1)) + weights.shape[1:])
            attention[rows, t] = weights
        going = ((prev != EOS_ID) & (t + 1 < limits_dev[rows])).tolist()  # (B',): the step's one read on the host
        if not all(going):
            if not any(going):
                break
            keep = torch.tensor([k for k, g in enumerate(going) if g], device=src.device)  # (B'',)
            rows, prev = rows[keep], prev[keep]
            state, enc = select_batch(state, keep), select_batch(enc, keep)
    tokens_bt, attn_bt = tokens.cpu(), None if attention is None else attention.cpu()  # (B, T), (B, T, ..., S)
    hyps = []
    for b, (n, lp) in enumerate(zip(steps.tolist(), log_prob.tolist())):
        toks = tokens_bt[b, :n].tolist()
        finished = toks[-1] == EOS_ID
        hyps.append([Hypothesis(toks[:-1] if finished else toks, lp, lp,
                                None if attn_bt is None else attn_bt[b, :n], finished)])
    return hyps


# ------------------------------------------------------------------------------------------------ beam
@dataclass
class Beams:
    """Search bookkeeping for B sentences x K beams; the model's own state is kept apart."""

    # per sentence still in the batch (B of them: `beam_shrink` drops the stopped ones)
    scores: Tensor  # (B, K) raw log-prob of each alive beam; -inf: empty slot or stopped sentence
    tokens: Tensor  # (N, t) generated tokens, without BOS
    attention: Tensor | None  # (N, t, ..., S) attention history of each alive beam
    limits: np.ndarray  # (B,) int64: steps allowed per sentence (host bookkeeping: numpy, never read from a device)
    done: np.ndarray  # (B,) bool
    sentence: list[int]  # (B,) each one's index in the input
    # per input sentence
    finished: list[list[Hypothesis]]  # in the order found
    unfinished: list[list[Hypothesis]]  # alive beams of a sentence that hit its limit: the fallback
    n_best: int
    alpha: float
    trace: list[list[TraceStep]] | None = None  # when tracing


@dataclass
class TraceStep:
    """Beam search's own record of one sentence at one step: its candidates, the 2K best continuations of the
    K beams (best first, those with log-prob -inf left out), and what became of each.

    A candidate extends the beam in slot `parent` of the previous step (step 0: the empty hypothesis, slot 0);
    a kept one fills slot `slot` of this step. status: "kept" (a beam of the next step), "finished" (EOS among
    the K best: a finished hypothesis), "pruned" (dropped), "unfinished" (kept at the sentence's step limit:
    a fallback hypothesis without EOS).
    """

    step: int  # 0-based; a candidate's hypothesis has step + 1 tokens, EOS included
    parent: list[int]
    token: list[int]
    log_prob: list[float]  # raw log P of the hypothesis
    score: list[float]  # log_prob / lp(step + 1): a finished hypothesis' ranking score
    status: list[str]
    slot: list[int]  # -1 unless kept or unfinished


class Candidates(NamedTuple):
    scores: Tensor  # (B, 2K) raw log-probs, best first
    beam: Tensor  # (B, 2K) which beam each candidate extends
    token: Tensor  # (B, 2K)


def beam_init(model: Any, src: Tensor, src_lengths: Tensor, beam_size: int, max_len: int | Tensor,
              n_best: int = 1, alpha: float = 0.0) -> tuple[Any, Any, Beams]:
    """Encode, then give every sentence K rows: enc and state expanded to (N, ...), only beam 0 alive.

    With one alive beam at step 0 the K rows do not all propose the same K continuations.
    """
    B, K = src.size(0), beam_size
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    expand = torch.arange(B, device=src.device).repeat_interleave(K)  # (N,): 0,0,..,1,1,..
    enc, state = select_batch(enc, expand), select_batch(state, expand)
    scores = torch.full((B, K), NEG_INF, device=src.device)
    scores[:, 0] = 0.0
    beams = Beams(scores, torch.zeros(B * K, 0, dtype=torch.long, device=src.device), None,
                  _limits(max_len, B).numpy(), np.zeros(B, dtype=bool), list(range(B)), [[] for _ in range(B)],
                  [[] for _ in range(B)], n_best, alpha)
    return enc, state, beams


def beam_step(log_probs: Tensor, scores: Tensor, banned: Tensor | None = None) -> Candidates:
    """The 2K best continuations per sentence, over all K * V (beam, token) pairs; the ids `banned` (from
    `banned_ids`; None: PAD and BOS) are never among them.

    Shape: log_probs (N, V), scores (B, K) -> Candidates of (B, 2K), best first.
    """
    B, K = scores.shape
    V = log_probs.size(-1)
    banned = banned_ids((), log_probs.device) if banned is None else banned
    total = scores[:, :, None] + mask_banned(log_probs, banned).view(B, K, V)  # (B, K, V)
    cand, flat = total.view(B, K * V).topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
    return Candidates(cand, flat // V, flat % V)


def beam_prune(beams: Beams, cand: Candidates, weights: Tensor | None, t: int) -> tuple[Tensor, Tensor]:
    """Advance from step t to t + 1: EOS among the K best candidates is moved to the finished lists, the K
    best non-EOS candidates become the beams, histories follow their backpointers; then stop sentences
    at their limit or by the early-stop bound.

    Shape: weights (N, ..., S) or None -> rows (N,) to reorder the model state, next tokens (N,).
    """
    B, K = beams.scores.shape
    parent = torch.arange(B, device=cand.beam.device)[:, None] * K + cand.beam  # (B, 2K) row of the parent
    is_eos = cand.token == EOS_ID  # (B, 2K)
    alive, pick = cand.scores.masked_fill(is_eos, NEG_INF).topk(K, dim=-1)  # (B, K)
    rows = parent.gather(1, pick)  # (B, K)
    prev = cand.token.gather(1, pick)  # (B, K)
    # what the host needs of this step, in one copy from the device (float64 holds the rows, the token ids and the
    # float32 scores exactly): the K first candidates' scores, parents and EOS flags, the new beams' scores, rows
    # and tokens
    host = torch.stack([cand.scores[:, :K].double(), parent[:, :K].double(), is_eos[:, :K].double(), alive.double(),
                        rows.double(), prev.double()]).cpu().numpy()  # (6, B, K)
    scores_k, parent_k, eos_k, alive_host, rows_host, prev_host = host
    ends = np.argwhere((eos_k == 1) & np.isfinite(scores_k)).tolist()  # [(b, j)]: EOS among the K best
    reach = bool((~beams.done & (beams.limits <= t + 1)).any())  # a sentence at its limit after this step
    # the token history (N, t), before this step, in a second copy only when a hypothesis ends here
    history = beams.tokens.cpu().numpy() if ends or reach else None
    for b, j in ends:
        row, raw = int(parent_k[b, j]), float(scores_k[b, j])
        attention = None if weights is None else _append(beams.attention, weights, row)
        beams.finished[beams.sentence[b]].append(Hypothesis(history[row].tolist(),
                                                             raw / length_penalty(t + 1, beams.alpha), raw,
                                                             attention, finished=True))
    if beams.trace is not None:
        beam_record(beams, cand, pick, t)
    rows, prev = rows.view(-1), prev.view(-1)  # (N,), (N,)
    beams.tokens = torch.cat([beams.tokens[rows], prev[:, None]], dim=1)  # (N, t + 1)
    if weights is not None:
        w = weights[rows, None]  # (N, 1, ..., S)
        beams.attention = w if beams.attention is None else torch.cat([beams.attention[rows], w], dim=1)
    beams.scores = alive
    tokens_host = None if not reach else np.concatenate(  # (N, t + 1): the beams' tokens after this step
        [history[rows_host.reshape(-1).astype(np.int64)], prev_host.reshape(-1, 1).astype(np.int64)], axis=1)
    _stop_sentences(beams, t + 1, alive_host, tokens_host)
    return rows, prev


STATUS = ("pruned", "kept", "finished", "unfinished")  # TraceStep.status, by code


def beam_record(beams: Beams, cand: Candidates, pick: Tensor, t: int) -> None:
    """Appends step t's `TraceStep` of each sentence with a finite candidate to beams.trace, as `beam_prune`
    decides: EOS among the first K finishes, the candidates at `pick` (B, K) fill the K slots in order, the
    rest are pruned; kept ones at the sentence's limit (t + 1) are the unfinished fallbacks. The statuses are
    computed on the (B, 2K) tensors at once: one device sync per step."""
    B, K = beams.scores.shape
    finite = torch.isfinite(cand.scores)  # (B, 2K); best first, so the finite ones are a prefix of each row
    is_eos = cand.token == EOS_ID
    picked = torch.zeros_like(finite).scatter_(1, pick, True)  # (B, 2K)
    kept = picked & ~is_eos & finite
    slot = torch.full_like(cand.token, -1).scatter_(1, pick, torch.arange(K, device=pick.device).expand(B, K))
    slot = slot.masked_fill(~kept, -1)  # (B, 2K)
    first_k = torch.arange(cand.token.size(1), device=pick.device) < K  # (2K,)
    at_limit = torch.from_numpy(beams.limits <= t + 1).to(pick.device)[:, None]  # (B, 1)
    code = (kept.long() + 2 * (is_eos & finite & first_k).long() + 2 * (kept & at_limit).long())  # STATUS index
    lp = length_penalty(t + 1, beams.alpha)
    rows = zip(finite.sum(1).tolist(), cand.beam.tolist(), cand.token.tolist(), cand.scores.tolist(), code.tolist(),
               slot.tolist())
    for b, (n, parent, token, raw, status, slots) in enumerate(rows):
        if n:
            beams.trace[beams.sentence[b]].append(TraceStep(t, parent[:n], token[:n], raw[:n],
                                                            [x / lp for x in raw[:n]],
                                                            [STATUS[c] for c in status[:n]], slots[:n]))


def trace_tokens(trace: list[TraceStep], step: int, index: int) -> list[int]:
    """The tokens of candidate `index` of step `step` in one sentence's trace, its own token last (EOS included),
    found by following its parents back through the slots they filled."""
    tokens = []
    for rec in reversed(trace[:step + 1]):
        assert rec.step == step, f"trace step {rec.step} where {step} was expected"
        tokens.append(rec.token[index])
        if step == 0:
            break
        parent, step = rec.parent[index], step - 1
        index = trace[step].slot.index(parent)
    return tokens[::-1]


def _append(history: Tensor | None, weights: Tensor, row: int) -> Tensor:
    """Attention of one row with this step's weights appended: (t + 1, ..., S) on the CPU."""
    w = weights[row, None]  # (1, ..., S)
    return (w if history is None else torch.cat([history[row], w], dim=0)).cpu()


def _stop_sentences(beams: Beams, steps: int, scores_host: np.ndarray, tokens_host: np.ndarray | None) -> None:
    """Mark sentences done after `steps` steps: at their limit (alive beams kept as unfinished fallbacks),
    with no alive beam left, or when no alive beam can enter the n_best (the bound in the module docstring).

    scores_host: beams.scores (B, K) on the host (the search copies it once per step); tokens_host: beams.tokens
    (N, steps) on the host, given when a sentence reaches its limit at this step."""
    K = beams.scores.size(1)
    was_done = beams.done.copy()
    for b in np.flatnonzero(~beams.done).tolist():
        scores = scores_host[b].tolist()  # (K,)
        limit, best_alive, finished = int(beams.limits[b]), max(scores), beams.finished[beams.sentence[b]]
        if steps >= limit:
            for k, raw in enumerate(scores):
                if raw > NEG_INF:
                    row = b * K + k
                    attention = None if beams.attention is None else beams.attention[row].cpu()
                    beams.unfinished[beams.sentence[b]].append(Hypothesis(
                        tokens_host[row].tolist(), raw / length_penalty(steps, beams.alpha), raw, attention,
                        finished=False))
            beams.done[b] = True
        elif best_alive == NEG_INF:
            beams.done[b] = True
        elif len(finished) >= beams.n_best:
            kth = sorted((h.score for h in finished), reverse=True)[beams.n_best - 1]
            best_lp = max(length_penalty(steps + 1, beams.alpha), length_penalty(limit, beams.alpha))
            beams.done[b] = kth >= best_alive / best_lp
    if (was_done != beams.done).any():
        # masked_fill_, not boolean indexing, and a copy to the device: the host does not wait for the device here
        done = torch.tensor(beams.done).to(beams.scores.device, non_blocking=True)  # (B,)
        beams.scores.masked_fill_(done[:, None], NEG_INF)


def beam_shrink(beams: Beams) -> Tensor | None:
    """Drops the stopped sentences from the batch: beams keeps the B' still searching, in order. Returns the rows
    (B' * K,) of theirs, to select from the model's state and `enc`; None when none stopped."""
    if not beams.done.any():
        return None
    K, device = beams.scores.size(1), beams.scores.device
    keep = np.flatnonzero(~beams.done)  # (B',) on the host
    keep_dev = torch.from_numpy(keep).to(device)  # (B',)
    rows = (keep_dev[:, None] * K + torch.arange(K, device=device)).flatten()  # (B' * K,)
    beams.scores = beams.scores.index_select(0, keep_dev)
    beams.tokens = beams.tokens.index_select(0, rows)
    beams.attention = None if beams.attention is None else beams.attention.index_select(0, rows)
    beams.limits, beams.done = beams.limits[keep], beams.done[keep]
    beams.sentence = [beams.sentence[b] for b in keep.tolist()]
    return rows


def beam_finalize(beams: Beams) -> list[list[Hypothesis]]:
    """Per sentence, the n_best finished hypotheses by score, topped up with unfinished ones if too few."""
    out = []
    for finished, unfinished in zip(beams.finished, beams.unfinished):
        ranked = sorted(finished, key=lambda h: h.score, reverse=True)
        if len(ranked) < beams.n_best:
            ranked += sorted(unfinished, key=lambda h: h.score, reverse=True)
        out.append(ranked[:beams.n_best])
    return out


@torch.no_grad()
def beam_search(model: Any, src: Tensor, src_lengths: Tensor, beam_size: int, max_len: int | Tensor,
                length_penalty: float = 0.6, n_best: int = 1, need_weights: bool = False,
                trace: list[list[TraceStep]] | None = None, banned: Sequence[int] = ()) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once: one model.step on N = B * K rows per step.

    Args:
        beam_size: K. length_penalty: GNMT alpha (0: none). n_best: hypotheses returned per sentence.
        max_len: step limit, an int or per sentence (B,) (see `max_output_length`).
        trace: a list to fill with the search's record, one list of `TraceStep` per sentence (its steps in
            order); None: nothing recorded.
        banned: token ids never generated besides PAD and BOS (e.g. `tokenizer.control_ids`).
    Shape: src (B, S), src_lengths (B,) -> B lists of n_best Hypothesis, best first.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"need 1 <= n_best ({n_best}) <= beam_size ({beam_size})")
    enc, state, beams = beam_init(model, src, src_lengths, beam_size, max_len, n_best, length_penalty)
    if trace is not None:
        trace[:] = [[] for _ in range(src.size(0))]
        beams.trace = trace
    prev = torch.full((src.size(0) * beam_size,), BOS_ID, dtype=torch.long, device=src.device)  # (N,)
    never = banned_ids(banned, src.device)
    for t in range(int(beams.limits.max())):
        log_probs, state, weights = model.step(prev, state, enc, need_weights)  # (N, V)
        cand = beam_step(log_probs, beams.scores, never)
        rows, prev = beam_prune(beams, cand, weights if need_weights else None, t)
        if beams.done.all():
            break
        keep = beam_shrink(beams)  # (N',) the slots of the sentences still searching, or None: all are
        if keep is not None:
            rows, prev, enc = rows[keep], prev[keep], select_batch(enc, keep)
        state = select_batch(state, rows)
    return beam_finalize(beams)
