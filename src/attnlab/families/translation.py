"""A translation experiment (the RNN and Transformer encoder-decoder families): its typed config (data,
tokenizer, model, train, decode) and the functions the one run pipeline (`attnlab.runs.workflow`) calls for it: load
the corpus, train the tokenizers, build the model, hand the trainer its datasets and dev BLEU, evaluate BLEU/chrF;
and its explorer hooks (every attention map of a translation, what the server says of a run, what a sentence
costs). Plain functions, no registries; `attnlab.families.table` lists them.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from attnlab.core.checkpoint import resolve_checkpoint
from attnlab.core.config import (MAX_COUNT, MAX_SEED, MAX_THREADS, MAX_VOCAB, apply_overrides, from_dict,
                                 read_config_file, to_dict)
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, read_json, write_json
from attnlab.core.metrics import bleu_by_length, corpus_scores, format_length_table
from attnlab.core.plotting import plot_bleu_by_length
from attnlab.core.summary import dummy_batch
from attnlab.data.batching import Seq2SeqDataset, pad_sequences
from attnlab.data.bible import bible_split, renderings
from attnlab.data.corpus import MAX_EXPANSION, MAX_LINE_BYTES, Pair
from attnlab.data.prepare import prepare
from attnlab.data.spec import StoreSpec
from attnlab.data.store import Store, check_splits
from attnlab.data.tokenizers import BOS_ID, EOS_ID, SPECIALS, TokenizerConfig, TokenizerPair, load_tokenizers, one_line
from attnlab.decode.search import trace_tokens
from attnlab.decode.translate import DecodeConfig, Translator, encode_source, output_text
from attnlab.families.base import EvalOptions, ExplorerFacts, LoadedRun, RunLoader, model_family
from attnlab.families.explorer import (MAX_NBEST, AttentionMap, DecodingSteps, Recording, capture, captured, scheme_of,
                                       stacked_qk, token_choices, with_rollout)
from attnlab.families.lm import init_decoder_from_lm, is_lm_config
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import Seq2SeqTask, TrainConfig, Training, check_sentence_budget

log = logging.getLogger("attnlab")


@dataclass
class DataConfig:
    """corpus = "bible" (the default real data) or "files" (train/dev/test: a TSV or JSON-lines path, or two
    aligned paths; each may be .gz, .xz or .bz2). The corpus is prepared once into a token-id store
    (`attnlab.data.store`; `attnlab data prepare CONFIG`), kept in the cache keyed by these settings, or in `store`."""

    corpus: str = "bible"
    english: str | list[str] = "kjv"  # the Bible's English rendering(s): "kjv", "web" or a list (one pair each)
    english_weights: list[int] = field(default_factory=list)  # times an epoch each rendering's pairs are drawn
    train: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    dev_size: int = 500  # "files": pairs held out of train at random (seeded) for a dev/test not given as a file
    test_size: int = 500
    max_words: int = 0  # keep training pairs with at most this many words on both sides (0: all)
    max_ratio: float = 0.0  # keep training pairs whose longer side has at most this many times the words (0: all)
    dedup: bool = False  # drop exact repeats of a training pair (counted)
    max_train_pairs: int = 0  # a seeded random subset of the training pairs (0: all)
    subset_seed: int = 0
    skip_bad_lines: bool = False  # skip (and count) malformed lines instead of stopping at the first
    max_line_bytes: int = MAX_LINE_BYTES  # a longer input line is malformed (an error, or skipped as one)
    max_expansion: float = MAX_EXPANSION  # refuse a .gz/.xz/.bz2 expanding more than this many times (0: no limit)
    store: str = ""  # the prepared corpus's folder ("": the cache, cache_dir()/stores/NAME-KEY)
    prepare_workers: int = 0  # encoding processes when preparing (0: one per core)

    CHOICES: ClassVar[dict] = {"corpus": ("bible", "files")}
    LIMITS: ClassVar[dict] = {"dev_size": (0, MAX_COUNT), "test_size": (0, MAX_COUNT), "max_words": (0, MAX_COUNT),
                              "max_ratio": (0.0, 1e6), "max_train_pairs": (0, MAX_COUNT), "subset_seed": (0, MAX_SEED),
                              "prepare_workers": (0, MAX_THREADS), "max_line_bytes": (1, 1 << 30),
                              "max_expansion": (0.0, 1e12)}

    def __post_init__(self) -> None:
        names = renderings(self.english, "english")  # from_dict puts "data: " in front
        if self.english_weights:
            if self.corpus != "bible" or len(self.english_weights) != len(names):
                raise AttnlabError(f"english_weights: {self.english_weights} needs one weight per English "
                                   f"rendering of the Bible corpus ({len(names)}: {names})")
            if any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100 for w in self.english_weights):
                raise AttnlabError(f"english_weights: {self.english_weights}: each weight is an integer from 1 to 100")

    @property
    def renderings(self) -> list[str]:
        """The English renderings of a Bible corpus, the headline first (`attnlab.data.bible.renderings`); [] for a
        corpus of files."""
        return renderings(self.english) if self.corpus == "bible" else []


@dataclass
class ModelConfig:
    """family picks the section that is used: [model.rnn] or [model.transformer]."""

    family: str = "rnn"
    rnn: RNNModelConfig = field(default_factory=RNNModelConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)

    CHOICES: ClassVar[dict] = {"family": ("rnn", "transformer")}


@dataclass
class SummaryConfig:
    """The vocabulary sizes `attnlab summary CONFIG` builds the model with (a config has no tokenizer trained
    yet); 0: tokenizer.vocab_size, or 100 for the char tokenizer. A trained run's summary uses its tokenizer."""

    src_vocab: int = 0
    tgt_vocab: int = 0

    LIMITS: ClassVar[dict] = {"src_vocab": (0, MAX_VOCAB), "tgt_vocab": (0, MAX_VOCAB)}


@dataclass
class PretrainedConfig:
    """Transfer learning. init: a translation run directory (`attnlab train --init RUN_DIR`; a trained run, or one
    made by `attnlab import` from a MarianMT model): a new run fine-tunes it, its model and tokenizer sections, its
    tokenizers and its weights are the run's (`resolve_init`, `init_seq2seq`), only data, train and decode come
    from the config. decoder: a trained LM run directory (`attnlab train configs/bible-lm-es.toml`): a new run
    copies its weights into the Transformer decoder (`attnlab.families.lm.init_decoder_from_lm`) and takes its
    tokenizer as the target tokenizer (so tokenizer.joint must be false; tokenizer.* then shapes the source side
    only). checkpoint: which weights of that run."""

    init: str = ""
    decoder: str = ""
    checkpoint: str = "best"
    init_weights: bool = True  # false: only the run's model and tokenizers (the from-scratch baseline of that model)

    CHOICES: ClassVar[dict] = {"checkpoint": ("best", "last")}

    def __post_init__(self) -> None:
        if self.init and self.decoder:
            raise AttnlabError("init and decoder are both set: init fine-tunes a whole translation run, decoder "
                               "starts a new model's decoder from an LM run; choose one")


@dataclass
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    summary: SummaryConfig = field(default_factory=SummaryConfig)
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)

    def __post_init__(self) -> None:
        check_sentence_budget(self.train)
        if self.train.pack and self.model.family != "transformer":
            raise AttnlabError("train.pack needs model.family = 'transformer': an RNN reads a row left to right and "
                               "cannot keep packed sentences apart")
        if self.train.fused_loss and self.model.family != "transformer":
            raise AttnlabError("train.fused_loss = true needs model.family = 'transformer': an RNN's loss takes its "
                               "logits; leave train.fused_loss out")
        tie = self.model.transformer.tie_embeddings
        if self.model.family == "transformer" and tie == "all" and not self.tokenizer.joint:
            raise AttnlabError("model.transformer.tie_embeddings = 'all' shares one embedding between source and "
                               "target ids, but tokenizer.joint = false gives each side its own pieces: the same id "
                               "would be two different pieces; set tokenizer.joint = true or tie_embeddings = "
                               "'decoder'")


def load_experiment(path: Path | str | None, overrides: list[str] | None = None) -> ExperimentConfig:
    """A new run's config: a file plus `--set` overrides, completed from pretrained.init's run (`resolve_init`)."""
    raw = read_config_file(path) if path is not None else {}
    return from_dict(ExperimentConfig, resolve_init(apply_overrides(raw, list(overrides or []))))


def experiment_from_dict(data: dict) -> ExperimentConfig:
    """A new run's config of a raw dict, completed from pretrained.init's run (`resolve_init`)."""
    return from_dict(ExperimentConfig, resolve_init(data))


INIT_SECTIONS = ("model", "tokenizer")  # what a fine-tuned run takes from its pretrained.init run


def agree(key: str, ours: Any, theirs: Any, where: str) -> Any:
    """`theirs` (a section of the pretrained.init run's config) with `ours` laid over it, where every value ours
    sets must equal theirs: a disagreement is an AttnlabError naming the key. A key theirs lacks is kept for
    `from_dict` to name as unknown."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = copy.deepcopy(theirs)
        for k, v in ours.items():
            out[k] = agree(f"{key}.{k}", v, theirs[k], where) if k in theirs else v
        return out
    if isinstance(ours, dict) or isinstance(theirs, dict) or ours != theirs:
        raise AttnlabError(f"{key} = {ours!r} disagrees with {where}, whose {key} is {theirs!r}: a fine-tuned run "
                           f"keeps that run's model and tokenizer; leave {key} out of the config")
    return ours


def resolve_init(raw: dict) -> dict:
    """A new run's raw config with pretrained.init resolved (`attnlab train CONFIG --init RUN_DIR`): its model
    and tokenizer sections are that run's (RUN_DIR/config.json), and a key the config sets itself must agree with
    the run's. A missing run, a run of another family (an LM, a pair classifier) or a disagreeing key is an
    AttnlabError naming the setting. Without pretrained.init, `raw` as it is; the input is never changed."""
    pretrained = raw.get("pretrained")
    init = pretrained.get("init") if isinstance(pretrained, dict) else None
    if not init or not isinstance(init, str):  # from_dict names a value of the wrong type
        return raw
    run_dir, where = Path(init), f"pretrained.init = {init!r}"
    if not (run_dir / "config.json").is_file():
        raise AttnlabError(f"{where}: not a run directory ({run_dir / 'config.json'} missing)")
    theirs = read_json(run_dir / "config.json")
    family = model_family(theirs)
    if is_lm_config(theirs):
        raise AttnlabError(f"{where} is a language-model run; fine-tuning starts from a translation run (rnn or "
                           "transformer); an LM's weights start a translation decoder with pretrained.decoder")
    if family not in ModelConfig.CHOICES["family"]:
        raise AttnlabError(f"{where} is not a translation run (its model.family is {family!r}); fine-tuning starts "
                           f"from a run of model.family {' or '.join(ModelConfig.CHOICES['family'])}")
    try:
        from_dict(ExperimentConfig, theirs)
    except AttnlabError as e:
        raise AttnlabError(f"{where}: {run_dir / 'config.json'}: {e}") from None
    if not (run_dir / "tokenizer").is_dir():
        raise AttnlabError(f"{where}: the run's tokenizer folder ({run_dir / 'tokenizer'}) is missing")
    which = pretrained.get("checkpoint", "best")
    if which in PretrainedConfig.CHOICES["checkpoint"]:
        try:
            resolve_checkpoint(run_dir, which)
        except AttnlabError as e:
            raise AttnlabError(f"{where}: {e}") from None
    out = copy.deepcopy(raw)
    for section in INIT_SECTIONS:
        if not isinstance(theirs.get(section), dict):
            raise AttnlabError(f"{where}: {run_dir / 'config.json'} has no {section} section (a run attnlab wrote "
                               "has one)")
        out[section] = agree(section, raw.get(section, {}), theirs[section], where)
    return out


def imported_config(transformer: dict, tokenizer: dict) -> dict:
    """RUN_DIR/config.json of a Transformer translation run imported from another toolkit (`attnlab import`,
    `attnlab.interop.huggingface`): the model's settings and its tokenizer's, everything else the defaults (the
    Bible corpus for evaluate and a fine-tune)."""
    model = ModelConfig(family="transformer",
                        transformer=from_dict(TransformerConfig, transformer, "model.transformer."))
    return to_dict(ExperimentConfig(tokenizer=from_dict(TokenizerConfig, tokenizer, "tokenizer."), model=model))


def store_spec(cfg: ExperimentConfig) -> StoreSpec:
    """What the prepared corpus of a config is built from (`attnlab.data.spec.StoreSpec`)."""
    d = cfg.data
    return StoreSpec(corpus=d.corpus, english=renderings(d.english), train=list(d.train), dev=list(d.dev),
                     test=list(d.test), dev_size=d.dev_size, test_size=d.test_size, max_words=d.max_words,
                     max_ratio=d.max_ratio, dedup=d.dedup, max_train_pairs=d.max_train_pairs, subset_seed=d.subset_seed,
                     skip_bad_lines=d.skip_bad_lines, max_line_bytes=d.max_line_bytes, max_expansion=d.max_expansion,
                     tokenizer=cfg.tokenizer)


def prepare_corpus(cfg: ExperimentConfig, tokenizers: TokenizerPair | None = None, out: Path | str | None = None,
                   force: bool = False) -> Store:
    """The config's prepared corpus (`attnlab.data.prepare.prepare`): reused if prepared before, else built (the
    tokenizers trained on a bounded sample, or the given ones of a trained run); with pretrained.init the
    tokenizers are that run's, with pretrained.decoder the target side is the LM's tokenizer."""
    fixed_tgt = None
    if cfg.pretrained.init and tokenizers is None:  # a fine-tune reads its corpus with the run's tokenizers
        tokenizers = load_tokenizers(Path(cfg.pretrained.init) / "tokenizer")
    if cfg.pretrained.decoder and tokenizers is None:  # the target side speaks the pretrained LM's vocabulary
        if cfg.tokenizer.joint:
            raise AttnlabError("pretrained.decoder needs tokenizer.joint = false: the target tokenizer is the LM's")
        fixed_tgt = load_tokenizers(Path(cfg.pretrained.decoder) / "tokenizer").tgt
    return prepare(store_spec(cfg), out or cfg.data.store or None, tokenizers, fixed_tgt, cfg.data.prepare_workers,
                   force=force)


def split_pairs(cfg: ExperimentConfig, split: str, tokenizers: TokenizerPair | None = None, limit: int = 0,
                source: str | None = None, run_dir: Path | None = None) -> list[Pair]:
    """The text pairs of a split of the config's corpus (dev, test; train decoded from the store). source: the
    Bible's English rendering to take the source sentences from (None: the headline, the store's); a rendering
    the run did not train on is read from the corpus (dev and test are the same verses in every rendering).
    run_dir: the run evaluated, whose recorded splits the store's must be (`attnlab.data.store.check_splits`)."""
    if source is None or (cfg.data.corpus == "bible" and source == cfg.data.renderings[0]):
        store = prepare_corpus(cfg, tokenizers)
        if run_dir is not None:
            check_splits(store, run_dir, split)
        pairs = store.pairs(split, limit)
        if not pairs:  # a files corpus with data.{split}_size = 0 and no {split} file
            raise AttnlabError(f"the {split} split of this run's corpus is empty (data.{split}_size = 0 and no "
                               f"data.{split} file); evaluate another split (--split)")
        return pairs
    if cfg.data.corpus != "bible":
        raise AttnlabError(f"--source {source}: English renderings are the Bible's; this run's corpus is "
                           f"{cfg.data.corpus!r}")
    renderings([source], "--source")
    if split == "train":
        raise AttnlabError("--source: score the dev or test split; training pairs are the store's")
    pairs = bible_split(source, split)
    return pairs[:limit] if limit else pairs


def eval_name(cfg: ExperimentConfig, split: str, source: str | None) -> str:
    """The name of an evaluation's files under RUN_DIR/eval/: the split ("test") for the headline rendering,
    split.source ("test.web") for another."""
    if source is None or cfg.data.corpus != "bible" or source == cfg.data.renderings[0]:
        return split
    return f"{split}.{source}"


def build_translation_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> nn.Module:
    """The translation model of `model.family`: an RNN or a Transformer encoder-decoder."""
    if cfg.family == "rnn":
        return RNNSeq2Seq(src_vocab, tgt_vocab, cfg.rnn)
    if cfg.family == "transformer":
        return TransformerSeq2Seq(src_vocab, tgt_vocab, cfg.transformer)
    raise AttnlabError(f"model.family {cfg.family!r} is not one of {ModelConfig.CHOICES['family']}")


# ---------------------------------------------------------------------------------------------- family
def load_seq2seq_data(cfg: ExperimentConfig, tokenizers: TokenizerPair | None) -> Store:
    """The prepared corpus; a resumed run hands in its own tokenizers. An empty dev split (data.dev_size = 0
    without a dev file) is refused before the run's folder is made: training selects its checkpoints on it."""
    store = prepare_corpus(cfg, tokenizers)
    if not store.manifest["counts"].get("dev", 1):
        raise AttnlabError("data: the dev split is empty; a translation run selects its checkpoints on dev BLEU: "
                           "give data.dev, or data.dev_size > 0 to hold dev pairs out of train")
    return store


def make_seq2seq_tokenizers(cfg: ExperimentConfig, store: Store) -> TokenizerPair:
    """The tokenizers the store trained on a sample of its train split (with pretrained.decoder, the target side
    is the LM's)."""
    return store.tokenizers()


def vocab_sizes(cfg: ExperimentConfig, tokenizers: TokenizerPair | None) -> tuple[int, int]:
    """(source, target) vocabulary sizes: the run's tokenizers', or (tokenizers None: `attnlab summary CONFIG`)
    those of the [summary] section."""
    if tokenizers is not None:
        return tokenizers.src.vocab_size, tokenizers.tgt.vocab_size
    vocab = cfg.tokenizer.vocab_size if cfg.tokenizer.kind != "char" else 100
    return cfg.summary.src_vocab or vocab, cfg.summary.tgt_vocab or vocab


def build_seq2seq(cfg: ExperimentConfig, tokenizers: TokenizerPair | None) -> nn.Module:
    return build_translation_model(cfg.model, *vocab_sizes(cfg, tokenizers))


def init_seq2seq(cfg: ExperimentConfig, model: nn.Module, load_run: RunLoader) -> None:
    """A new run's weights from elsewhere, loaded with the pipeline's `load_run`: every weight of the
    pretrained.init run (fine-tuning; its model and tokenizer sections must be this config's), or the decoder from
    a pretrained LM run (transfer learning)."""
    p = cfg.pretrained
    if p.init and p.init_weights:
        run = load_run(p.init, p.checkpoint, "cpu", ability="translate")
        where = f"pretrained.init = {p.init!r}"
        for key, ours, theirs in (("model", cfg.model, run.cfg.model), ("tokenizer", cfg.tokenizer, run.cfg.tokenizer)):
            agree(key, to_dict(ours), to_dict(theirs), where)  # a config object made without `resolve_init`
        try:
            model.load_state_dict(run.model.state_dict(), strict=True)
        except RuntimeError as e:  # the vocabulary sizes: a tokenizer that is not the run's
            raise AttnlabError(f"{where}: its weights do not fit this model ({str(e).splitlines()[-1].strip()})"
                               ) from None
        log.info("fine-tuning %s (%s checkpoint, %s parameters)", p.init, p.checkpoint,
                 f"{sum(t.numel() for t in run.model.parameters()):,}")  # a tied weight once, as "model:" counts
    if cfg.pretrained.decoder and cfg.pretrained.init_weights:
        lm_run = load_run(cfg.pretrained.decoder, cfg.pretrained.checkpoint, "cpu", ability="generate")
        n = init_decoder_from_lm(model, lm_run)
        log.info("decoder initialised from the LM in %s (%s parameters copied)", cfg.pretrained.decoder, f"{n:,}")


def seq2seq_training(cfg: ExperimentConfig, store: Store, tokenizers: TokenizerPair, model: nn.Module
                     ) -> Training:
    """Teacher-forced pairs from the prepared store; model selection on dev BLEU (greedy, the first
    train.eval_max_sentences verses)."""
    if tokenizers is None:  # a resumed run whose tokenizer folder is gone
        raise AttnlabError("a translation run needs its tokenizers (RUN_DIR/tokenizer is missing)")
    dev = store.pairs("dev")
    dev_pairs = dev[: cfg.train.eval_max_sentences or None]

    def dev_bleu(m: nn.Module) -> dict:
        translator = Translator(m, tokenizers, cfg.decode, device=next(m.parameters()).device)
        hyps = [t[0].text for t in translator.translate([p.src for p in dev_pairs], beam_size=1)]
        s = corpus_scores(hyps, [p.tgt for p in dev_pairs])
        return {"bleu": s.bleu, "chrf": s.chrf}

    d_model = cfg.model.transformer.d_model if cfg.model.family == "transformer" else cfg.model.rnn.hidden_dim
    train = store.train_data(cfg.data.english_weights)
    pairs = store.manifest["train"]["pairs"]
    weighted = f" drawn of {pairs:,} (data.english_weights {cfg.data.english_weights})" if len(train) != pairs else ""
    dev_data = Seq2SeqDataset(tokenizers.src.encode_batch([p.src for p in dev]),
                              tokenizers.tgt.encode_batch([p.tgt for p in dev]))
    return Training(Seq2SeqTask(cfg.train.fused_loss), train, dev_data, dev_eval=dev_bleu, d_model=d_model,
                    sizes=f"train pairs {len(train):,}{weighted} (prepared store {store.path}), dev {len(dev):,}",
                    score_name="BLEU")


def seq2seq_summary_inputs(cfg: ExperimentConfig, tokenizers: TokenizerPair | None, src_len: int, tgt_len: int
                           ) -> tuple[tuple[torch.Tensor, ...], str]:
    """A dummy batch of two sentence pairs for `attnlab summary`, and its description."""
    src_vocab, tgt_vocab = vocab_sizes(cfg, tokenizers)
    english = f"English {' + '.join(cfg.data.renderings)} -> Spanish; " if cfg.data.corpus == "bible" else ""
    return dummy_batch(src_vocab, tgt_vocab, src_len, tgt_len), \
        f"{english}vocab {src_vocab:,} -> {tgt_vocab:,}; dummy batch B=2, S={src_len}, T={tgt_len}"


def evaluate_seq2seq(run: LoadedRun, split: str, options: EvalOptions) -> dict:
    """BLEU/chrF (sacrebleu) of a run on a split and BLEU by source length; writes RUN_DIR/eval/<split>.json,
    the hypotheses (<split>.hyp.txt) and the BLEU-by-length plot."""
    cfg = run.cfg
    translator = Translator(run.model, run.tokenizers, cfg.decode, run.device)
    pairs = split_pairs(cfg, split, run.tokenizers, options.max_sentences, options.source, run.run_dir)
    source = options.source or (cfg.data.renderings[0] if cfg.data.corpus == "bible" else None)
    name = eval_name(cfg, split, options.source)
    beam = cfg.decode.beam_size if options.beam is None else options.beam
    t0 = time.perf_counter()
    hyps = [t[0].text for t in translator.translate([p.src for p in pairs], beam_size=beam)]
    seconds = time.perf_counter() - t0
    scores = corpus_scores(hyps, [p.tgt for p in pairs])
    by_length = bleu_by_length([p.src for p in pairs], hyps, [p.tgt for p in pairs])
    out = run.run_dir / "eval"
    result = {"split": split, "source": source, "trained_on": cfg.data.renderings, "sentences": len(pairs),
              "beam": beam, "length_penalty": cfg.decode.length_penalty, "checkpoint": run.checkpoint,
              "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
              "chrf_signature": scores.chrf_signature, "by_length": by_length,
              "sentences_per_s": len(pairs) / max(seconds, 1e-9), "plot": str(out / f"{name}_bleu_by_length.png")}
    what = f"{split}, {source} source" if source else split
    plot_bleu_by_length({run.run_dir.name: by_length}, result["plot"],
                        title=f"{run.run_dir.name}: {what} BLEU by source length")
    write_json(out / f"{name}.json", result)
    atomic_write_text(out / f"{name}.hyp.txt", "".join(one_line(h) + "\n" for h in hyps))  # a line per sentence
    return result


def format_seq2seq_eval(result: dict) -> str:
    source = f" ({result['source']} source)" if result.get("source") else ""
    alpha = f", length penalty {result['length_penalty']:g}" if "length_penalty" in result else ""
    lines = [f"{result['split']}{source}: {result['sentences']} sentences, beam {result['beam']}{alpha}: "
             f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}",
             f"  {result['bleu_signature']}", f"  {result['chrf_signature']}",
             "BLEU by source length:", format_length_table(result["by_length"])]
    if "plot" in result:
        lines.append(f"plot: {result['plot']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- explorer
@torch.no_grad()
def explore_translation(translator, sentence: str, beam: int) -> Recording:
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
        steps.texts = {(rec.step, j): output_text(tgt, [i for i in trace_tokens(trace, rec.step, j) if i != EOS_ID])
                       for rec in trace for j, status in enumerate(rec.status) if status in ("finished", "unfinished")}
    return Recording(family="transformer" if isinstance(model, TransformerSeq2Seq) else "rnn", output=best.text,
                     maps=maps, scheme=scheme_of(tgt), score=best.score, nbest=[(t.text, t.score) for t in nbest],
                     choices=token_choices(log_probs, out_ids, tgt.id_to_piece, banned=tgt.control_ids), steps=steps)


def explore_seq2seq(run: LoadedRun, sentence: str, sentence_b: str | None, beam: int | None, max_new: int,
                    translator: Translator | None = None) -> Recording:
    """The explore hook (`attnlab.families.base.Explorer`): the translation of a sentence with beam (None: the run's
    decode.beam_size), decoded by `translator` (None: a Translator of the run)."""
    if translator is None:
        translator = Translator(run.model, run.tokenizers, run.cfg.decode, run.device)
    return explore_translation(translator, sentence, run.cfg.decode.beam_size if beam is None else beam)


def seq2seq_explorer_facts(run: LoadedRun) -> ExplorerFacts:
    """A Transformer's decoder layers of multi-head cross-attention, or an RNN's one attention (none: 0 layers)."""
    cfg = run.cfg
    beam, limit = cfg.decode.beam_size, cfg.decode.max_src_tokens
    if cfg.model.family == "transformer":
        t = cfg.model.transformer
        return ExplorerFacts(cfg.model.family, "translation", "multi-head",
                             f"multi-head ({t.dec_layers} layers x {t.h} heads)", t.dec_layers, t.h, beam, limit)
    r = cfg.model.rnn
    layers = 0 if r.attention == "none" else 1
    return ExplorerFacts(cfg.model.family, "translation", r.attention, f"{r.attention} ({r.cell})", layers, layers,
                         beam, limit)


def seq2seq_tokens(run: LoadedRun, sentence: str, sentence_b: str | None, max_new: int) -> int:
    """Source tokens of a sentence with its EOS; more than decode.max_src_tokens is an AttnlabError."""
    return len(encode_source(run.tokenizers, run.cfg.decode, [sentence])[0])
