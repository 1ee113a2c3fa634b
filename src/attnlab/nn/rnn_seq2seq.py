"""RNN encoder-decoders, with and without attention.

- ``attention = "none"``: the decoder sees only the encoder's final state (Sutskever et al. 2014); with
  ``feed_context`` that summary c is also fed at every step and into the output layer (Cho et al. 2014).
- ``attention = "bahdanau"``: additive attention queried with the previous decoder state s_{t-1}; the context
  c_t is part of the RNN input and of the output layer (Bahdanau et al. 2015, A.2.2).
- ``attention = "dot" | "general" | "parameterized"``: Luong et al. (2015): attention queried with the
  current state h_t, attentional hidden state h~_t = tanh(W_c [c_t; h_t]) (eq. 5), input feeding of
  h~_{t-1} (sec. 3.3); ``scaled_scores`` divides the scores by sqrt(H), without which they saturated the softmax
  on one source position within 300 updates under Adam (docs/results.md, "Trained models in the box").

The seed IF3270's Keras character-level LSTM encoder-decoder is ``cell = "lstm"``, ``attention = "none"``,
``feed_context = false``, ``embedding = "onehot"`` (one-hot characters, no embedding layer), ``bridge = "copy"``
(the encoder's final (h, c) is the decoder's initial state), ``keras_bias`` and ``impl = "scratch"``:
encoder 4 (V_src + H + 1) H, decoder 4 (V_tgt + H + 1) H and output (H + 1) V_tgt parameters, as Keras counts.

Every model implements the interface of `attnlab.decode.search` (encode, init_state, step) and
`forward(src, src_lengths, tgt_in) -> logits` for teacher forcing. Decoder state and encoder output keep the
batch in dim 0 so beam search can reorder them generically. The Bahdanau decoder with a one-layer fused GRU,
trained on the CPU, runs its recurrence through `attnlab.kernels.recurrence` (the same function, its backward
derived by hand) while the kernels are on.

Shape legend: B batch, S source length, T target length, E embedding dim, H decoder hidden dim,
He encoder output dim (H * directions), A attention dim, L decoder layers, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.config import MAX_DIM, MAX_LAYERS
from attnlab.core.errors import AttnlabError
from attnlab.kernels import recurrence
from attnlab.kernels.dropout import Dropout
from attnlab.nn.attention import Attention, padding_mask
from attnlab.nn.rnn import RNNLayer

LUONG_KINDS = ("dot", "general", "parameterized")


@dataclass
class RNNModelConfig:
    """An RNN encoder-decoder. attention: none | bahdanau | dot | general | parameterized (the last three
    are Luong-style)."""

    cell: str = "gru"
    impl: str = "fused"
    emb_dim: int = 256
    hidden_dim: int = 512
    enc_layers: int = 1
    dec_layers: int = 1
    bidirectional: bool = True
    dropout: float = 0.2
    attention: str = "bahdanau"
    attn_dim: int = 0  # 0: hidden_dim
    feed_context: bool = True  # attention = none: Cho et al. (True) or Sutskever et al. (False)
    input_feeding: bool = True  # Luong attention only
    scaled_scores: bool = False  # Luong attention only: scores / sqrt(hidden_dim) (`attnlab.nn.attention.Attention`)
    tie_embeddings: bool = False  # target embedding shared with the output layer (needs E == output dim)
    embedding: str = "learned"  # "onehot": one-hot token vectors (E = vocabulary size, no parameters)
    bridge: str = "linear"  # decoder initial state: "linear" tanh(W [summary]), "copy" the encoder's final state
    keras_bias: bool = False  # one bias per gate, as Keras (needs impl = "scratch")

    CHOICES: ClassVar[dict] = {"cell": ("elman", "lstm", "gru"), "impl": ("fused", "scratch"),
                               "attention": ("none", "bahdanau", *LUONG_KINDS), "embedding": ("learned", "onehot"),
                               "bridge": ("linear", "copy")}
    LIMITS: ClassVar[dict] = {"emb_dim": (1, MAX_DIM), "hidden_dim": (1, MAX_DIM), "enc_layers": (1, MAX_LAYERS),
                              "dec_layers": (1, MAX_LAYERS), "dropout": (0.0, 1.0), "attn_dim": (0, MAX_DIM)}

    def __post_init__(self) -> None:
        for name in ("emb_dim", "hidden_dim", "enc_layers", "dec_layers"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise AttnlabError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.bridge == "copy" and (self.bidirectional or self.enc_layers != self.dec_layers):
            raise AttnlabError(f"bridge = 'copy' needs a unidirectional encoder (bidirectional = false) and "
                               f"enc_layers ({self.enc_layers}) == dec_layers ({self.dec_layers})")
        if self.scaled_scores and self.attention not in LUONG_KINDS:
            raise AttnlabError(f"scaled_scores applies to Luong attention ({', '.join(LUONG_KINDS)}), not "
                               f"attention = {self.attention!r}")
        if self.embedding == "onehot" and self.tie_embeddings:
            raise AttnlabError("tie_embeddings needs embedding = 'learned' (one-hot vectors have no weights)")


@dataclass
class EncoderOutput:
    outputs: Tensor  # (B, S, He)
    mask: Tensor  # (B, S) bool, True at real tokens
    summary: Tensor  # (B, He): final forward state ++ final backward state of the top layer
    keys: Tensor | None  # (B, S, *) attention keys, query-independent part precomputed
    values: Tensor | None  # (B, S, *)
    final_h: Tensor | None = None  # (B, L, H): every layer's final state, for bridge = "copy"
    final_c: Tensor | None = None  # (B, L, H): the LSTM's final cells, for bridge = "copy"


@dataclass
class DecoderState:
    hidden: Tensor  # (B, L, H)
    cell: Tensor | None  # (B, L, H) for LSTM
    feed: Tensor | None  # (B, H): Luong's h~_{t-1} (input feeding) or Bahdanau's/Cho's last context


class OneHot(nn.Module):
    """Token ids to one-hot vectors, the input of the Keras character-level seq2seq example (no parameters).
    ids (...) -> (..., V) float."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embedding_dim = vocab_size

    def forward(self, ids: Tensor) -> Tensor:
        return F.one_hot(ids, self.embedding_dim).to(torch.get_default_dtype())  # (..., V)


def token_embedding(vocab_size: int, cfg: RNNModelConfig) -> nn.Module:
    """nn.Embedding(V, E) or, for embedding = "onehot", `OneHot(V)`; `.embedding_dim` is the vector size."""
    return OneHot(vocab_size) if cfg.embedding == "onehot" else nn.Embedding(vocab_size, cfg.emb_dim, padding_idx=0)


class RNNEncoder(nn.Module):
    """Embedding + (bi)directional multi-layer RNN. Returns outputs (B, S, He), the summary (B, He) and the
    final state (h_n, c_n or None), each (layers * dirs, B, H)."""

    def __init__(self, vocab_size: int, cfg: RNNModelConfig) -> None:
        super().__init__()
        self.embed = token_embedding(vocab_size, cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rnn = RNNLayer(cfg.cell, self.embed.embedding_dim, cfg.hidden_dim, cfg.enc_layers, dropout=cfg.dropout,
                            bidirectional=cfg.bidirectional, impl=cfg.impl, keras_bias=cfg.keras_bias)
        self.dirs = 2 if cfg.bidirectional else 1
        self.out_dim = cfg.hidden_dim * self.dirs

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor | None]]:
        x = self.dropout(self.embed(src))  # (B, S, E)
        outputs, final = self.rnn(x, src_lengths)  # (B, S, He)
        h_n, c_n = final if isinstance(final, tuple) else (final, None)  # (layers * dirs, B, H)
        top = h_n[-self.dirs:]  # (dirs, B, H)
        summary = top.transpose(0, 1).reshape(src.size(0), self.out_dim)  # (B, He)
        return outputs, summary, (h_n, c_n)


class RNNSeq2Seq(nn.Module):
    """Encoder-decoder with one of the decoders of the module docstring.

    Shape:
        forward: src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, V).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, cfg: RNNModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        H, E, kind = cfg.hidden_dim, cfg.emb_dim, cfg.attention
        self.encoder = RNNEncoder(src_vocab, cfg)
        He = self.encoder.out_dim
        self.embed = token_embedding(tgt_vocab, cfg)
        E = self.embed.embedding_dim
        self.dropout = Dropout(cfg.dropout)
        # the bridge: decoder initial state from the encoder summary (Bahdanau et al. 2015, A.2.2: tanh(W_s h)),
        # or the encoder's final state itself (Sutskever et al. 2014; the Keras example)
        copy = cfg.bridge == "copy"
        self.bridge = None if copy else nn.Linear(He, cfg.dec_layers * H)
        self.bridge_cell = nn.Linear(He, cfg.dec_layers * H) if cfg.cell == "lstm" and not copy else None
        self.luong = kind in LUONG_KINDS
        if kind == "none":
            self.attention = None
            feed_dim = He if cfg.feed_context else 0
        elif kind == "bahdanau":
            self.attention = Attention("additive", H, He, attn_dim=cfg.attn_dim or H)
            feed_dim = He
        else:
            # Luong's dot score needs query and keys of one size: project the encoder outputs to H first.
            self.key_proj = nn.Linear(He, H, bias=False) if kind == "dot" and He != H else None
            self.attention = Attention(kind, H, H if kind == "dot" else He, He, attn_dim=cfg.attn_dim or H,
                                       scaled=cfg.scaled_scores)
            self.W_c = nn.Linear(self.attention.out_dim + H, H, bias=False)  # eq. 5
            feed_dim = H if cfg.input_feeding else 0
        self.feed_dim = feed_dim
        self.rnn = RNNLayer(cfg.cell, E + feed_dim, H, cfg.dec_layers, dropout=cfg.dropout, impl=cfg.impl,
                            keras_bias=cfg.keras_bias)
        # output layer: Luong's h~_t, else a deep output tanh(W_o [s_t; c_t; e_{t-1}]) when context exists
        self.deep_out = None if self.luong or feed_dim == 0 else nn.Linear(H + feed_dim + E, H)
        self.generator = nn.Linear(H, tgt_vocab, bias=not cfg.tie_embeddings)
        if cfg.tie_embeddings:
            if E != H:
                raise AttnlabError(f"tie_embeddings needs emb_dim ({E}) == hidden_dim ({H})")
            self.generator.weight = self.embed.weight

    # ------------------------------------------------------------------------------------------ encode
    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        outputs, summary, (h_n, c_n) = self.encoder(src, src_lengths)  # (B, S, He), (B, He), (L, B, H)
        mask = padding_mask(src_lengths, src.size(1))  # (B, S)
        keys = values = None
        if self.attention is not None:
            k = self.key_proj(outputs) if self.luong and self.key_proj is not None else outputs
            keys, values = self.attention.precompute(k, outputs)
        if self.bridge is not None:
            return EncoderOutput(outputs, mask, summary, keys, values)
        return EncoderOutput(outputs, mask, summary, keys, values, h_n.transpose(0, 1),  # (B, L, H)
                             None if c_n is None else c_n.transpose(0, 1))

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        B, L, H = enc.summary.size(0), self.cfg.dec_layers, self.cfg.hidden_dim
        if self.bridge is None:  # bridge = "copy"
            hidden, cell = enc.final_h, enc.final_c  # (B, L, H)
        else:
            hidden = torch.tanh(self.bridge(enc.summary)).view(B, L, H)  # (B, L, H)
            cell = torch.tanh(self.bridge_cell(enc.summary)).view(B, L, H) if self.bridge_cell else None
        feed = None
        if self.cfg.attention == "none" and self.feed_dim:
            feed = enc.summary  # Cho et al.: the fixed context c, every step
        elif self.cfg.attention == "bahdanau":
            feed = enc.summary.new_zeros(B, self.feed_dim)  # replaced by c_t before use
        elif self.luong and self.feed_dim:
            feed = enc.summary.new_zeros(B, H)  # h~_0 = 0
        return DecoderState(hidden, cell, feed)

    # ------------------------------------------------------------------------------------------ decode
    def _rnn_step(self, x: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """One RNN step; the state is batch-first here and layer-first inside torch's RNN."""
        h = state.hidden.transpose(0, 1).contiguous()  # (L, B, H)
        rnn_state = (h, state.cell.transpose(0, 1).contiguous()) if state.cell is not None else h
        out, new = self.rnn.step(x, rnn_state)  # (B, H)
        if isinstance(new, tuple):
            return out, DecoderState(new[0].transpose(0, 1), new[1].transpose(0, 1), state.feed)
        return out, DecoderState(new.transpose(0, 1), None, state.feed)

    def step(self, prev: Tensor, state: DecoderState, enc: EncoderOutput, need_weights: bool = False
             ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """One decoding step: prev (B,) -> log-probs (B, V), new state, attention weights (B, S) or None."""
        o, state, weights = self._decode_step(self.dropout(self.embed(prev)), state, enc, need_weights)
        return F.log_softmax(self.generator(self.dropout(o)).float(), dim=-1), state, weights

    def _bahdanau_recur(self, e: Tensor, state: DecoderState, enc: EncoderOutput
                        ) -> tuple[Tensor, DecoderState, Tensor]:
        """Bahdanau et al. (2015), A.2.2: c_t from the previous state s_{t-1}, then s_t = RNN([e_{t-1}; c_t], s_{t-1}).
        e (B, E) -> s_t (B, H), state (feed = c_t (B, He)), weights (B, 1, S)."""
        query = state.hidden[:, -1:, :]  # s_{t-1}: (B, 1, H)
        context, weights = self.attention(query, enc.keys, enc.values, enc.mask, precomputed=True)
        state = DecoderState(state.hidden, state.cell, context[:, 0])  # c_t: (B, He)
        h, state = self._rnn_step(torch.cat([e, state.feed], dim=-1), state)  # (B, H)
        return h, state, weights

    def _deep_output(self, h: Tensor, context: Tensor, e: Tensor) -> Tensor:
        """The deep output tanh(W_o [s_t; c_t; e_{t-1}]): (..., H), (..., He), (..., E) -> (..., H)."""
        return torch.tanh(self.deep_out(torch.cat([h, context, e], dim=-1)))

    def _decode_step(self, e: Tensor, state: DecoderState, enc: EncoderOutput, need_weights: bool
                     ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """e (B, E) embedded previous token -> output features o_t (B, H), state, weights (B, S)."""
        if self.cfg.attention == "bahdanau":
            h, state, weights = self._bahdanau_recur(e, state, enc)
            return self._deep_output(h, state.feed, e), state, weights[:, 0]
        weights = None
        x = e if state.feed is None else torch.cat([e, state.feed], dim=-1)  # (B, E + feed)
        h, state = self._rnn_step(x, state)  # (B, H)
        if self.luong:
            context, weights = self.attention(h[:, None], enc.keys, enc.values, enc.mask,
                                              need_weights=need_weights, precomputed=True)
            h_tilde = torch.tanh(self.W_c(torch.cat([context[:, 0], h], dim=-1)))  # (B, H), eq. 5
            if self.feed_dim:
                state = DecoderState(state.hidden, state.cell, h_tilde)
            o = h_tilde
        elif self.deep_out is not None:
            o = self._deep_output(h, state.feed, e)  # (B, H)
        else:
            o = h
        return o, state, None if weights is None else weights[:, 0]  # weights (B, S)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits (B, T, V) for target inputs tgt_in (B, T) (BOS-prefixed)."""
        enc = self.encode(src, src_lengths)
        state = self.init_state(enc)
        emb = self.dropout(self.embed(tgt_in))  # (B, T, E)
        if self.cfg.attention == "none" or (self.luong and not self.feed_dim):
            outputs = self._forward_parallel(emb, state, enc)  # (B, T, H)
        elif self.cfg.attention == "bahdanau":
            # only the recurrence is step by step; the deep output runs once over all steps (one large matmul
            # instead of T small ones, forward and backward)
            if self.cfg.cell == "gru" and self.cfg.dec_layers == 1 and self.cfg.impl == "fused" \
                    and recurrence.by_hand(emb):
                # the loop below over all steps, its backward by hand (CPU training), on the same weights
                score = self.attention.score
                hs, alphas = recurrence.bahdanau_gru_decoder(
                    self.rnn.rnn, emb, state.hidden[:, -1], enc.keys, enc.values, enc.mask, score.W_a.weight,
                    score.v_a.weight[0])  # (B, T, H), (B, T, S)
                contexts = alphas @ enc.values  # (B, T, He)
            else:
                steps, feeds = [], []
                for e_t in emb.unbind(1):
                    h, state, _ = self._bahdanau_recur(e_t, state, enc)
                    steps.append(h)
                    feeds.append(state.feed)
                hs, contexts = torch.stack(steps, dim=1), torch.stack(feeds, dim=1)
            outputs = self._deep_output(hs, contexts, emb)  # (B, T, H)
        else:
            steps = []
            for e_t in emb.unbind(1):  # unbind, not emb[:, t]: its backward is one stack, not T zero-fills
                o, state, _ = self._decode_step(e_t, state, enc, need_weights=False)
                steps.append(o)
            outputs = torch.stack(steps, dim=1)  # (B, T, H)
        return self.generator(self.dropout(outputs))  # (B, T, V)

    def _forward_parallel(self, emb: Tensor, state: DecoderState, enc: EncoderOutput) -> Tensor:
        """Decoders whose RNN input does not depend on the previous output run the RNN over all steps at once."""
        B, T, _ = emb.shape
        x = emb if state.feed is None else torch.cat([emb, state.feed[:, None].expand(B, T, -1)], dim=-1)
        h0 = state.hidden.transpose(0, 1).contiguous()  # (L, B, H)
        init = (h0, state.cell.transpose(0, 1).contiguous()) if state.cell is not None else h0
        h, _ = self.rnn(x, None, init)  # (B, T, H)
        if self.luong:
            context, _ = self.attention(h, enc.keys, enc.values, enc.mask, need_weights=False, precomputed=True)
            return torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))  # (B, T, H)
        if self.deep_out is not None:
            return self._deep_output(h, x[..., emb.size(-1):], emb)
        return h
