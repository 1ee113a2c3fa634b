"""The default corpus: the verse-aligned English (King James, or the World English Bible) to Spanish (Reina-Valera
1909) Bible, read from Debian's SWORD packages, split by book, and cached as a TSV (`bible_tsv`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, cache_dir
from attnlab.data.corpus import SPLITS, Corpus, Pair, iter_lines, normalize

log = logging.getLogger("attnlab")

CACHE_VERSION = 3  # of the cached Bible TSV: a new version rebuilds it (2: WEB footnotes no longer glue words;
                   # 3: nothing after a book's end, the WEB's glossary, joins its last verse)

# The fixed split by book (OSIS names), chosen so every split holds whole books.
DEV_BOOKS = ("Jonah", "Phil", "Titus", "Jude")
TEST_BOOKS = ("Ruth", "Mark", "Eph")

# English sources (module name, Debian package) and the Spanish target.
ENGLISH_MODULES = {"kjv": ("engKJV2006eb", "sword-text-kjv"), "web": ("engWEB2015eb", "sword-text-web")}
SPANISH_MODULE = ("spaRV1909eb", "sword-text-sparv")
SWORD_DIRS = ("/usr/share/sword", "~/.sword")
def sword_dir() -> Path | None:
    for d in [os.environ.get("SWORD_PATH", "")] + list(SWORD_DIRS):
        if d and (Path(d).expanduser() / "mods.d").is_dir():
            return Path(d).expanduser()
    return None


def ensure_sword_modules(modules: Sequence[tuple[str, str]]) -> Path:
    """Returns the SWORD directory holding `modules` ((module, debian package) pairs); installs the missing
    Debian packages when running as root, else raises an error with the exact apt command."""
    def missing() -> list[str]:
        d = sword_dir()
        return [pkg for mod, pkg in modules
                if d is None or not any((d / "mods.d" / f"{name}.conf").is_file() for name in (mod, mod.lower()))]

    need = missing()
    if need:
        command = "apt-get update && apt-get install -y " + " ".join(need)
        if os.name != "posix" or os.geteuid() != 0:
            raise AttnlabError(f"the Bible corpus needs the SWORD modules; install them with: sudo {command}")
        log.info("installing %s (apt-get) ...", " ".join(need))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *need]):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise AttnlabError(f"`{' '.join(cmd)}` failed: {done.stderr.strip().splitlines()[-1:]}")
        if missing():
            raise AttnlabError(f"installed {' '.join(need)} but the SWORD modules are still not found")
    d = sword_dir()
    assert d is not None, "SWORD directory vanished after the module check"
    return d


# A footnote placed between two words (WEB: "God<note>...</note><w>created</w>"): removing the note glues the
# words ("Godcreated", 178 WEB verses), so a note that a word follows becomes a space.
_NOTE_BEFORE_WORD = re.compile(r"<note\b[^>]*>.*?</note>(?=<w\b|\w)", re.DOTALL)
# the end of a book (<div ... eID="..." type="book"/>): what a module stores after it in the last verse's entry is
# not the verse (the WEB appends its 17,000-character glossary to Revelation 22:21)
_BOOK_END = re.compile(r'<div\b(?=[^>]*\beID=)(?=[^>]*\btype="book")[^>]*/>')


def read_sword_bible(module: str, sword_dir: Path) -> dict[tuple[str, int, int], str]:
    """All verses of a SWORD Bible module, markup removed: {(OSIS book, chapter, verse): text}, in canon order.
    A footnote right before a word becomes a space; what follows a book's end marker (an appendix) is dropped."""
    from pysword.modules import (
        SwordModules,  # imported here: only the Bible corpus needs it
    )

    mods = SwordModules(str(sword_dir))
    mods.parse_modules()
    bible = mods.get_bible_from_module(module)
    # pysword decompresses a whole block for every verse; a block holds many verses, so memoising the
    # block turns minutes into seconds.
    bible._decompressed_text = lru_cache(maxsize=8)(bible._decompressed_text)
    verses: dict[tuple[str, int, int], str] = {}
    for testament in bible.get_structure().get_books().values():
        for book in testament:
            texts = bible.get(books=[book.osis_name], clean=False, join="\x00").split("\x00")
            texts = [bible._cleaner.clean(_NOTE_BEFORE_WORD.sub(" ", _BOOK_END.split(t, 1)[0])) if "<" in t else t
                     for t in texts]
            refs = [(book.osis_name, c + 1, v + 1)
                    for c, n in enumerate(book.chapter_lengths) for v in range(n)]
            assert len(texts) == len(refs), f"{module} {book.osis_name}: {len(texts)} texts for {len(refs)} verses"
            verses.update(zip(refs, (normalize(t) for t in texts)))
    return verses


def split_of(book: str) -> str:
    return "dev" if book in DEV_BOOKS else "test" if book in TEST_BOOKS else "train"


def build_bible_pairs(english: str = "kjv") -> tuple[dict[str, list[Pair]], int]:
    """Reads the SWORD modules and aligns verses by reference. Returns ({split: pairs}, dropped count)."""
    if english not in ENGLISH_MODULES:
        raise AttnlabError(f"unknown English Bible {english!r}; choose one of {', '.join(ENGLISH_MODULES)}")
    en_module = ENGLISH_MODULES[english]
    sword = ensure_sword_modules([en_module, SPANISH_MODULE])
    src = read_sword_bible(en_module[0], sword)
    tgt = read_sword_bible(SPANISH_MODULE[0], sword)
    splits: dict[str, list[Pair]] = {"train": [], "dev": [], "test": []}
    dropped = 0
    for (book, ch, v), es in tgt.items():  # the Spanish (KJV versification) order
        en = src.get((book, ch, v), "")
        if not en or not es:
            dropped += 1
            continue
        splits[split_of(book)].append(Pair(en, es, f"{book} {ch}:{v}"))
    return splits, dropped


def bible_tsv(english: str = "kjv", refresh: bool = False) -> Path:
    """The cached TSV of the English->Spanish Bible (built from the SWORD modules on first use): a JSON header
    line, then `split<TAB>ref<TAB>source<TAB>target` per verse, in canon order."""
    path = cache_dir() / "corpora" / f"bible-{english}-rv1909.v{CACHE_VERSION}.tsv"
    if path.is_file() and not refresh:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Under a lock: the ranks of `attnlab train --procs N` all ask for it at once, and a file written twice gets
    # two modification times, so two ranks would key (and build) two stores of the same corpus.
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and not refresh:
            return path  # built by another process while this one waited
        splits, dropped = build_bible_pairs(english)
        # normalize() leaves no tab or newline inside a text, so plain tab-separated lines are unambiguous
        rows = [json.dumps({"dropped": dropped, "version": CACHE_VERSION})]
        rows += [f"{split}\t{p.ref}\t{p.src}\t{p.tgt}" for split, pairs in splits.items() for p in pairs]
        atomic_write_text(path, "\n".join(rows) + "\n")
    return path


def iter_bible(path: Path) -> tuple[int, Iterator[tuple[str, str, str, str]]]:
    """(verses dropped while aligning, iterator of (split, ref, source, target)) of a `bible_tsv` file."""
    lines = iter_lines(path)
    try:
        dropped = int(json.loads(next(lines)[1])["dropped"])
    except (StopIteration, ValueError, KeyError, TypeError):
        raise AttnlabError(f"{path}:1: not a Bible corpus cache; delete it to rebuild it") from None

    def records() -> Iterator[tuple[str, str, str, str]]:
        for i, line in lines:
            if line:
                fields = line.split("\t")
                if len(fields) != 4 or fields[0] not in SPLITS:
                    raise AttnlabError(f"{path}:{i}: not a Bible corpus cache line; delete the file to rebuild it")
                yield fields[0], fields[1], fields[2], fields[3]

    return dropped, records()


def renderings(english: str | Sequence[str], key: str = "data.english") -> list[str]:
    """The English renderings of a Bible config (`data.english`: one name, or a list such as ["kjv", "web"]) as a
    list, checked: known names (ENGLISH_MODULES), at least one, none twice. The first is the headline: the dev split
    that selects the model and the one earlier figures are compared with."""
    names = [english] if isinstance(english, str) else list(english)
    if not names:
        raise AttnlabError(f"{key}: give at least one English rendering ({', '.join(ENGLISH_MODULES)})")
    for name in names:
        if name not in ENGLISH_MODULES:
            raise AttnlabError(f"{key}: {name!r} is not one of {', '.join(repr(k) for k in ENGLISH_MODULES)}")
    if len(set(names)) != len(names):
        raise AttnlabError(f"{key}: {names} names a rendering twice")
    return names


def bible_split(english: str, split: str) -> list[Pair]:
    """The pairs of one split (train, dev, test) of the Bible with the given English rendering as the source, in
    canon order (dev and test are never filtered, so these are a Bible store's dev/test pairs)."""
    return bible_corpus(renderings(english, "english")[0]).split(split)


def bible_corpus(english: str = "kjv", refresh: bool = False) -> Corpus:
    """The English->Spanish (Reina-Valera 1909) Bible, verse-aligned, split by book (see DEV_BOOKS,
    TEST_BOOKS), cached as TSV under `cache_dir()` (`bible_tsv`); a second call reads the cache."""
    if english not in ENGLISH_MODULES:
        raise AttnlabError(f"unknown English Bible {english!r}; choose one of {', '.join(ENGLISH_MODULES)}")
    dropped, records = iter_bible(bible_tsv(english, refresh))
    corpus = Corpus(f"bible-{english}-es", skipped=dropped)
    for split, ref, src, tgt in records:
        corpus.split(split).append(Pair(src, tgt, ref))
    return corpus


# ---------------------------------------------------------------------------------------------- files
