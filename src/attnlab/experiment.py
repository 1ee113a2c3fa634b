"""An experiment: its typed config (data, tokenizer, model, train, decode) and the builders that turn the
config into a corpus, tokenizers, encoded datasets and a model. Plain functions, no registries."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from torch import nn

from attnlab.config import from_dict, load_config, to_dict
from attnlab.corpus import Corpus, Pair, bible_corpus, file_corpus
from attnlab.errors import AttnlabError
from attnlab.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.tokenizers import TokenizerConfig, TokenizerPair
from attnlab.trainer import TrainConfig
from attnlab.transformer import TransformerConfig, TransformerSeq2Seq


@dataclass
class DataConfig:
    """corpus = "bible" (the default real data) or "files" (train/dev/test: a TSV path or two aligned paths)."""

    corpus: str = "bible"
    english: str = "kjv"
    train: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    dev_size: int = 500  # "files" without dev/test: pairs held out at random (seeded)
    test_size: int = 500
    max_words: int = 0  # keep training pairs with at most this many words on both sides (0: all)
    max_train_pairs: int = 0  # a seeded random subset of the training pairs (0: all)
    subset_seed: int = 0

    CHOICES: ClassVar[dict] = {"corpus": ("bible", "files"), "english": ("kjv", "web")}


@dataclass
class ModelConfig:
    """family picks the section that is used: [model.rnn] or [model.transformer]."""

    family: str = "rnn"
    rnn: RNNModelConfig = field(default_factory=RNNModelConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)

    CHOICES: ClassVar[dict] = {"family": ("rnn", "transformer")}


@dataclass
class DecodeConfig:
    beam_size: int = 5
    length_penalty: float = 0.6  # GNMT alpha; 0 = none
    max_len_ratio: float = 1.5  # output length limit: ratio * source tokens + offset
    max_len_offset: int = 10
    batch_size: int = 64  # sentences per decoding batch
    max_src_tokens: int = 400  # longer inputs are refused with a clear error


@dataclass
class SummaryConfig:
    """The vocabulary sizes `attnlab summary CONFIG` builds the model with (a config has no tokenizer trained
    yet); 0: tokenizer.vocab_size, or 100 for the char tokenizer. A trained run's summary uses its tokenizer."""

    src_vocab: int = 0
    tgt_vocab: int = 0


@dataclass
class PretrainedConfig:
    """Transfer learning. decoder: a trained LM run directory (`attnlab train configs/bible-lm-es.toml`): a new run
    copies its weights into the Transformer decoder (`attnlab.lm.init_decoder_from_lm`) and takes its tokenizer as
    the target tokenizer (so tokenizer.joint must be false; tokenizer.* then shapes the source side only)."""

    decoder: str = ""
    checkpoint: str = "best"
    init_weights: bool = True  # false: only the LM's tokenizer (the from-scratch baseline of the same model)

    CHOICES: ClassVar[dict] = {"checkpoint": ("best", "last")}


@dataclass
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    summary: SummaryConfig = field(default_factory=SummaryConfig)
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)


def load_experiment(path: Path | str | None, overrides: list[str] | None = None) -> ExperimentConfig:
    return load_config(ExperimentConfig, path, overrides)


def experiment_from_dict(data: dict) -> ExperimentConfig:
    return from_dict(ExperimentConfig, data)


def _file_spec(paths: list[str]) -> str | tuple[str, str] | None:
    if not paths:
        return None
    if len(paths) == 1:
        return paths[0]
    if len(paths) == 2:
        return (paths[0], paths[1])
    raise AttnlabError(f"a corpus split is one TSV path or two aligned file paths, got {paths}")


def load_corpus(cfg: DataConfig) -> Corpus:
    """The corpus of the config, with the training-pair filters applied (dev and test are never filtered)."""
    if cfg.corpus == "bible":
        corpus = bible_corpus(cfg.english)
    else:
        if not cfg.train:
            raise AttnlabError("data.train: give a TSV path or two aligned file paths for corpus = 'files'")
        corpus = file_corpus(_file_spec(cfg.train), _file_spec(cfg.dev), _file_spec(cfg.test),
                             dev_size=cfg.dev_size, test_size=cfg.test_size)
    train = corpus.train
    if cfg.max_words:
        train = [p for p in train if len(p.src.split()) <= cfg.max_words and len(p.tgt.split()) <= cfg.max_words]
    if cfg.max_train_pairs and cfg.max_train_pairs < len(train):
        keep = sorted(random.Random(cfg.subset_seed).sample(range(len(train)), cfg.max_train_pairs))
        train = [train[i] for i in keep]
    if not train:
        raise AttnlabError("data: no training pairs left after max_words / max_train_pairs")
    return Corpus(corpus.name, train, corpus.dev, corpus.test, corpus.skipped)


def encode_pairs(pairs: list[Pair], tokenizers: TokenizerPair) -> tuple[list[list[int]], list[list[int]]]:
    return [tokenizers.src.encode(p.src) for p in pairs], [tokenizers.tgt.encode(p.tgt) for p in pairs]


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> nn.Module:
    """The model of the config's family."""
    if cfg.family == "rnn":
        return RNNSeq2Seq(src_vocab, tgt_vocab, cfg.rnn)
    if cfg.family == "transformer":
        return TransformerSeq2Seq(src_vocab, tgt_vocab, cfg.transformer)
    raise AttnlabError(f"model.family {cfg.family!r} is not one of {ModelConfig.CHOICES['family']}")


def config_dict(cfg: ExperimentConfig) -> dict:
    return to_dict(cfg)
