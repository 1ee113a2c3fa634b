"""Every attention of a run for one input, for the explorer page (`attnlab serve`) and `attnlab plot explore`.

An `Exploration` holds, for one input, each attention map the run's model computes, as (layers, heads, rows,
columns) weights with the token pieces of its rows (queries) and columns (keys):

- translation runs: a Transformer's encoder self-attention ``enc_self``, decoder masked self-attention
  ``dec_self`` and cross-attention ``cross`` of a teacher-forced pass over the best hypothesis (the search's own
  cross-attention to float rounding); an RNN's attention alignment ``align`` (the search's weights);
- language-model runs: the causal self-attention ``lm_self`` of [BOS] + prompt + greedy continuation;
- sentence-pair runs: the decomposable model's soft alignments ``a_to_b``, ``b_to_a`` (and intra-sentence
  ``intra_a``, ``intra_b``); MiniLM (a siamese encoder: each sentence is encoded alone) the encoder
  self-attention of each sentence, ``a_self`` and ``b_self``;
- attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", sec. 3) of every
  non-causal or causal self-attention stack (``*_rollout``): with heads averaged, A~_l = 0.5 A_l + 0.5 I,
  rows renormalised, R_l = A~_l R_{l-1}; its layer l is the rollout through layer l;
- for multi-head maps, the queries and keys of every head (each layer's attention inputs captured with forward
  pre-hooks and projected with the layer's own W^Q and W^K) for the neuron view: q_i . k_j * scale is the
  pre-softmax score whose softmax is the weight;
- the decoding: the n-best list with scores, and per output token its probability and the top 5 alternatives;
- the decoding step by step (translation runs with attention, `views.DecodingSteps`): each step's context vector,
  captured by hooks in the teacher-forced pass (RNN: the attention module's output c_t; Transformer: each
  cross-attention's W^O input, the heads concatenated), and beam search's own trace (`attnlab.decode.search.TraceStep`).

The exploration's types, the page's payloads, the word toggle, the files and the inline notebook view are
`attnlab.app.views`.

Shape legend: L layers, H heads, R rows (query tokens), C columns (key tokens), Dh head dim, V vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from attnlab.app.views import AttentionMap, DecodingSteps, Exploration, TokenChoice
from attnlab.core.errors import AttnlabError
from attnlab.data.batching import pad_sequences
from attnlab.data.corpus import normalize
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, SPECIALS
from attnlab.decode.search import trace_tokens
from attnlab.decode.translate import Translator
from attnlab.families.base import LoadedRun
from attnlab.families.lm import generate
from attnlab.families.pairs import pair_ids
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.transformer import TransformerSeq2Seq

MAX_NBEST = 5
TOP_K = 5


# ---------------------------------------------------------------------------------------------- rollout
def attention_rollout(weights: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020, sec. 3) through each layer of a self-attention stack.

    Heads are averaged, the residual connection is modelled as A~ = 0.5 A + 0.5 I with rows renormalised, and
    R_1 = A~_1, R_l = A~_l R_{l-1}. Shape: weights (L, H, T, T) -> (L, T, T), row l the rollout through layer l.
    """
    L, _, T, _ = weights.shape
    a = 0.5 * weights.double().mean(1) + 0.5 * torch.eye(T, dtype=torch.float64)  # (L, T, T)
    a = a / a.sum(-1, keepdim=True)
    out, r = [], torch.eye(T, dtype=torch.float64)
    for layer in range(L):
        r = a[layer] @ r  # (T, T)
        out.append(r)
    return torch.stack(out).float()


def with_rollout(maps: dict[str, AttentionMap], key: str) -> None:
    """Adds `<key>_rollout` (L, 1, T, T) after the self-attention map `key`."""
    m = maps[key]
    maps[f"{key}_rollout"] = AttentionMap(f"{key}_rollout", f"rollout of the {m.title}",
                                          attention_rollout(m.weights)[:, None], m.rows, m.cols, m.causal)


# ---------------------------------------------------------------------------------------------- recording
def this_thread_only(hook: Callable) -> Callable:
    """`hook` called only for the forward passes of the thread that made it (others pass through untouched).

    The explorer records a shared model's inputs and outputs with hooks while other threads (the server's other
    lane, `Run.explore` or `Run.translate` from user threads) run the same modules: a hook bound to its thread
    records one exploration's own forward calls and nothing of theirs, so any number of explorations and
    translations can run at once.
    """
    owner = threading.get_ident()

    def bound(*args):
        if threading.get_ident() == owner:
            return hook(*args)
        return None

    return bound


# ---------------------------------------------------------------------------------------------- queries and keys
class QKCapture:
    """Forward pre-hooks on MultiHeadAttention modules that keep their query and key inputs; `projected(i)`
    gives attention i's q (B, H, R, Dh) and k (B, H, C, Dh) from its own W^Q and W^K.

    Self-attention modules are hooked on `forward` (query and key are its first two arguments). A cross-attention
    is queried through `attend_projected` with keys projected once: hook its W^Q's input (the query) and give
    the keys' input (the encoder memory) with `set_keys`. The hooks see only the calling thread's forward passes
    (`this_thread_only`).
    """

    def __init__(self) -> None:
        self.attns: list[MultiHeadAttention] = []
        self.queries: list[Tensor | None] = []
        self.keys: list[Tensor | None] = []
        self.handles: list = []

    def add_self(self, attn: MultiHeadAttention) -> None:
        i = self._add(attn)

        def hook(module, args):
            self.queries[i], self.keys[i] = args[0].detach(), args[1].detach()

        self.handles.append(attn.register_forward_pre_hook(this_thread_only(hook)))

    def add_cross(self, attn: MultiHeadAttention) -> int:
        i = self._add(attn)

        def hook(module, args):
            self.queries[i] = args[0].detach()

        self.handles.append(attn.W_Q.register_forward_pre_hook(this_thread_only(hook)))
        return i

    def set_keys(self, i: int, key_input: Tensor) -> None:
        self.keys[i] = key_input.detach()

    def _add(self, attn: MultiHeadAttention) -> int:
        self.attns.append(attn)
        self.queries.append(None)
        self.keys.append(None)
        return len(self.attns) - 1

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def projected(self, i: int) -> tuple[Tensor, Tensor]:
        attn = self.attns[i]
        assert self.queries[i] is not None and self.keys[i] is not None, "attention inputs not captured"
        return attn.split_heads(attn.W_Q(self.queries[i])), attn.split_heads(attn.W_K(self.keys[i]))


@contextlib.contextmanager
def capture(self_attns: Sequence[MultiHeadAttention] = (), cross_attns: Sequence[MultiHeadAttention] = ()
            ) -> Iterator[QKCapture]:
    """QKCapture with the given modules hooked; hooks removed on exit. Cross modules come after self ones."""
    cap = QKCapture()
    for a in self_attns:
        cap.add_self(a)
    for a in cross_attns:
        cap.add_cross(a)
    try:
        yield cap
    finally:
        cap.remove()


@contextlib.contextmanager
def captured(modules: Sequence[nn.Module], inputs: bool) -> Iterator[list[list[Tensor]]]:
    """Per module, its first input (inputs=True, a forward pre-hook) or its output's first tensor (a forward hook)
    of each call this thread makes while the context is open (`this_thread_only`); hooks removed on exit."""
    seen: list[list[Tensor]] = [[] for _ in modules]

    def keep(i: int, x) -> None:
        seen[i].append((x[0] if isinstance(x, tuple) else x).detach())

    handles = [m.register_forward_pre_hook(this_thread_only(lambda mod, args, i=i: keep(i, args))) if inputs
               else m.register_forward_hook(this_thread_only(lambda mod, args, out, i=i: keep(i, out)))
               for i, m in enumerate(modules)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def stacked_qk(cap: QKCapture, indices: Sequence[int]) -> tuple[Tensor, Tensor, float]:
    """q (L, H, R, Dh), k (L, H, C, Dh) of the first sentence of the batch, and the scale 1/sqrt(Dh)."""
    qs, ks = zip(*(cap.projected(i) for i in indices))
    q, k = torch.stack([x[0] for x in qs]).float(), torch.stack([x[0] for x in ks]).float()
    return q, k, 1.0 / math.sqrt(q.size(-1))


# ---------------------------------------------------------------------------------------------- decoding
def token_choices(log_probs: Tensor, targets: Sequence[int], piece, generated: Sequence[bool] | None = None,
                  banned: Sequence[int] = ()) -> list[TokenChoice]:
    """Per position, the target's probability and the TOP_K most probable tokens (PAD, BOS and `banned`, the
    tokenizer's `control_ids`, never are: the searches never generate them). log_probs (T, V), targets T ids,
    piece(id) -> str."""
    lp = log_probs.float().clone()
    lp[:, [PAD_ID, BOS_ID, *banned]] = float("-inf")
    top = lp.topk(min(TOP_K, lp.size(-1)), dim=-1)
    out = []
    for t, target in enumerate(targets):
        alts = [(piece(i), math.exp(v)) for v, i in zip(top.values[t].tolist(), top.indices[t].tolist())
                if v > float("-inf")]
        out.append(TokenChoice(piece(target), math.exp(float(lp[t, target])), alts,
                               True if generated is None else generated[t]))
    return out


def scheme_of(tokenizer) -> str:
    kind = getattr(tokenizer, "kind", "wordpiece")
    return "char" if kind == "char" else "sentencepiece" if kind in ("bpe", "unigram") else "wordpiece"


# ---------------------------------------------------------------------------------------------- families
@torch.no_grad()
def explore_translation(translator, sentence: str, beam: int) -> Exploration:
    """All attention of a translation run (`attnlab.decode.translate.Translator`) for one sentence, beam search with
    up to MAX_NBEST hypotheses, the best one's token probabilities from a teacher-forced pass."""

    model, tgt = translator.model, translator.tokenizers.tgt
    nbest = translator.translate([sentence], beam_size=beam, n_best=min(beam, MAX_NBEST), need_weights=True,
                                 trace=True)[0]
    best = nbest[0]
    src_ids = translator.encode_source([sentence])[0]
    piece_ids = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}
    out_ids = [piece_ids[p] for p in best.tgt_tokens]  # the output pieces, </s> included when finished
    device = translator.device
    src = torch.tensor([src_ids], device=device)  # (1, S)
    lengths = torch.tensor([len(src_ids)], device=device)
    tgt_in = pad_sequences([[BOS_ID] + out_ids[:-1]]).to(device)  # (1, T)
    tgt_in_pieces = [SPECIALS[BOS_ID]] + best.tgt_tokens[:-1]
    maps: dict[str, AttentionMap] = {}
    steps = None
    if isinstance(model, TransformerSeq2Seq):
        n_enc, n_dec = len(model.encoder), len(model.decoder)
        with capture([l.self_attn for l in model.encoder] + [l.self_attn for l in model.decoder],
                     [l.cross_attn for l in model.decoder]) as cap, \
                captured([l.cross_attn.W_O for l in model.decoder], inputs=True) as heads, \
                captured([model.enc_norm], inputs=False) as memory:
            att = model.attention_maps(src, lengths, tgt_in)  # (1, N, H, ., .) each
            for i in range(n_enc + n_dec, n_enc + 2 * n_dec):
                cap.set_keys(i, memory[0][-1])
            specs = (("enc_self", "encoder self-attention", best.src_tokens, best.src_tokens, False, range(n_enc)),
                     ("dec_self", "decoder masked self-attention", tgt_in_pieces, tgt_in_pieces, True,
                      range(n_enc, n_enc + n_dec)),
                     ("cross", "cross-attention", best.tgt_tokens, best.src_tokens, False,
                      range(n_enc + n_dec, n_enc + 2 * n_dec)))
            for key, title, rows, cols, causal, idx in specs:
                q, k, scale = stacked_qk(cap, idx)
                maps[key] = AttentionMap(key, title, att[key][0].float().cpu(), rows, cols, causal, q.cpu(), k.cpu(),
                                         scale)
        with_rollout(maps, "enc_self")
        maps = {k: maps[k] for k in ("cross", "enc_self", "enc_self_rollout", "dec_self")}
        context = torch.stack([seen[-1][0] for seen in heads]).float().cpu()  # (L, T, D): Concat(heads) per layer
        steps = DecodingSteps("cross", context, "cross-attention output before W^O (heads concatenated; head h: "
                              "sum_j a_hj v_hj)", heads=model.decoder[0].cross_attn.h)
    elif best.attention is not None:
        maps["align"] = AttentionMap("align", f"{model.cfg.attention} attention", best.attention[None, None].float(),
                                     best.tgt_tokens, best.src_tokens)
    rnn_attention = [] if steps is not None or "align" not in maps else [model.attention]
    with captured(rnn_attention, inputs=False) as contexts:
        log_probs = model(src, lengths, tgt_in)[0].log_softmax(-1).cpu()  # (T, V)
    if rnn_attention:
        context = torch.cat(contexts[0], dim=1)[0].float().cpu()  # one (1, T or 1, He) per call -> (T, He)
        values = "W_V h_j" if model.cfg.attention == "parameterized" else "h_j, the encoder output j"
        steps = DecodingSteps("align", context[None], f"attention context the decoder uses, c_t = sum_j a_tj v_j "
                              f"(v_j = {values})")
    if steps is not None and best.trace is not None:
        trace = steps.tree = best.trace
        steps.pieces = {i: tgt.id_to_piece(i) for rec in trace for i in rec.token}
        steps.texts = {(rec.step, j): tgt.decode([i for i in trace_tokens(trace, rec.step, j) if i != EOS_ID])
                       for rec in trace for j, status in enumerate(rec.status) if status in ("finished", "unfinished")}
    return Exploration(family="transformer" if isinstance(model, TransformerSeq2Seq) else "rnn", output=best.text,
                       maps=maps, scheme=scheme_of(tgt), score=best.score, nbest=[(t.text, t.score) for t in nbest],
                       choices=token_choices(log_probs, out_ids, tgt.id_to_piece, banned=tgt.control_ids),
                       steps=steps)


@torch.no_grad()
def explore_generation(run: LoadedRun, prompt: str, max_new: int) -> Exploration:
    """The causal self-attention of a language model over [BOS] + prompt + its greedy continuation (at most
    max_new tokens), its rollout, and every token's probability with the top 5 alternatives."""

    model, tok = run.model, run.tokenizers.tgt
    sample = generate(model, tok, prompt, num=1, max_len=max_new, temperature=0.0, device=run.device)[0]
    prompt_ids = tok.encode(normalize(prompt))
    ids = [BOS_ID, *prompt_ids, *sample.tokens]  # the model's input; EOS is predicted, never fed
    targets = ids[1:] + ([EOS_ID] if sample.finished else [])
    tokens = torch.tensor([ids], device=run.device)  # (1, T)
    with capture([l.self_attn for l in model.layers]) as cap:
        weights = model.attention_maps(tokens)[0].float().cpu()  # (N, H, T, T)
        q, k, scale = stacked_qk(cap, range(len(model.layers)))
    pieces = [tok.id_to_piece(i) for i in ids]
    maps = {"lm_self": AttentionMap("lm_self", "causal self-attention", weights, pieces, pieces, True, q.cpu(),
                                    k.cpu(), scale)}
    with_rollout(maps, "lm_self")
    log_probs = model(tokens)[0].log_softmax(-1).cpu()[: len(targets)]  # (T, V)
    generated = [t > len(prompt_ids) for t in range(1, len(targets) + 1)]
    return Exploration(family="lm", output=sample.text, maps=maps, scheme=scheme_of(tok), score=sample.logprob,
                       choices=token_choices(log_probs, targets, tok.id_to_piece, generated, tok.control_ids))


@torch.no_grad()
def explore_pair(run: LoadedRun, a: str, b: str) -> Exploration:
    """A sentence pair: the decomposable model's soft alignments, or MiniLM's self-attention of each sentence
    (its encoder reads each sentence alone), with P(same verse)."""
    model, ids = run.model, pair_ids(run.cfg, run.tokenizers)
    ta, tb = (torch.tensor([x], device=run.device) for x in ids.ids([a, b]))
    logits = model(ta, ta > -1, tb, tb > -1)  # one pair, no padding
    p_same = logits.softmax(-1)[0, 1].item()
    maps: dict[str, AttentionMap] = {}
    if hasattr(model, "forward_with_weights"):
        la, lb = ids.pieces(a), ids.pieces(b)
        _, w = model.forward_with_weights(ta, ta > -1, tb, tb > -1)
        specs = (("a_to_b", "alignment a -> b (rows: softmax over b)", w.a_to_b, la, lb),
                 ("b_to_a", "alignment b -> a (rows: softmax over a)", w.b_to_a, lb, la),
                 ("intra_a", "intra-sentence attention of a", w.intra_a, la, la),
                 ("intra_b", "intra-sentence attention of b", w.intra_b, lb, lb))
        for key, title, weights, rows, cols in specs:
            if weights is not None:  # intra-sentence attention is optional
                maps[key] = AttentionMap(key, title, weights[0, None, None].float().cpu(), rows, cols)  # (1, 1, R, C)
        scheme = scheme_of(run.tokenizers.src)
    else:
        encoder = model.encoder
        for key, side, t in (("a_self", "a", ta), ("b_self", "b", tb)):
            with capture([layer.self_attn for layer in encoder.layers]) as cap:
                weights = encoder_self_attention(encoder.embeddings(t), encoder.layers)
                q, k, scale = stacked_qk(cap, range(len(encoder.layers)))
            pieces = ids.tok.encode(a if side == "a" else b).tokens
            maps[key] = AttentionMap(key, f"encoder self-attention of {side}", weights, pieces, pieces, False, q, k,
                                     scale)
            with_rollout(maps, key)
        scheme = "wordpiece"
    return Exploration(family=run.cfg.model.family, output=f"P(same verse) = {p_same:.3f}", maps=maps, scheme=scheme,
                       score=p_same)


def encoder_self_attention(x: Tensor, layers: nn.ModuleList) -> Tensor:
    """Runs `attnlab.nn.transformer.EncoderLayer`s over one unpadded sentence x (1, T, D) asking for weights:
    (N, H, T, T)."""
    weights = []
    for layer in layers:
        x, w = layer(x, None, need_weights=True)  # (1, T, D)
        weights.append(w[0])
    return torch.stack(weights).float().cpu()


# ---------------------------------------------------------------------------------------------- payloads


# ---------------------------------------------------------------------------------------------- runs, files
def explore_run(run: LoadedRun, sentence: str, sentence_b: str | None = None, beam: int | None = None,
                max_new: int = 40, translator=None) -> Exploration:
    """The exploration of one input of a loaded run of any family with attention: a translation run (beam: the
    run's by default; `translator`: a ready `attnlab.decode.translate.Translator` of it), a language model (sentence is
    the prompt) or a sentence-pair run (sentence and sentence_b)."""
    family = run.family.name
    if family in ("rnn", "transformer"):
        if translator is None:
            translator = Translator(run.model, run.tokenizers, run.cfg.decode, run.device)
        return explore_translation(translator, sentence, run.cfg.decode.beam_size if beam is None else beam)
    if family == "lm":
        return explore_generation(run, sentence, max_new)
    if family == "pair":
        if not sentence_b:
            raise AttnlabError("a sentence-pair run needs the second sentence of the pair (sentence b)")
        return explore_pair(run, sentence, sentence_b)
    raise AttnlabError(f"{run.run_dir}: a {run.family.title} run has no attention to explore")


# ---------------------------------------------------------------------------------------------- any attention


