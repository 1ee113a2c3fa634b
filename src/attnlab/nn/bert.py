"""BERT's encoder (Devlin et al. 2019) from attnlab's own layers, and a Siamese sentence-pair classifier on it
(Reimers & Gurevych 2019, "Sentence-BERT").

Word + learned position + token-type embeddings summed, then LayerNorm and dropout (no sqrt(D) scaling, unlike
Vaswani et al. 3.4); N post-norm `EncoderLayer`s of `attnlab.nn.transformer` (exact GELU, LayerNorm eps from the
config), all attention through the one core `attnlab.nn.attention.MultiHeadAttention`. A sentence embedding is
the mean of the top layer over the real (non-pad) tokens, L2-normalised. Reading a checkpoint's files is the
family's (`attnlab.families.minilm`).

Dropout differs from BERT in one place during training only: attnlab's FFN drops after the activation
(torch.nn.TransformerEncoderLayer's placement) where BERT does not; at inference both are exact.

Shape legend: B batch, L sequence length (with [CLS]/[SEP]), D d_model, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.errors import AttnlabError
from attnlab.kernels.dropout import Dropout
from attnlab.nn.transformer import EncoderLayer, TransformerConfig


@dataclass
class BertConfig:
    """What a BERT checkpoint's config.json fixes, plus the attnlab `TransformerConfig` of its layers."""

    vocab_size: int
    type_vocab_size: int
    pad_id: int
    layers: TransformerConfig
    max_seq_length: int = 256  # inputs are truncated to this many tokens (sentence-transformers' setting)


class BertEmbeddings(nn.Module):
    """Devlin et al. (2019), 3 (Figure 2): E_token + E_position + E_segment, then LayerNorm and dropout.

    Shape: tokens (B, L), token_types (B, L) or None (all 0) -> (B, L, D).
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        D = cfg.layers.d_model
        self.word = nn.Embedding(cfg.vocab_size, D, padding_idx=cfg.pad_id)
        self.position = nn.Embedding(cfg.layers.max_len, D)
        self.token_type = nn.Embedding(cfg.type_vocab_size, D)
        self.norm = nn.LayerNorm(D, eps=cfg.layers.layer_norm_eps)
        self.dropout = Dropout(cfg.layers.dropout)

    def forward(self, tokens: Tensor, token_types: Tensor | None = None) -> Tensor:
        L = tokens.size(1)
        if L > self.position.num_embeddings:
            raise AttnlabError(f"sequence of {L} tokens exceeds the model's {self.position.num_embeddings} positions")
        if token_types is None:
            token_types = torch.zeros_like(tokens)
        x = self.word(tokens) + self.position.weight[:L] + self.token_type(token_types)  # (B, L, D)
        return self.dropout(self.norm(x))


class BertEncoder(nn.Module):
    """BERT's encoder from attnlab parts: `BertEmbeddings` then cfg.layers.enc_layers post-norm `EncoderLayer`s.

    Shape:
        tokens (B, L), mask (B, L) bool (True at real tokens), token_types (B, L) or None -> (B, L, D).

    Example:
        >>> cfg = BertConfig(50, 2, 0, TransformerConfig(d_model=16, h=4, d_ff=32, enc_layers=2,
        ...                  activation="gelu", positions="learned", max_len=32))
        >>> enc = BertEncoder(cfg).eval()
        >>> enc(torch.randint(1, 50, (2, 7)), torch.ones(2, 7, dtype=torch.bool)).shape
        torch.Size([2, 7, 16])
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg.layers) for _ in range(cfg.layers.enc_layers))

    def forward(self, tokens: Tensor, mask: Tensor, token_types: Tensor | None = None) -> Tensor:
        return self.run(tokens, mask, token_types)[0]

    def run(self, tokens: Tensor, mask: Tensor, token_types: Tensor | None = None, need_weights: bool = False
            ) -> tuple[Tensor, list[Tensor | None]]:
        """The top layer (B, L, D) and each layer's self-attention weights (B, H, L, L) (None without
        need_weights; a pad position's row attends as Hugging Face's does, to the real tokens only)."""
        x = self.embeddings(tokens, token_types)  # (B, L, D)
        key_mask = mask[:, None, None, :]  # (B, 1, 1, L)
        weights = []
        for layer in self.layers:
            x, w = layer(x, key_mask, need_weights)  # (B, L, D)
            weights.append(w)
        return x, weights

    @torch.no_grad()
    def attention_maps(self, tokens: Tensor, mask: Tensor, token_types: Tensor | None = None) -> Tensor:
        """Self-attention weights of every layer and head: (B, N, H, L, L)."""
        return torch.stack(self.run(tokens, mask, token_types, need_weights=True)[1], dim=1)

    def embed(self, tokens: Tensor, mask: Tensor, normalize: bool = True) -> Tensor:
        """Sentence embeddings: mean pooling over real tokens, L2-normalised. (B, L) -> (B, D)."""
        pooled = mean_pool(self(tokens, mask), mask)  # (B, D)
        return F.normalize(pooled, p=2, dim=-1) if normalize else pooled


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of hidden (B, L, D) over the positions where mask (B, L) is True -> (B, D)."""
    m = mask.to(hidden.dtype)[:, :, None]  # (B, L, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # (B, D)


class PairClassifier(nn.Module):
    """Siamese sentence-pair classifier: one shared encoder embeds both sentences (mean pooling), u and v.

    head "sbert": SBERT's classification objective (Reimers & Gurevych 2019, 3), o = softmax(W_t [u; v; |u - v|]).
    head "cosine": two classes (0 different, 1 same) with logit difference s * (cos(u, v) - t); the scale s
    starts at 20, the scale of the contrastive loss all-MiniLM-L6-v2 was trained with, the threshold t at 0.5.

    Shape:
        a, b (B, La), (B, Lb) token ids; a_mask, b_mask bool, True at real tokens -> logits (B, C).
    """

    def __init__(self, encoder: BertEncoder, n_classes: int = 2, head: str = "sbert") -> None:
        super().__init__()
        if head == "cosine" and n_classes != 2:
            raise AttnlabError(f"the cosine head classifies same / different: n_classes must be 2, got {n_classes}")
        self.encoder = encoder
        self.head_kind = head
        if head == "sbert":
            self.head = nn.Linear(3 * encoder.cfg.layers.d_model, n_classes)
        else:
            self.scale = nn.Parameter(torch.tensor(20.0))
            self.threshold = nn.Parameter(torch.tensor(0.5))

    def forward(self, a: Tensor, a_mask: Tensor, b: Tensor, b_mask: Tensor) -> Tensor:
        B, L = a.size(0), max(a.size(1), b.size(1))
        # one encoder call for both sides: pad to a common length and stack along the batch
        tokens = torch.cat([F.pad(a, (0, L - a.size(1))), F.pad(b, (0, L - b.size(1)))])  # (2B, L)
        mask = torch.cat([F.pad(a_mask, (0, L - a.size(1))), F.pad(b_mask, (0, L - b.size(1)))])  # (2B, L)
        pooled = mean_pool(self.encoder(tokens, mask), mask)  # (2B, D)
        u, v = pooled[:B], pooled[B:]  # (B, D) each
        if self.head_kind == "sbert":
            return self.head(torch.cat([u, v, (u - v).abs()], dim=-1))  # (B, C)
        z = self.scale * (F.cosine_similarity(u, v, dim=-1) - self.threshold)  # (B,)
        return torch.stack([-z / 2, z / 2], dim=-1)  # (B, 2): softmax gives sigmoid(z) for "same"
