"""Bible verse paraphrase identification: is b a rendering of the same verse as a?

Pairs of English renderings of verses: a from the King James Version (1611/1769), b from the World English
Bible (2015, Debian `sword-text-web`), both read from their SWORD modules with `attnlab.corpus`.

- label 1, kind "same": a and b render the same verse;
- label 0, kind "chapter": b renders another verse of a's chapter (a hard negative: same story, names, words);
- label 0, kind "random": b renders a verse of another chapter of the same split (an easy negative).

Every verse with text in both Bibles gives one positive pair and one negative pair, so each split is exactly
balanced; the negatives are half hard, half easy (a verse whose chapter has no other usable verse gets a random
negative; `paraphrase_stats` counts the kinds). A negative whose a or b text equals that of the verse itself
(repeated verses such as refrains) is never drawn. Splits are by book, as for the translation corpus
(`attnlab.corpus.DEV_BOOKS`, `TEST_BOOKS`), and the pairs are a deterministic function of the seed.

hard_negatives = "overlap" (not the default) makes the hard negatives adversarial to word matching: of the other
verses of the chapter, the one whose WEB text shares the most words with a (Jaccard similarity of lower-cased
word sets). The positives and the easy negatives are the same pairs as with "random".

The experiment part (`ParaphraseConfig`, `train_paraphrase`, `evaluate_paraphrase`, `plot_alignment`, behind
`attnlab paraphrase train|evaluate|plot`) trains any pair classifier with the one trainer: a classifier is
model(a, a_mask, b, b_mask) -> logits (B, 2) plus an `ids` object (`ids(sentences)`, `pad_id`), built from the
config's `model.family`: "decomposable" (`attnlab.decomposable`, subword tokenizer trained on the train pairs)
or "minilm" (`attnlab.pretrained.build_minilm_classifier`, the fine-tuned all-MiniLM-L6-v2). Batching and the
cross-entropy loss are `attnlab.pretrained.PairDataset` / `PairTask`.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.checkpoint import load_weights, read_json, write_json
from attnlab.config import apply_overrides, from_dict, load_config, to_dict
from attnlab.corpus import (DEV_BOOKS, ENGLISH_MODULES, TEST_BOOKS, _split_of, atomic_write_text, cache_dir,
                            ensure_sword_modules, normalize, read_sword_bible)
from attnlab.decomposable import DecomposableAttention, DecomposableConfig
from attnlab.errors import AttnlabError
from attnlab.pretrained import MiniLMConfig
from attnlab.tokenizers import PAD_ID, TokenizerConfig, build_tokenizers, load_tokenizers, save_tokenizers
from attnlab.trainer import Trainer, TrainConfig

KINDS = ("same", "chapter", "random")
HARD_NEGATIVES = ("random", "overlap")
SPLITS = ("train", "dev", "test")
_WORD = re.compile(r"\w+")
VERSES_CACHE_VERSION = 1


@dataclass(frozen=True)
class ParaphrasePair:
    """a: KJV text of verse ref_a; b: WEB text of verse ref_b; label 1 iff ref_a == ref_b; kind in KINDS."""

    a: str
    b: str
    label: int
    ref_a: str
    ref_b: str
    kind: str


@dataclass(frozen=True)
class Verse:
    """One verse in both Bibles. ref: "Gen 1:1"."""

    ref: str
    kjv: str
    web: str

    @property
    def chapter(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def book(self) -> str:
        return self.ref.split(" ", 1)[0]


@dataclass
class ParaphraseCorpus:
    """The three splits of pairs; dropped: verses without text in one of the two Bibles."""

    train: list[ParaphrasePair] = field(default_factory=list)
    dev: list[ParaphrasePair] = field(default_factory=list)
    test: list[ParaphrasePair] = field(default_factory=list)
    seed: int = 0
    dropped: int = 0
    hard_negatives: str = "random"

    def split(self, name: str) -> list[ParaphrasePair]:
        if name not in SPLITS:
            raise AttnlabError(f"unknown split {name!r}; choose train, dev or test")
        return getattr(self, name)


# ---------------------------------------------------------------------------------------------- verses
def read_verses() -> tuple[dict[str, list[Verse]], int]:
    """Verses with text in both the KJV and the WEB (KJV versification), split by book, in canon order.
    Returns ({split: verses}, number of verses dropped because one side is empty)."""
    kjv_module, web_module = ENGLISH_MODULES["kjv"], ENGLISH_MODULES["web"]
    sword = ensure_sword_modules([kjv_module, web_module])
    kjv = read_sword_bible(kjv_module[0], sword, space_notes=True)
    web = read_sword_bible(web_module[0], sword, space_notes=True)
    splits: dict[str, list[Verse]] = {s: [] for s in SPLITS}
    dropped = 0
    for (book, ch, v), a in kjv.items():  # the KJV's books only: the WEB's deuterocanon has no partner
        b = web.get((book, ch, v), "")
        if not a or not b:
            dropped += 1
            continue
        splits[_split_of(book)].append(Verse(f"{book} {ch}:{v}", a, b))
    return splits, dropped


def cached_verses(refresh: bool = False) -> tuple[dict[str, list[Verse]], int]:
    """`read_verses`, cached as TSV under `cache_dir()` (reading two SWORD modules takes ~25 s)."""
    path = cache_dir() / "corpora" / f"bible-kjv-web-verses.v{VERSES_CACHE_VERSION}.tsv"
    if path.is_file() and not refresh:
        lines = path.read_text(encoding="utf-8").split("\n")
        splits: dict[str, list[Verse]] = {s: [] for s in SPLITS}
        for line in lines[1:]:
            if line:
                split, ref, a, b = line.split("\t")
                splits[split].append(Verse(ref, a, b))
        return splits, json.loads(lines[0])["dropped"]
    splits, dropped = read_verses()
    # corpus.normalize leaves no tab or newline inside a verse, so tab-separated lines are unambiguous
    rows = [json.dumps({"dropped": dropped, "version": VERSES_CACHE_VERSION})]
    rows += [f"{split}\t{v.ref}\t{v.kjv}\t{v.web}" for split, verses in splits.items() for v in verses]
    atomic_write_text(path, "\n".join(rows) + "\n")
    return splits, dropped


# ---------------------------------------------------------------------------------------------- pairs
def _differs(verses: list[Verse], i: int, j: int) -> bool:
    """Whether verse j can be a negative of verse i: both of its texts differ from verse i's."""
    return verses[j].kjv != verses[i].kjv and verses[j].web != verses[i].web


@lru_cache(maxsize=None)
def words(text: str) -> frozenset[str]:
    """The lower-cased word set of a text (for the overlap of two renderings)."""
    return frozenset(_WORD.findall(text.lower()))


def word_overlap(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of a and b."""
    wa, wb = words(a), words(b)
    return len(wa & wb) / max(len(wa | wb), 1)


def make_pairs(verses: list[Verse], seed: int, hard_negatives: str = "random") -> list[ParaphrasePair]:
    """One positive and one negative pair per verse (in verse order), half of the negatives from the verse's
    chapter ("chapter"), half from the other chapters ("random"); deterministic given (verses, seed).
    hard_negatives: "random" (a random verse of the chapter) or "overlap" (the verse of the chapter whose WEB
    text overlaps most with the KJV text of the verse)."""
    if hard_negatives not in HARD_NEGATIVES:
        raise AttnlabError(f"hard_negatives {hard_negatives!r} is not one of {', '.join(HARD_NEGATIVES)}")
    if len({v.chapter for v in verses}) < 2:
        raise AttnlabError(f"paraphrase pairs need verses of at least 2 chapters, got {len(verses)} verses")
    rng = random.Random(seed)
    by_chapter: dict[str, list[int]] = {}
    for i, v in enumerate(verses):
        by_chapter.setdefault(v.chapter, []).append(i)
    order = list(range(len(verses)))
    rng.shuffle(order)
    want_hard = {i for rank, i in enumerate(order) if rank % 2 == 0}  # exactly half (rounded up)
    pairs = []
    for i, v in enumerate(verses):
        pairs.append(ParaphrasePair(v.kjv, v.web, 1, v.ref, v.ref, "same"))
        kind, j = "chapter", None
        if i in want_hard:
            same_chapter = [k for k in by_chapter[v.chapter] if k != i and _differs(verses, i, k)]
            j = rng.choice(same_chapter) if same_chapter else None  # drawn in both modes: same random stream
            if j is not None and hard_negatives == "overlap":
                j = max(same_chapter, key=lambda k: word_overlap(v.kjv, verses[k].web))
        if j is None:  # a random negative: rejection sampling over the split, outside the verse's chapter
            kind = "random"
            for _ in range(10_000):
                k = rng.randrange(len(verses))
                if verses[k].chapter != v.chapter and _differs(verses, i, k):
                    j = k
                    break
            else:
                raise AttnlabError(f"no verse outside {v.chapter} differs from {v.ref}")
        pairs.append(ParaphrasePair(v.kjv, verses[j].web, 0, v.ref, verses[j].ref, kind))
    return pairs


def paraphrase_corpus(seed: int = 0, refresh: bool = False, hard_negatives: str = "random") -> ParaphraseCorpus:
    """The KJV-vs-WEB paraphrase pairs of the three splits (dev = Jonah, Phil, Titus, Jude; test = Ruth, Mark,
    Eph; train = the other books). The verses are cached under `cache_dir()`; the pairs are drawn from them
    (well under a second), a deterministic function of `seed`, each split with its own random stream."""
    splits, dropped = cached_verses(refresh)
    pairs = {s: make_pairs(splits[s], seed * len(SPLITS) + k, hard_negatives) for k, s in enumerate(SPLITS)}
    return ParaphraseCorpus(pairs["train"], pairs["dev"], pairs["test"], seed, dropped, hard_negatives)


def paraphrase_stats(corpus: ParaphraseCorpus) -> dict:
    """Pairs per split and kind, books, and average words of a and b."""
    out: dict = {"seed": corpus.seed, "hard_negatives": corpus.hard_negatives, "dropped_verses": corpus.dropped,
                 "splits": {}}
    for s in SPLITS:
        pairs = corpus.split(s)
        row = {"pairs": len(pairs), **{k: sum(p.kind == k for p in pairs) for k in KINDS},
               "books": len({p.ref_a.split(" ", 1)[0] for p in pairs}),
               "a_words_avg": sum(len(p.a.split()) for p in pairs) / max(len(pairs), 1),
               "b_words_avg": sum(len(p.b.split()) for p in pairs) / max(len(pairs), 1)}
        out["splits"][s] = row
    return out


def format_paraphrase_stats(stats: dict) -> str:
    lines = [f"paraphrase pairs: KJV (a) vs WEB (b), seed {stats['seed']}, {stats['hard_negatives']} hard "
             f"negatives; verses dropped (empty in one "
             f"Bible): {stats['dropped_verses']}; dev = {', '.join(DEV_BOOKS)}; test = {', '.join(TEST_BOOKS)}",
             f"{'split':<6} {'pairs':>7} {'books':>6} {'same (1)':>9} {'chapter (0)':>12} {'random (0)':>11} "
             f"{'a words':>8} {'b words':>8}"]
    for s, r in stats["splits"].items():
        lines.append(f"{s:<6} {r['pairs']:>7,} {r['books']:>6} {r['same']:>9,} {r['chapter']:>12,} "
                     f"{r['random']:>11,} {r['a_words_avg']:>8.1f} {r['b_words_avg']:>8.1f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- experiment
# A classifier family is a builder returning (model, ids): model(a, a_mask, b, b_mask) -> logits (B, 2), and
# ids with `ids(sentences) -> list[list[int]]` and `pad_id`. "decomposable": attnlab.decomposable with a
# subword tokenizer trained on the train split; "minilm": attnlab.pretrained.build_minilm_classifier.
@dataclass
class ParaphraseDataConfig:
    seed: int = 0  # seed of the negative pairs
    hard_negatives: str = "random"  # or "overlap": the same-chapter verse sharing the most words with a
    max_train_pairs: int = 0  # a seeded random subset of the training pairs (0: all)
    subset_seed: int = 0

    CHOICES: ClassVar[dict] = {"hard_negatives": HARD_NEGATIVES}


@dataclass
class ParaphraseModelConfig:
    """family picks the section that is used: [model.decomposable] or [model.minilm]."""

    family: str = "decomposable"
    decomposable: DecomposableConfig = field(default_factory=DecomposableConfig)
    minilm: MiniLMConfig = field(default_factory=MiniLMConfig)

    CHOICES: ClassVar[dict] = {"family": ("decomposable", "minilm")}


@dataclass
class ParaphraseConfig:
    """A paraphrase experiment (configs/paraphrase-*.toml). [tokenizer] is used by the decomposable family
    only (one tokenizer for both sentences, trained on the train pairs)."""

    data: ParaphraseDataConfig = field(default_factory=ParaphraseDataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ParaphraseModelConfig = field(default_factory=ParaphraseModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def load_paraphrase_config(path: Path | str | None, overrides: list[str] | None = None) -> ParaphraseConfig:
    return load_config(ParaphraseConfig, path, overrides)


def load_pairs(cfg: ParaphraseDataConfig) -> ParaphraseCorpus:
    """The corpus of the config, with the training subset applied (dev and test are never subsampled)."""
    corpus = paraphrase_corpus(cfg.seed, hard_negatives=cfg.hard_negatives)
    if cfg.max_train_pairs and cfg.max_train_pairs < len(corpus.train):
        keep = sorted(random.Random(cfg.subset_seed).sample(range(len(corpus.train)), cfg.max_train_pairs))
        corpus.train = [corpus.train[i] for i in keep]
    return corpus


class SubwordIds:
    """An attnlab tokenizer behind the `ids` / `pad_id` interface of `attnlab.pretrained.PairDataset`."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.pad_id = tokenizer, PAD_ID

    def ids(self, sentences: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(s) for s in sentences]

    def pieces(self, sentence: str) -> list[str]:
        return self.tokenizer.pieces(sentence)


def build_classifier(cfg: ParaphraseConfig, run_dir: Path, train: list[ParaphrasePair] | None = None):
    """(model, ids) of the config's family. decomposable: trains the tokenizer on `train` and saves it to
    RUN_DIR/tokenizer, or (train None) loads it from there. minilm: the pretrained encoder and its tokenizer."""
    if cfg.model.family == "minilm":
        from attnlab.pretrained import build_minilm_classifier

        return build_minilm_classifier(cfg.model.minilm, n_classes=2, seed=cfg.train.seed)
    if not cfg.tokenizer.joint:
        raise AttnlabError("tokenizer.joint must be true for paraphrase pairs: one tokenizer reads both sentences")
    if train is not None:
        pair = build_tokenizers(cfg.tokenizer, [p.a for p in train], [p.b for p in train])
        save_tokenizers(pair, run_dir / "tokenizer")
    else:
        pair = load_tokenizers(run_dir / "tokenizer")
    model = DecomposableAttention(pair.src.vocab_size, cfg.model.decomposable, pad_id=PAD_ID)
    return model, SubwordIds(pair.src)


def is_paraphrase_config(data: dict) -> bool:
    """Whether a raw config dict (file or RUN_DIR/config.json) is a paraphrase experiment."""
    model = data.get("model")
    if not isinstance(model, dict):
        return False
    family = model.get("family")
    return family in ParaphraseModelConfig.CHOICES["family"] or (
        family is None and ("decomposable" in model or "minilm" in model))


def summary_model(target: Path, overrides: list[str] | None = None) -> tuple[nn.Module, int, str]:
    """(model, vocabulary size, family) of a paraphrase config file or run directory, for `attnlab summary`."""
    if target.is_dir():
        cfg = from_dict(ParaphraseConfig, read_json(target / "config.json"))
        model, ids = build_classifier(cfg, target)
    else:
        cfg = load_paraphrase_config(target, overrides)
        if cfg.model.family == "decomposable":
            model, ids = DecomposableAttention(cfg.tokenizer.vocab_size, cfg.model.decomposable), None
        else:
            model, ids = build_classifier(cfg, target.parent)
    vocab = model.embed.num_embeddings if isinstance(model, DecomposableAttention) else ids.tok.get_vocab_size()
    return model, vocab, cfg.model.family


def accuracy_by_kind(pairs: list[ParaphrasePair], preds: Tensor) -> dict:
    """accuracy over all pairs and per kind ("same": positives, "chapter": hard, "random": easy negatives),
    with the counts; preds (N,) in the order of pairs."""
    correct = [int(y) == p.label for y, p in zip(preds.tolist(), pairs)]
    out: dict = {"accuracy": sum(correct) / max(len(pairs), 1), "pairs": len(pairs)}
    for kind in KINDS:
        hits = [c for c, p in zip(correct, pairs) if p.kind == kind]
        out[f"accuracy_{kind}"] = sum(hits) / max(len(hits), 1)
        out[f"pairs_{kind}"] = len(hits)
    return out


def train_paraphrase(cfg: ParaphraseConfig | None, run_dir: Path | str, resume: bool = False,
                     overrides: list[str] | None = None) -> dict:
    """Trains a pair classifier with the one trainer (cross-entropy, model selection on dev accuracy), or
    continues the run in run_dir (cfg read from the run; `overrides` may extend its limits)."""
    from attnlab.pretrained import PairDataset, PairTask, predict_pairs

    run_dir = Path(run_dir)
    if resume:
        if not (run_dir / "config.json").is_file():
            raise AttnlabError(f"{run_dir}: nothing to resume (config.json missing)")
        cfg = from_dict(ParaphraseConfig, apply_overrides(read_json(run_dir / "config.json"), list(overrides or [])))
    elif (run_dir / "checkpoints" / "latest.json").is_file():
        raise AttnlabError(f"{run_dir} already holds a trained run; use --resume to continue it or choose "
                           "another --out")
    assert cfg is not None, "a new run needs a config"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", to_dict(cfg))
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    corpus = load_pairs(cfg.data)
    torch.manual_seed(cfg.train.seed)
    model, ids = build_classifier(cfg, run_dir, None if resume else corpus.train)
    train_data, dev_data = PairDataset(corpus.train, ids), PairDataset(corpus.dev, ids)

    def dev_eval(m: nn.Module) -> dict:
        return {k: v for k, v in accuracy_by_kind(corpus.dev, predict_pairs(m, dev_data, cfg.train.max_tokens)).items()
                if k.startswith("accuracy")}

    d_model = cfg.model.decomposable.hidden_dim if cfg.model.family == "decomposable" else 384
    trainer = Trainer(model, cfg.train, train_data, dev_data, run_dir, dev_eval=dev_eval, d_model=d_model,
                      task=PairTask(ids.pad_id))
    if resume:
        trainer.resume()
        print(f"resuming at step {trainer.state['step']} (epoch {trainer.state['epoch']})", file=sys.stderr)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainer.is_main:  # under torchrun, rank 0 speaks
        print(f"model: {cfg.model.family}, {n_params:,} trainable parameters; train pairs {len(corpus.train):,}, "
              f"dev {len(corpus.dev):,}; device {trainer.device}", file=sys.stderr)
    state = trainer.fit()
    if trainer.is_main:
        print(f"stopped after {state['step']} steps ({state['stopped']}); {state['train_seconds'] / 60:.1f} min of "
              f"training; best dev {'accuracy' if cfg.train.eval_bleu else 'score (minus the loss)'} "
              f"{state['best_score'] if state['best_score'] is not None else float('nan'):.4f}",  # nan: 0 steps
              file=sys.stderr)
    return state


def load_classifier(run_dir: Path | str, checkpoint: str = "best", device: str = "cpu"):
    """(config, model in eval mode on device, ids) of a trained run; checkpoint "best" or "last"."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise AttnlabError(f"{run_dir}: not a run directory (config.json missing)")
    cfg = from_dict(ParaphraseConfig, read_json(run_dir / "config.json"))
    ckpt = run_dir / "checkpoints"
    if checkpoint == "best" and (ckpt / "best.safetensors").is_file():
        path = ckpt / "best.safetensors"
    elif checkpoint in ("best", "last") and (ckpt / "latest.json").is_file():
        path = ckpt / f"{read_json(ckpt / 'latest.json')['name']}.safetensors"
    else:
        raise AttnlabError(f"{run_dir}: no {checkpoint} checkpoint (train first, or choose best/last)")
    model, ids = build_classifier(cfg, run_dir)
    load_weights(model, path)
    return cfg, model.to(device).eval(), ids


def evaluate_paraphrase(run_dir: Path | str, split: str = "test", checkpoint: str = "best", device: str = "cpu",
                        hard_negatives: str | None = None) -> dict:
    """Accuracy of a run on a split, overall and per kind; writes RUN_DIR/eval/paraphrase_<split>.json and the
    misclassified pairs to RUN_DIR/eval/paraphrase_<split>.errors.tsv. hard_negatives: evaluate on pairs with
    these hard negatives instead of the run's (files then named paraphrase_<split>-<hard_negatives>.*)."""
    from attnlab.pretrained import PairDataset, predict_pairs

    run_dir = Path(run_dir)
    cfg, model, ids = load_classifier(run_dir, checkpoint, device)
    name = f"paraphrase_{split}"
    if hard_negatives is not None and hard_negatives != cfg.data.hard_negatives:
        if hard_negatives not in HARD_NEGATIVES:
            raise AttnlabError(f"hard_negatives {hard_negatives!r} is not one of {', '.join(HARD_NEGATIVES)}")
        cfg.data.hard_negatives, name = hard_negatives, f"{name}-{hard_negatives}"
    pairs = load_pairs(cfg.data).split(split)
    preds = predict_pairs(model, PairDataset(pairs, ids), cfg.train.max_tokens)
    result = {"split": split, "checkpoint": checkpoint, "family": cfg.model.family,
              "hard_negatives": cfg.data.hard_negatives, **accuracy_by_kind(pairs, preds)}
    write_json(run_dir / "eval" / f"{name}.json", result)
    rows = [f"{p.label}\t{p.kind}\t{p.ref_a}\t{p.ref_b}\t{p.a}\t{p.b}"
            for p, y in zip(pairs, preds.tolist()) if y != p.label]
    atomic_write_text(run_dir / "eval" / f"{name}.errors.tsv", "".join(r + "\n" for r in rows))
    return result


def format_paraphrase_eval(result: dict) -> str:
    names = {"same": "same verse (positives)", "chapter": "same chapter (hard negatives)",
             "random": "other chapter (easy negatives)"}
    lines = [f"{result['split']}: {result['pairs']:,} pairs ({result['hard_negatives']} hard negatives), "
             f"{result['family']} ({result['checkpoint']} checkpoint): accuracy {100 * result['accuracy']:.2f}%"]
    lines += [f"  {names[k]:<31} {result[f'pairs_{k}']:>6,} pairs  accuracy {100 * result[f'accuracy_{k}']:.2f}%"
              for k in KINDS]
    return "\n".join(lines)


def plot_alignment(run_dir: Path | str, a: str, b: str, out: Path | str, checkpoint: str = "best",
                   formats: tuple[str, ...] = ("png",)) -> tuple[list[Path], float]:
    """Heatmaps of the soft alignments of one pair (decomposable family): a_to_b (rows a tokens, each a softmax
    over b; the weights of beta) to OUT.<fmt>, and b_to_a transposed (columns sum to 1; the weights of alpha)
    to OUT_b.<fmt>. Returns (paths, P(same verse))."""
    from attnlab.plotting import plot_attention

    a, b = normalize(a), normalize(b)
    if not a or not b:
        raise AttnlabError("both sentences of the pair (--a, --b) must be non-empty")
    cfg, model, ids = load_classifier(run_dir, checkpoint)
    if not hasattr(model, "forward_with_weights"):
        raise AttnlabError(f"{run_dir}: a {cfg.model.family} model has no soft alignment to plot")
    ta, tb = (torch.tensor([x]) for x in ids.ids([a, b]))
    with torch.no_grad():
        logits, w = model.forward_with_weights(ta, ta > -1, tb, tb > -1)  # no padding: all tokens real
    p_same = logits.softmax(-1)[0, 1].item()
    la, lb = ids.pieces(a), ids.pieces(b)
    out, paths = Path(out), []
    for fmt in formats:
        for suffix, weights, title in (("", w.a_to_b[0], "each row: softmax over b (weights of beta_i)"),
                                       ("_b", w.b_to_a[0].T, "each column: softmax over a (weights of alpha_j)")):
            path = out.with_name(out.name + suffix).with_suffix("." + fmt.strip())
            plot_attention(weights.numpy(), lb, la, path, title=f"P(same verse) = {p_same:.3f}; {title}",
                           xlabel="b (WEB)", ylabel="a (KJV)")
            paths.append(path)
    return paths, p_same
