"""BERT-class encoders (Devlin et al. 2019) brought in from Hugging Face: `attnlab import` of a BertModel or
BertFor* folder makes a run of this family, which the explorer opens (`attnlab serve`, `attnlab plot explore`,
`attnlab.load(RUN_DIR).explore(a, b)`) with every attention view: the self-attention of every layer and head over
one sentence, [CLS] a [SEP] (map "self"), or a pair, [CLS] a [SEP] b [SEP] with token types 0 and 1 (Devlin et
al. 2019, 3, Figure 2; map "pair", split at b's first piece for the page's sentence filter), its rollout and the
neuron view.

The model is MiniLM's BERT encoder in attnlab's layers (`attnlab.nn.bert.BertEncoder`: word +
position + token-type embeddings, LayerNorm, post-norm `EncoderLayer`s); this family gives it a config, a
tokenizer (`attnlab.data.tokenizers.ImportedTokenizer`: the model's own WordPiece) and the explorer hooks. The
heads BertFor* models put on top (the masked-LM head, a classifier, BertModel's pooler) are not kept: a run
is the encoder. attnlab does not train such a run (no masked-LM objective here): train, evaluate and resume refuse
it with one line; `attnlab summary configs/bert-base.toml` shows BERT-base's layers.

Shape legend: B batch, L tokens ([CLS] and [SEP] included), D d_model, N layers, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from attnlab.core.config import MAX_LAYERS, from_dict, to_dict
from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import PAD_ID, TokenizerConfig, TokenizerPair
from attnlab.families.base import ExplorerFacts, LoadedRun, model_family
from attnlab.families.explorer import AttentionMap, Recording, capture, stacked_qk, with_rollout
from attnlab.nn.bert import BertConfig, BertEncoder
from attnlab.nn.transformer import TransformerConfig

NOT_TRAINED = ("a BERT-class encoder run is made by `attnlab import` from a Hugging Face BertModel folder, to "
               "explore; attnlab does not train or evaluate one")


# ---------------------------------------------------------------------------------------------- config
@dataclass
class BertModelConfig:
    """A BERT-class encoder (the defaults: BERT-base). type_vocab_size: token types (segments) a pair may use;
    max_len: positions; the rest mean what they mean in `TransformerConfig` (post-norm, learned positions)."""

    d_model: int = 768
    h: int = 12
    d_ff: int = 3072
    layers: int = 12
    max_len: int = 512
    type_vocab_size: int = 2
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    attn_dropout: float = 0.1

    CHOICES: ClassVar[dict] = {"activation": TransformerConfig.CHOICES["activation"]}
    LIMITS: ClassVar[dict] = {**{k: v for k, v in TransformerConfig.LIMITS.items() if not k.endswith("_layers")},
                              "layers": (1, MAX_LAYERS), "type_vocab_size": (1, 1024)}

    def __post_init__(self) -> None:
        self.transformer()  # validates every shared field with TransformerConfig's checks
        if self.type_vocab_size < 1:
            raise AttnlabError(f"type_vocab_size must be >= 1, got {self.type_vocab_size}")

    def transformer(self) -> TransformerConfig:
        """The `TransformerConfig` of its layers."""
        return TransformerConfig(d_model=self.d_model, h=self.h, d_ff=self.d_ff, enc_layers=self.layers,
                                 dec_layers=1, dropout=self.dropout, attn_dropout=self.attn_dropout,
                                 activation=self.activation, norm="post", positions="learned", max_len=self.max_len,
                                 layer_norm_eps=self.layer_norm_eps)


@dataclass
class BertSection:
    family: str = "bert"
    bert: BertModelConfig = field(default_factory=BertModelConfig)

    CHOICES: ClassVar[dict] = {"family": ("bert",)}


@dataclass
class BertExperimentConfig:
    """A BERT-class encoder run (RUN_DIR/config.json of an import; configs/bert-base.toml for `attnlab summary`):
    `[model] family = "bert"` plus `[model.bert]`, and the tokenizer's settings (kind "huggingface")."""

    tokenizer: TokenizerConfig = field(default_factory=lambda: TokenizerConfig(kind="huggingface", vocab_size=30522,
                                                                               byte_fallback=False))
    model: BertSection = field(default_factory=BertSection)


def is_bert_config(data: dict) -> bool:
    """Whether a raw config dict (file or RUN_DIR/config.json) is a BERT-class encoder's."""
    return model_family(data) == "bert"


def imported_bert_config(bert: dict, tokenizer: dict) -> dict:
    """RUN_DIR/config.json of an encoder imported from another toolkit (`attnlab import`, `attnlab.interop.bert`)."""
    return to_dict(BertExperimentConfig(tokenizer=from_dict(TokenizerConfig, tokenizer, "tokenizer."),
                                        model=BertSection(bert=from_dict(BertModelConfig, bert, "model.bert."))))


# ---------------------------------------------------------------------------------------------- the family's rows
def build_bert(cfg: BertExperimentConfig, tokenizers: TokenizerPair | None) -> BertEncoder:
    """The encoder of the config: the vocabulary of its tokenizer (tokenizer.vocab_size without one)."""
    vocab = tokenizers.src.vocab_size if tokenizers is not None else cfg.tokenizer.vocab_size
    m = cfg.model.bert
    return BertEncoder(BertConfig(vocab, m.type_vocab_size, PAD_ID, m.transformer(), max_seq_length=m.max_len))


def not_trained(*args) -> None:
    """The hooks of the pipeline this family has not (load data, train, evaluate): one line saying why."""
    raise AttnlabError(NOT_TRAINED)


def bert_summary_inputs(cfg: BertExperimentConfig, tokenizers: TokenizerPair | None, src_len: int, tgt_len: int
                        ) -> tuple[tuple[Tensor, ...], str]:
    """A dummy pair batch for `attnlab summary`: two rows of src_len + tgt_len tokens, types 0 then 1."""
    vocab = tokenizers.src.vocab_size if tokenizers is not None else cfg.tokenizer.vocab_size
    m = cfg.model.bert
    L = min(src_len + tgt_len, m.max_len)
    tokens = torch.randint(4, vocab, (2, L))  # (2, L)
    types = ((torch.arange(L) >= src_len) & (m.type_vocab_size > 1)).long().expand(2, L)  # (2, L): a, then b
    return (tokens, torch.ones(2, L, dtype=torch.bool), types), f"vocab {vocab:,}; dummy pair batch B=2, L={L}"


# ---------------------------------------------------------------------------------------------- explorer
def encode_input(run: LoadedRun, a: str, b: str | None) -> tuple[list[int], list[int]]:
    """(ids, token types) of [CLS] a [SEP] (b [SEP]); more than model.bert.max_len tokens is an AttnlabError."""
    ids, types = run.tokenizers.src.encode_pair(a, b or None)
    limit = run.cfg.model.bert.max_len
    if len(ids) > limit:
        raise AttnlabError(f"the input has {len(ids)} tokens ([CLS] and [SEP] included); the model's limit is {limit}")
    if b and max(types, default=0) >= run.cfg.model.bert.type_vocab_size:
        raise AttnlabError(f"a pair needs 2 token types; the model has {run.cfg.model.bert.type_vocab_size}")
    return ids, types


@torch.no_grad()
def explore_bert(run: LoadedRun, a: str, b: str | None = None, beam: int | None = None, max_new: int = 0,
                 translator=None) -> Recording:
    """The encoder self-attention of one sentence or a pair read together, every layer and head, its rollout, and
    each head's queries and keys (the neuron view). The explore hook (`attnlab.families.base.Explorer`): beam,
    max_new and translator do not apply."""
    encoder, tok = run.model, run.tokenizers.src
    ids, types = encode_input(run, a, b)
    tokens, token_types = torch.tensor([ids], device=run.device), torch.tensor([types], device=run.device)  # (1, L)
    with capture([layer.self_attn for layer in encoder.layers]) as cap:
        weights = encoder.attention_maps(tokens, tokens >= 0, token_types)[0].float().cpu()  # (N, H, L, L)
        q, k, scale = stacked_qk(cap, range(len(encoder.layers)))
    pieces = [tok.id_to_piece(i) for i in ids]
    # a pair: one map over both sentences, split at b's first piece (token type 1) for the page's sentence filter
    key, split = ("pair", types.index(1)) if b and 1 in types else ("self", None)
    title = "encoder self-attention of the pair ([CLS] a [SEP] b [SEP])" if split else "encoder self-attention"
    maps = {key: AttentionMap(key, title, weights, pieces, pieces, False, q.cpu(), k.cpu(), scale, split)}
    with_rollout(maps, key)
    shape = "[CLS] a [SEP] b [SEP]" if b else "[CLS] a [SEP]"
    return Recording(family=run.family.name, output=f"{len(ids)} tokens, {shape}", maps=maps, scheme=tok.scheme)


def bert_explorer_facts(run: LoadedRun) -> ExplorerFacts:
    """N layers of H heads of self-attention over a sentence or a pair of at most model.bert.max_len tokens."""
    m = run.cfg.model.bert
    attention = "encoder self-attention (a sentence, or a pair read together)"
    return ExplorerFacts(run.family.name, "pair", attention, f"encoder self-attention ({m.layers} layers x {m.h} "
                         "heads)", m.layers, m.h, 1, m.max_len)


def bert_tokens(run: LoadedRun, sentence: str, sentence_b: str | None, max_new: int) -> int:
    """The tokens of the input, [CLS] and [SEP] included (sentence b is optional)."""
    return len(encode_input(run, sentence, sentence_b)[0])
