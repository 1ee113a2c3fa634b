"""Parallel corpora: the pair and corpus types, and user corpora (TSV, JSON lines or two line-aligned plain files);
the default corpus, the Bible, is `attnlab.data.bible`.

Every pair keeps where it came from (`ref`: "Gen 1:1" for a verse, "data.tsv:12" for a file line), so a
result can always be traced back to its source.

A user's file is untrusted input, read as a stream in bounded pieces: it must be a regular file (a folder, a FIFO
or a device is named as such), a line longer than `max_line_bytes` is never held whole, a line that is not UTF-8
or too long is an error naming file:line (or, with skip_bad_lines, skipped and counted), and a compressed file that
expands more than `max_expansion` times its size is refused (a decompression bomb) unless that limit is lifted.
Reading shows its progress (a bar on a terminal, else a log line now and then).
"""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import os
import random
import re
import stat
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, zip_longest
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np
from tqdm import tqdm

from attnlab.core.errors import AttnlabError

log = logging.getLogger("attnlab")
T = TypeVar("T")

SPLITS = ("train", "dev", "test")  # a corpus's splits, everywhere a split is named


@dataclass(frozen=True)
class Pair:
    """One aligned sentence pair. ref: its origin, e.g. "Gen 1:1" or "corpus.tsv:12"."""

    src: str
    tgt: str
    ref: str


@dataclass
class Corpus:
    """A parallel corpus in three fixed splits."""

    name: str
    train: list[Pair] = field(default_factory=list)
    dev: list[Pair] = field(default_factory=list)
    test: list[Pair] = field(default_factory=list)
    skipped: int = 0  # empty lines / verses dropped while reading

    def split(self, name: str) -> list[Pair]:
        if name not in SPLITS:
            raise AttnlabError(f"unknown split {name!r}; choose train, dev or test")
        return getattr(self, name)


def normalize(text: str) -> str:
    """Whitespace-normalized text: paragraph marks (¶) removed, whitespace runs collapsed, ends stripped.
    (str.split() splits on exactly the characters regex \\s matches in str patterns, and is 3x faster.)"""
    if "\u00b6" in text:
        text = text.replace("\u00b6", " ")
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------- files
COMPRESSED = {".gz": lambda f: gzip.GzipFile(fileobj=f, mode="rb"), ".xz": lambda f: lzma.LZMAFile(f, "rb"),
              ".bz2": lambda f: bz2.BZ2File(f, "rb")}  # a decompressing reader of an open binary file
JSONL_SUFFIXES = (".jsonl", ".ndjson")
MAX_LINE_BYTES = 1 << 16  # a corpus line longer than this (64 KiB, ~10,000 words) is refused or skipped
MAX_EXPANSION = 100.0  # a compressed corpus expanding more than this many times its size is refused
_EXPANSION_FLOOR = 16 << 20  # bytes expanded before the ratio is judged (a tiny file may compress very well)
_BLOCK = 1 << 20  # bytes read at once (decompressed): the expansion and the progress are looked at after each
_LOG_EVERY = 15.0  # seconds between two progress lines when stderr is no terminal
# how to get past a malformed line: reading a config's corpus (`attnlab.data.prepare`); reading one without a config
# (`file_corpus`: attnlab data tsv/files), where that key cannot be set
_SKIP_HINT = " (data.skip_bad_lines = true skips such lines)"
_PREPARE_HINT = " (fix or remove the line; attnlab data prepare CONFIG --set data.skip_bad_lines=true skips such lines)"
_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def is_jsonl(path: Path | str) -> bool:
    """Whether a corpus file is JSON lines (`{"src": ..., "tgt": ...}` per line), by its extension before any
    compression suffix: .jsonl or .ndjson."""
    path = Path(path)
    name = path.stem if path.suffix.lower() in COMPRESSED else path.name
    return Path(name).suffix.lower() in JSONL_SUFFIXES


def _not_regular(path: Path, mode: int) -> AttnlabError | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return AttnlabError(f"{path}: is a directory, not a corpus file")
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
    return AttnlabError(f"{path}: is not a regular file ({kind}); give a corpus file")


def check_input(path: Path | str) -> Path:
    """`path` if it is a regular file (or a link to one); else an AttnlabError saying what stands there: no such
    file, a directory, a FIFO or a device (/dev/zero, /dev/null), or a file that cannot be read."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except OSError as e:
        raise AttnlabError(f"{path}: cannot read it ({e.strerror or e})") from None
    error = _not_regular(path, mode)
    if error is not None:
        raise error
    return path


def _open_input(path: Path) -> BinaryIO:
    """A checked input file open for binary reading. Opened without blocking and checked again on the open file,
    so a FIFO put in its place after the check is refused rather than waited on."""
    check_input(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise AttnlabError(f"{path}: cannot read it ({e.strerror or e})") from None
    error = _not_regular(path, os.fstat(fd).st_mode)
    if error is not None:
        os.close(fd)
        raise error
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _ReadProgress:
    """Progress of reading one file, by its bytes consumed (compressed bytes for a compressed file): a tqdm bar on
    a terminal (shown once reading has taken 2 s), else a log line every _LOG_EVERY seconds; nothing for a quick
    read."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.size = path, size
        self.last = time.monotonic()
        self.bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {path.name}", delay=2, leave=False,
                        dynamic_ncols=True, file=sys.stderr) if sys.stderr.isatty() else None

    def update(self, position: int, expanded: int, lines: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{lines:,} lines, {expanded / 1e6:,.0f} MB", refresh=False)
            self.bar.update(position - self.bar.n)
            return
        now = time.monotonic()
        if now - self.last >= _LOG_EVERY:
            self.last = now
            of = f", {expanded / 1e6:,.0f} MB expanded" if expanded != position else ""
            log.info("reading %s: %.0f%% (%s of %s MB%s), %s lines", self.path, 100 * position / max(self.size, 1),
                     f"{position / 1e6:,.1f}", f"{self.size / 1e6:,.1f}", of, f"{lines:,}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _lines(path: Path, max_line_bytes: int = MAX_LINE_BYTES, max_expansion: float = MAX_EXPANSION,
           skip_bad_lines: bool = False, hint: str = "") -> Iterator[tuple[int, str | None]]:
    """(line number, line) of a UTF-8 file read as a stream (see `iter_lines`); with skip_bad_lines a line too
    long or not UTF-8 is (line number, None).

    The file is read in blocks of _BLOCK bytes: the complete lines of a block are checked and decoded at once (C
    speed), a line's start waits for the next block, and a line that grows past max_line_bytes is refused or
    dropped as it streams by, so no more than a block and one line's limit are ever held."""
    raw = _open_input(path)
    opener = COMPRESSED.get(path.suffix.lower())
    progress = _ReadProgress(path, os.fstat(raw.fileno()).st_size)
    i = expanded = 0
    try:
        with raw, (opener(raw) if opener else raw) as f:
            pending, skipping = bytearray(), False  # the start of a line not yet ended; inside a too long line
            for block in _blocks(f):
                expanded += len(block)
                _check(path, raw, opener, expanded, max_expansion, progress, i)
                if skipping:  # drop the rest of the too long line, up to its end
                    end = block.find(b"\n")
                    if end < 0:
                        continue
                    block, skipping = block[end + 1:], False
                end = block.rfind(b"\n")
                if end >= 0:
                    region = bytes(pending) + block[:end] if pending else block[:end]
                    pending = bytearray(block[end + 1:])
                    n, lines = _region(path, region, i, max_line_bytes, skip_bad_lines, hint)
                    yield from lines
                    i += n
                else:
                    pending += block  # amortized: a long line is not copied once per block
                if max_line_bytes and len(pending) > max_line_bytes:
                    i += 1
                    if not skip_bad_lines:
                        raise AttnlabError(f"{path}:{i}: longer than data.max_line_bytes = {max_line_bytes:,} "
                                           f"bytes{hint}")
                    yield i, None
                    pending, skipping = bytearray(), True
            if pending:  # the last line, without a line end
                yield from _region(path, bytes(pending), i, max_line_bytes, skip_bad_lines, hint)[1]
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as e:  # a damaged or truncated compressed file
        raise AttnlabError(f"{path}:{i + 1}: cannot read ({e})") from None
    finally:
        progress.close()


def _blocks(f: BinaryIO) -> Iterator[bytes]:
    """The bytes of an open file in blocks of at most _BLOCK, a leading UTF-8 BOM removed."""
    head = f.read(3)
    yield head[3:] if head == b"\xef\xbb\xbf" else head
    while block := f.read(_BLOCK):
        yield block


def _region(path: Path, region: bytes, before: int, max_line_bytes: int, skip_bad_lines: bool, hint: str
            ) -> tuple[int, Iterable[tuple[int, str | None]]]:
    """(count, the numbered lines) of `region` (complete lines joined by LF) after line `before`: checked and
    decoded all at once, or line by line when one of them is too long or not UTF-8."""
    try:
        lines = region.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = None
    # a line of n characters has n to 4n bytes: only lines past max_line_bytes / 4 characters are measured in bytes
    if lines is not None and (not max_line_bytes or max(map(len, lines)) * 4 <= max_line_bytes or
                              all(len(line.encode()) <= max_line_bytes for line in lines
                                  if len(line) * 4 > max_line_bytes)):
        if b"\r" in region:
            lines = [line.rstrip("\r") for line in lines]
        return len(lines), enumerate(lines, start=before + 1)
    out: list[tuple[int, str | None]] = []
    for i, line in enumerate(region.split(b"\n"), start=before + 1):
        if max_line_bytes and len(line) > max_line_bytes:
            bad = f"longer than data.max_line_bytes = {max_line_bytes:,} bytes"
        else:
            try:
                out.append((i, line.decode("utf-8").rstrip("\r")))
                continue
            except UnicodeDecodeError as e:
                bad = f"not valid UTF-8 (byte 0x{line[e.start]:02x})"
        if not skip_bad_lines:
            raise AttnlabError(f"{path}:{i}: {bad}{hint}")
        out.append((i, None))
    return len(out), out


def _check(path: Path, raw: BinaryIO, compressed: object, expanded: int, max_expansion: float,
           progress: _ReadProgress, lines: int) -> None:
    """Shows the progress, and refuses a compressed file expanding past max_expansion."""
    position = raw.tell()
    if compressed and max_expansion and expanded > _EXPANSION_FLOOR and expanded > max_expansion * position:
        raise AttnlabError(f"{path}: expands more than {max_expansion:g} times its size ({expanded / 1e6:,.0f} MB "
                           f"from its first {position / 1e6:,.2f} MB: a decompression bomb?); data.max_expansion = 0 "
                           "reads it anyway")
    progress.update(position, expanded, lines)


def iter_lines(path: Path | str, max_line_bytes: int = MAX_LINE_BYTES, max_expansion: float = MAX_EXPANSION
               ) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file read as a stream, line ends (LF, CRLF) and a leading BOM removed;
    gzip, xz and bzip2 files (.gz, .xz, .bz2) are decompressed on the fly. Errors name the file and the line: not a
    regular file, a line longer than max_line_bytes (0: no limit), not UTF-8, a compressed file expanding more
    than max_expansion times (0: no limit), a damaged compressed file."""
    return _lines(Path(path), max_line_bytes, max_expansion)  # type: ignore[return-value]  # never None here


@dataclass
class ReadCounts:
    """What reading a corpus dropped: empty lines or sides, and malformed lines skipped (data.skip_bad_lines)."""

    empty: int = 0
    bad: int = 0


def _tsv_pair(line: str) -> tuple[str, str]:
    fields = line.split("\t")
    if len(fields) != 2:
        raise ValueError(f"expected 2 tab-separated fields (source, target), found {len(fields)}")
    return fields[0], fields[1]


_SURROGATE = re.compile("[\ud800-\udfff]")


def _jsonl_pair(line: str) -> tuple[str, str]:
    try:
        obj = json.loads(line)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError:
        raise ValueError("not a JSON object") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("src"), str) or not isinstance(obj.get("tgt"), str):
        raise ValueError('expected a JSON object with string "src" and "tgt" keys')
    # the line was valid UTF-8, so a surrogate can only come from a \ud800-\udfff escape without its partner
    if "\\u" in line and (_SURROGATE.search(obj["src"]) or _SURROGATE.search(obj["tgt"])):
        raise ValueError("a lone surrogate escape (\\ud800-\\udfff) in \"src\" or \"tgt\" is no character")
    return obj["src"], obj["tgt"]


def _parallel_lines(src_path: Path, tgt_path: Path, **read) -> Iterator[tuple[int, str | None, str]]:
    for s, t in zip_longest(_lines(src_path, **read), _lines(tgt_path, **read)):
        if s is None or t is None:
            (longer, (n, _)), other = ((tgt_path, t), src_path) if s is None else ((src_path, s), tgt_path)
            raise AttnlabError(f"{longer}:{n}: line has no partner in {other} (the two files have different line "
                               "counts)")
        yield s[0], (None if s[1] is None or t[1] is None else s[1]), t[1] or ""


def raw_lines(spec: str | Path | Sequence[str | Path], skip_bad_lines: bool = False,
              max_line_bytes: int = MAX_LINE_BYTES, max_expansion: float = MAX_EXPANSION, hint: str = _SKIP_HINT
              ) -> tuple[str, Iterator[tuple[int, str | None, str]]]:
    """The format of a corpus ("tsv", "jsonl" or "aligned": two line-aligned files) and its lines as read, not yet
    parsed: (line number, line, "") or, for aligned files, (line number, source line, target line). A line too
    long or not UTF-8 (in either aligned file) is an AttnlabError naming file:line and ending in `hint` (how to skip
    such lines), or with skip_bad_lines (line number, None, "") for `parse_lines` to count. See `iter_lines` for
    the limits."""
    read = {"max_line_bytes": max_line_bytes, "max_expansion": max_expansion, "skip_bad_lines": skip_bad_lines,
            "hint": hint}
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        return ("jsonl" if is_jsonl(path) else "tsv"), ((i, line, "") for i, line in _lines(path, **read))
    if len(spec) != 2:
        raise AttnlabError(f"a corpus is one TSV or JSON-lines file or two aligned files, got {len(spec)} paths")
    return "aligned", _parallel_lines(Path(spec[0]), Path(spec[1]), **read)


def parse_lines(lines: Sequence[tuple[int, str | None, str]], fmt: str, where: str | Path,
                skip_bad_lines: bool = False, hint: str = _SKIP_HINT) -> tuple[list[tuple[int, str, str]], int, int]:
    """The whitespace-normalized (line number, source, target) pairs of raw lines of `raw_lines` (fmt "lines": a
    plain text file, each line a sentence given as both sides), and how many
    were skipped as empty (a line or a side) and as malformed (with skip_bad_lines, the lines the reader could not
    take too; else a malformed line is an AttnlabError naming where:line, ending in `hint`). A pure function of its
    arguments, so worker processes can run it."""
    pairs, empty, bad = [], 0, 0
    parse = _jsonl_pair if fmt == "jsonl" else _tsv_pair
    for i, a, b in lines:
        if a is None:  # too long or not UTF-8, skipped by the reader (skip_bad_lines)
            bad += 1
            continue
        if fmt == "aligned":
            s, t = a, b
        elif fmt == "lines":  # a text corpus: each line one sentence, kept as both sides (a monolingual store)
            s = t = a
        elif not a.strip():
            empty += 1
            continue
        else:
            try:
                s, t = parse(a)
            except ValueError as e:
                if skip_bad_lines:
                    bad += 1
                    continue
                raise AttnlabError(f"{where}:{i}: {e}{hint}") from None
        s, t = normalize(s), normalize(t)
        if not s or not t:
            empty += 1
            continue
        pairs.append((i, s, t))
    return pairs, empty, bad


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items (the last one shorter)."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def iter_pairs(spec: str | Path | Sequence[str | Path], counts: ReadCounts | None = None,
               skip_bad_lines: bool = False, max_line_bytes: int = MAX_LINE_BYTES,
               max_expansion: float = MAX_EXPANSION, hint: str = _SKIP_HINT) -> Iterator[tuple[int, str, str]]:
    """(line number, source, target) of a corpus read as a stream, whitespace-normalized: a TSV file, a JSON-lines
    file ({"src", "tgt"}), or a (source, target) pair of line-aligned plain files, each possibly compressed.
    Empty lines or sides are skipped and counted in `counts.empty`; a malformed line (too long, not UTF-8, not
    parsed) is an AttnlabError naming file:line and ending in `hint`, or with skip_bad_lines skipped and counted
    in `counts.bad`."""
    counts = counts if counts is not None else ReadCounts()
    fmt, lines = raw_lines(spec, skip_bad_lines, max_line_bytes, max_expansion, hint)
    where = spec if isinstance(spec, (str, Path)) else spec[0]
    for chunk in chunks(lines, 4096):
        pairs, empty, bad = parse_lines(chunk, fmt, where, skip_bad_lines, hint)
        counts.empty += empty
        counts.bad += bad
        yield from pairs


def spec_name(spec: str | Path | Sequence[str | Path]) -> str:
    """The file name a pair's ref starts with: the TSV's, or the source file's."""
    return Path(spec if isinstance(spec, (str, Path)) else spec[0]).name


def read_pairs(spec: str | Path | Sequence[str | Path], skip_bad_lines: bool = False, hint: str = _SKIP_HINT
               ) -> tuple[list[Pair], int]:
    """All pairs of a corpus file (see `iter_pairs`) in memory, with refs "file:line". Returns (pairs, skipped)."""
    counts = ReadCounts()
    name = spec_name(spec)
    pairs = [Pair(s, t, f"{name}:{i}") for i, s, t in iter_pairs(spec, counts, skip_bad_lines, hint=hint)]
    return pairs, counts.empty + counts.bad


def holdout_indices(n: int, dev_size: int, test_size: int, seed: int = 0, what: str = "items"
                    ) -> tuple[list[int], list[int]]:
    """The positions of a seeded random hold-out of dev_size and test_size of n items: (dev, test), in the order
    drawn. The one draw behind `holdout` and the prepared corpora (`attnlab.data.prepare`)."""
    if dev_size < 0 or test_size < 0 or dev_size + test_size >= n:
        raise AttnlabError(f"cannot hold out dev_size ({dev_size}) + test_size ({test_size}) {what} from a "
                           f"corpus of {n:,}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[:dev_size], order[dev_size:dev_size + test_size]


def holdout(items: Sequence[T], dev_size: int, test_size: int, seed: int = 0) -> dict[str, list[T]]:
    """A seeded random hold-out of dev_size and test_size items (pairs, sentences); the rest is train, order
    kept. The one way attnlab holds out splits of a user's corpus (`holdout_indices`)."""
    dev_at, test_at = holdout_indices(len(items), dev_size, test_size, seed)
    dev, test = set(dev_at), set(test_at)
    out: dict[str, list[T]] = {"train": [], "dev": [], "test": []}
    for i, x in enumerate(items):
        out["dev" if i in dev else "test" if i in test else "train"].append(x)
    return out


def subsample_indices(n: int, k: int, seed: int = 0) -> list[int]:
    """The ascending positions of a seeded random subset of k of n items (all of them when k is 0 or >= n). The one
    draw behind `subsample` and the prepared corpora (`attnlab.data.prepare`)."""
    if not k or k >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), k))


def subsample(items: list[T], n: int, seed: int = 0) -> list[T]:
    """A seeded random subset of n items in their original order (all of them when n is 0 or >= len)."""
    if not n or n >= len(items):
        return items
    return [items[i] for i in subsample_indices(len(items), n, seed)]


def file_corpus(train: str | Path | Sequence[str | Path], dev=None, test=None, *,
                dev_size: int = 500, test_size: int = 500, seed: int = 0) -> Corpus:
    """A user corpus: each split a TSV or two aligned files. A split not given as a file is held out of train at
    random (seeded): dev_size, test_size pairs, as a prepared store holds them out (`attnlab.data.spec.held_sizes`).
    Every line is read: a malformed one is an AttnlabError whose hint points to `attnlab data prepare`
    (data.skip_bad_lines is a config's key)."""
    pairs, skipped = read_pairs(train, hint=_PREPARE_HINT)
    if not pairs:
        where = train if isinstance(train, (str, Path)) else " + ".join(map(str, train))  # two aligned files
        raise AttnlabError(f"{where}: the corpus has no sentence pairs")
    name = Path(train if isinstance(train, (str, Path)) else train[0]).stem
    corpus = Corpus(name, skipped=skipped)
    if dev is None or test is None:
        splits = holdout(pairs, dev_size if dev is None else 0, test_size if test is None else 0, seed)
        corpus.train, corpus.dev, corpus.test = splits["train"], splits["dev"], splits["test"]
    else:
        corpus.train = pairs
    for split, spec in (("dev", dev), ("test", test)):
        if spec is not None:
            extra, sk = read_pairs(spec, hint=_PREPARE_HINT)
            corpus.split(split).extend(extra)
            corpus.skipped += sk
    return corpus


# ---------------------------------------------------------------------------------------------- stats
def length_stats(lengths: Iterable[int] | np.ndarray) -> tuple[float, int]:
    """(mean, max) of sentence lengths, (0.0, 0) for none: the average and longest columns of corpus statistics."""
    lengths = np.fromiter(lengths, dtype=np.int64) if not isinstance(lengths, np.ndarray) else lengths
    return (float(lengths.mean()), int(lengths.max())) if len(lengths) else (0.0, 0)


def corpus_stats(corpus: Corpus, tokenizers=None) -> dict:
    """Pairs per split and average / maximum lengths per side, in words and (given a TokenizerPair) in
    tokens; plus the vocabulary sizes."""
    stats: dict = {"corpus": corpus.name, "skipped": corpus.skipped, "splits": {}}
    for split in SPLITS:
        pairs = corpus.split(split)
        row: dict = {"pairs": len(pairs)}
        for side in ("src", "tgt"):
            texts = [getattr(p, side) for p in pairs]
            row[f"{side}_words_avg"], row[f"{side}_words_max"] = length_stats(len(t.split()) for t in texts)
            if tokenizers is not None:
                tok = getattr(tokenizers, side)
                row[f"{side}_tokens_avg"], row[f"{side}_tokens_max"] = length_stats(
                    len(tok.encode(t)) for t in texts)
        stats["splits"][split] = row
    if tokenizers is not None:
        stats["vocab"] = {"src": tokenizers.src.vocab_size, "tgt": tokenizers.tgt.vocab_size,
                          "joint": tokenizers.joint}
    return stats


def format_stats(stats: dict) -> str:
    """The stats of `corpus_stats` as a plain-text table."""
    has_tok = "src_tokens_avg" in stats["splits"]["train"]
    head = f"{'split':<6} {'pairs':>7}  {'src words avg/max':>18}  {'tgt words avg/max':>18}"
    if has_tok:
        head += f"  {'src tokens avg/max':>19}  {'tgt tokens avg/max':>19}"
    lines = [f"corpus: {stats['corpus']}  (skipped while reading: {stats['skipped']})", head]
    for split, r in stats["splits"].items():
        line = (f"{split:<6} {r['pairs']:>7,}  {r['src_words_avg']:>12.1f} / {r['src_words_max']:<3}  "
                f"{r['tgt_words_avg']:>12.1f} / {r['tgt_words_max']:<3}")
        if has_tok:
            line += (f"  {r['src_tokens_avg']:>13.1f} / {r['src_tokens_max']:<3}  "
                     f"{r['tgt_tokens_avg']:>13.1f} / {r['tgt_tokens_max']:<3}")
        lines.append(line)
    if "vocab" in stats:
        v = stats["vocab"]
        kind = "joint" if v["joint"] else "separate"
        lines.append(f"vocabulary ({kind}): source {v['src']:,}, target {v['tgt']:,}")
    return "\n".join(lines)
