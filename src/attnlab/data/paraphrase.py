"""Bible verse paraphrase identification: is b a rendering of the same verse as a?

Pairs of English renderings of verses: a from the King James Version (1611/1769), b from the World English
Bible (2015, Debian `sword-text-web`), both read from their SWORD modules with `attnlab.data.corpus`.

- label 1, kind "same": a and b render the same verse;
- label 0, kind "chapter": b renders another verse of a's chapter (a hard negative: same story, names, words);
- label 0, kind "random": b renders a verse of another chapter of the same split (an easy negative).

Every verse with text in both Bibles gives one positive pair and one negative pair, so each split is exactly
balanced; the negatives are half hard, half easy (a verse whose chapter has no other usable verse gets a random
negative; `paraphrase_stats` counts the kinds). A negative whose a or b text equals that of the verse itself
(repeated verses such as refrains) is never drawn. Splits are by book, as for the translation corpus
(`attnlab.data.corpus.DEV_BOOKS`, `TEST_BOOKS`), and the pairs are a deterministic function of the seed.

hard_negatives = "overlap" (not the default) makes the hard negatives adversarial to word matching: of the other
verses of the chapter, the one whose WEB text shares the most words with a (Jaccard similarity of lower-cased
word sets). The positives and the easy negatives are the same pairs as with "random".

This module builds the data only; the classifiers trained on it (`attnlab paraphrase train|evaluate|plot`, or
`attnlab train configs/paraphrase-*.toml`) are `attnlab.families.pairs`.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, cache_dir
from attnlab.data.bible import DEV_BOOKS, ENGLISH_MODULES, TEST_BOOKS, ensure_sword_modules, read_sword_bible, split_of
from attnlab.data.corpus import SPLITS

KINDS = ("same", "chapter", "random")
HARD_NEGATIVES = ("random", "overlap")
_WORD = re.compile(r"\w+")
VERSES_CACHE_VERSION = 2  # 2: the WEB's glossary no longer joins Revelation 22:21 (data.bible._BOOK_END)


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
    kjv = read_sword_bible(kjv_module[0], sword)
    web = read_sword_bible(web_module[0], sword)
    splits: dict[str, list[Verse]] = {s: [] for s in SPLITS}
    dropped = 0
    for (book, ch, v), a in kjv.items():  # the KJV's books only: the WEB's deuterocanon has no partner
        b = web.get((book, ch, v), "")
        if not a or not b:
            dropped += 1
            continue
        splits[split_of(book)].append(Verse(f"{book} {ch}:{v}", a, b))
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
