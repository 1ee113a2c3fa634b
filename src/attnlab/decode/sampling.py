"""Sampling from a decoder-only language model (`attnlab.nn.lm.TransformerLM` and any model with its
`init_state` / `step` interface): greedy (temperature 0), temperature, top-k and top-p (nucleus, Holtzman et al.
2020, 3.1) filtering, the prompt fed once and every new token through the key/value cache (`step`), so each costs
O(t).

Shape legend: B batch (samples), V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core.errors import AttnlabError
from attnlab.data.corpus import normalize
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """An AttnlabError naming the first sampling setting out of its range."""
    if not 0 <= temperature < math.inf:
        raise AttnlabError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k < 0:
        raise AttnlabError(f"top_k must be >= 0, got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise AttnlabError(f"top_p must be in (0, 1], got {top_p}")


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Sets to -inf every logit outside the top-k and outside the nucleus (the smallest set of most likely tokens
    whose probability reaches top_p; the most likely token always stays).

    Shape: logits (B, V) -> (B, V).
    """
    logits = logits.clone()
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
        drop_sorted = before >= top_p  # the set already reached top_p without this token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits[drop] = float("-inf")
    return logits


def sample_next(logprobs: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> Tensor:
    """The next token of each row: argmax for temperature 0, else a sample of softmax(logprobs / temperature)
    restricted by top-k / top-p. Shape: logprobs (B, V) -> (B,)."""
    if temperature == 0:
        return logprobs.argmax(dim=-1)
    # in float64 (a temperature of 1e-94 is 0 in float32) and shifted so that the largest is 0 (the same softmax):
    # a tiny temperature then sends the others to -inf instead of the largest to inf, whose softmax is nan
    logits = logprobs.double()
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    probs = filter_logits(logits, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@dataclass
class Sample:
    text: str
    tokens: list[int]
    logprob: float  # under the model (not the filtered distribution), new tokens only
    finished: bool  # ended with EOS (else max_len was reached)


@torch.no_grad()
def generate(model, tok, prompt: str = "", num: int = 1, max_len: int = 100,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
             device: torch.device | str = "cpu", control: bool = False) -> list[Sample]:
    """`num` continuations of `prompt` (empty: from scratch), sampled together with the KV cache. The text returned
    is the prompt followed by the continuation. PAD and BOS are never generated; neither are the tokenizer's control
    pieces (`Tokenizer.control_ids`: pieces that decode to a newline, a tab or another control character, e.g.
    GPT-2's "Ċ"), unless `control` is true: then text may hold newlines."""
    check_sampling(temperature, top_k, top_p)
    if num < 1 or max_len < 1:
        raise AttnlabError(f"the number of samples ({num}) and max_len ({max_len}) must be >= 1")
    prompt_ids = tok.encode(normalize(prompt)) if prompt.strip() else []
    if 1 + len(prompt_ids) + max_len > model.cfg.max_len:
        raise AttnlabError(f"prompt ({len(prompt_ids)} tokens) + max_len ({max_len}) exceed the model's max_len "
                           f"({model.cfg.max_len})")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    never = [PAD_ID, BOS_ID, *(() if control else tok.control_ids)]  # never generated
    state = model.init_state(num, device)
    logprobs = None
    for t in [BOS_ID, *prompt_ids]:
        logprobs, state, _ = model.step(torch.full((num,), t, dtype=torch.long, device=device), state)
    out = torch.zeros(num, 0, dtype=torch.long)
    score = torch.zeros(num)
    done = torch.zeros(num, dtype=torch.bool)
    for _ in range(max_len):
        lp = logprobs.cpu()
        lp[:, never] = float("-inf")  # PAD, BOS and the control characters (`Tokenizer.control_ids`)
        nxt = sample_next(lp, temperature, top_k, top_p, gen)  # (num,)
        nxt = torch.where(done, torch.full_like(nxt, PAD_ID), nxt)
        score += torch.where(done, torch.zeros(num), lp.gather(1, nxt.clamp(min=0)[:, None])[:, 0])
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == EOS_ID
        if done.all():
            break
        logprobs, state, _ = model.step(nxt.to(device), state)
    samples = []
    for row in range(num):
        ids = [i for i in out[row].tolist() if i != PAD_ID]
        finished = bool(ids) and ids[-1] == EOS_ID
        new = ids[:-1] if finished else ids
        samples.append(Sample(tok.decode(prompt_ids + new), new, float(score[row]), finished))
    return samples
