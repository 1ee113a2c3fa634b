"""Prepared corpora: a parallel corpus read once as a stream, filtered, tokenized on every core and written as
token ids to flat binary files, so that training holds no per-pair Python objects and a second run, a resume or
another config with the same data starts in seconds.

The layout is fairseq's / Megatron's binarized dataset (`MMapIndexedDataset`: a `.bin` of token ids and an
`.idx` of lengths), with numpy's own `.npy` header for the index. Both can be memory-mapped with numpy
(`np.load(..., mmap_mode="r")`, `np.memmap`); training (`StoreDataset`) holds the index in memory (8 bytes a
pair with the offsets) and reads each pair's ids from the page cache with one positional read::

    STORE/store.json     the manifest: inputs and their fingerprints, settings, counts, statistics, checksums;
                         written last, so a folder without it is not a store
    STORE/tokenizer/     the tokenizers (`attnlab.tokenizers.save_tokenizers`), trained on a bounded sample
    STORE/train.bin      the training pairs' token ids, pair after pair: source ids then target ids (no BOS/EOS),
                         uint16 when the vocabulary has at most 65,536 ids, else uint32
    STORE/train.idx      a .npy array (N, 2) of (source length, target length), uint16 or uint32
    STORE/dev.tsv        dev and test pairs as text (ref, source, target): small, and decoded and scored as text
    STORE/test.tsv

A pair's offset in train.bin is the sum of the lengths before it, computed once when the store is opened.

A store is keyed by a hash of its inputs (`store_key`: the files' paths, sizes and modification times, the
reading options, the filters, the tokenizer settings): `prepare` reuses a complete store with the same key and
builds a new one when anything changed. It is built in a folder beside its place and renamed into it when
complete, under a lock, so a killed prepare leaves nothing that looks complete and two processes preparing the
same data do not both write it (the second waits and reuses). `open_store` checks the files against the
manifest's sizes and SHA-256 sums, and the data against itself, so that a store whose manifest was re-hashed after
tampering cannot train on garbage either: the index's lengths must add up to train.bin's size and every id must be
below its side's vocabulary (one numpy pass). A truncated or altered store is a one-line error that says how to
rebuild it. Nothing is written through a symlink: the staging folder is new (mkdir), its files are created with
O_EXCL | O_NOFOLLOW, the lock file is opened with O_NOFOLLOW, and a link standing at the store's place or among
its files is moved aside and removed, never followed.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import time
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from attnlab.corpus import (MAX_EXPANSION, MAX_LINE_BYTES, Pair, ReadCounts, bible_tsv, cache_dir, check_input, chunks,
                            holdout_indices, iter_bible, iter_lines, parse_lines, raw_lines, renderings, spec_name,
                            subsample_indices)
from attnlab.errors import AttnlabError
from attnlab.fileio import CREATE_FLAGS, atomic_write_text, file_sha256, make_dirs, write_json
from attnlab.tokenizers import (
    Tokenizer,
    TokenizerConfig,
    TokenizerPair,
    load_tokenizers,
    save_tokenizers,
    train_tokenizer,
)

log = logging.getLogger("attnlab")

STORE_VERSION = 1
MANIFEST = "store.json"
SPLITS = ("train", "dev", "test")
_TRAIN, _DEV, _TEST, _HOLDOUT = 0, 1, 2, 3  # a record's split while reading; _HOLDOUT: decided once counted
_OTHER_RENDERING = 254  # a dev/test record of an English rendering but the first (read from the corpus when asked)
_DROPPED = 255  # a training record a filter or max_train_pairs left out
_CHUNK = 8192  # pairs per encoding task
_PARALLEL_MIN_PAIRS = 100_000  # fewer training pairs are encoded in this process: starting workers costs more
_PARALLEL_MIN_BYTES = 32 << 20  # smaller input files are parsed in this process
_READ_CHUNK = 16384  # lines per reading task
_ID_DTYPES = ("<u2", "<u4")  # train.bin's token ids and train.idx's lengths: uint16 or uint32
_NO_LINK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)  # the lock file: never through a symlink


@dataclass
class StoreSpec:
    """What a store is built from: the corpus (the Bible, or a user's files), how it is read and split, the
    training filters and the tokenizer settings. Dev and test are never filtered.

    corpus "bible": the verse-aligned English -> Spanish Bible, split by book; `english` lists the English
    renderings (`attnlab.corpus.renderings`): each training verse is one pair per rendering (same target), dev and
    test are the first rendering's (the others' are read from the corpus when asked for). corpus "files": each
    of train/dev/test one TSV or JSON-lines file or two aligned files (plain, .gz, .xz or .bz2); without dev and
    test files, dev_size and test_size pairs are held out of train at random (seed `holdout_seed`).
    Filters (training pairs): max_words on both sides (0: off), max_ratio of the longer to the shorter side in
    words (0: off), dedup (drop exact repeats of a pair), then a random subset of max_train_pairs (0: all).
    Reading (`attnlab.corpus.iter_lines`): a line longer than max_line_bytes or not UTF-8 stops the prepare with
    its file:line, or with skip_bad_lines is skipped and counted, like a malformed line; a compressed file
    expanding more than max_expansion times its size is refused (0: no limit).
    """

    corpus: str = "bible"
    english: list[str] = field(default_factory=lambda: ["kjv"])
    train: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    dev_size: int = 500
    test_size: int = 500
    holdout_seed: int = 0
    max_words: int = 0
    max_ratio: float = 0.0
    dedup: bool = False
    max_train_pairs: int = 0
    subset_seed: int = 0
    skip_bad_lines: bool = False
    max_line_bytes: int = MAX_LINE_BYTES
    max_expansion: float = MAX_EXPANSION
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)

    @property
    def name(self) -> str:
        if self.corpus == "bible":
            return f"bible-{'+'.join(self.english)}-es"
        return Path(spec_name(_file_spec(self.train))).name.split(".")[0] or "corpus"


def _file_spec(paths: list[str]) -> str | tuple[str, str] | None:
    if not paths:
        return None
    if len(paths) == 1:
        return paths[0]
    if len(paths) == 2:
        return (paths[0], paths[1])
    raise AttnlabError(f"a corpus split is one TSV or JSON-lines path or two aligned file paths, got {list(paths)}")


def input_files(spec: StoreSpec) -> list[Path]:
    """The files a store of `spec` is read from (the Bible: its cached TSV, built from SWORD on first use)."""
    if spec.corpus == "bible":
        return [bible_tsv(english) for english in renderings(spec.english)]
    if not spec.train:
        raise AttnlabError("data.train: give a TSV or JSON-lines path or two aligned file paths for corpus = 'files'")
    files = [Path(p) for paths in (spec.train, spec.dev, spec.test) for p in paths]
    for paths in (spec.train, spec.dev, spec.test):
        _file_spec(paths)
    for f in files:
        check_input(f)
    return files


def _fingerprint(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def tokenizer_digest(tokenizers: TokenizerPair) -> str:
    """SHA-256 of a tokenizer pair's model files: equal digests, equal token ids."""
    h = hashlib.sha256(b"joint" if tokenizers.joint else b"separate")
    for tok in (tokenizers.src, tokenizers.tgt):
        h.update(tok.kind.encode() + b"\0" + hashlib.sha256(tok.to_bytes()).digest())
    return h.hexdigest()


def spec_dict(spec: StoreSpec) -> dict:
    """The spec as the manifest and the key record it; one English rendering as its name, max_line_bytes only when
    not its default (the keys of stores prepared before `english` became a list and before max_line_bytes), never
    max_expansion (it decides whether a file is read, not what is read from it)."""
    d = asdict(spec)
    if len(spec.english) == 1:
        d["english"] = spec.english[0]
    if spec.max_line_bytes == MAX_LINE_BYTES:
        del d["max_line_bytes"]
    del d["max_expansion"]
    return d


def store_key(spec: StoreSpec, fixed: TokenizerPair | None = None, fixed_tgt: Tokenizer | None = None) -> str:
    """The hash of everything a store's content depends on: the inputs' fingerprints (path, size, mtime), the
    spec (reading, splitting, filters, tokenizer settings and sample) and, when the tokenizers are given rather than
    trained, their digest."""
    inputs = [_fingerprint(f) for f in input_files(spec)]
    given = tokenizer_digest(fixed) if fixed is not None else None
    given_tgt = hashlib.sha256(fixed_tgt.to_bytes()).hexdigest() if fixed_tgt is not None else None
    blob = json.dumps({"version": STORE_VERSION, "spec": spec_dict(spec), "inputs": inputs, "tokenizers": given,
                       "tgt_tokenizer": given_tgt}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- reading
def _file_blocks(spec: StoreSpec) -> Iterator[tuple]:
    """The reading tasks of a files corpus: (split code, raw lines, format, file, ref prefix, skip_bad_lines,
    dedup), a chunk of lines each, in file order."""
    held_out = not spec.dev and not spec.test
    for paths, code in ((spec.train, _HOLDOUT if held_out else _TRAIN), (spec.dev, _DEV), (spec.test, _TEST)):
        if paths:
            where = _file_spec(paths)
            fmt, lines = raw_lines(where, spec.skip_bad_lines, spec.max_line_bytes, spec.max_expansion)
            name, path = spec_name(where), where if isinstance(where, str) else where[0]
            for chunk in chunks(lines, _READ_CHUNK):
                yield code, chunk, fmt, path, name, spec.skip_bad_lines, spec.dedup


def _block(code: int, rows: list[tuple[str, str, str]], dedup: bool) -> tuple[int, str, bytes, bytes, int]:
    """What pass 1 keeps of (ref, source, target) rows: the scratch text, the (source, target) word counts, the
    pair hashes (dedup) and the row count."""
    words = array("H")
    for _, src, tgt in rows:  # normalized text: one space between words; counts above 65,535 kept as 65,535
        words.append(min(src.count(" ") + 1, 65535))
        words.append(min(tgt.count(" ") + 1, 65535))
    hashes = array("Q", (_pair_hash(src, tgt) for _, src, tgt in rows) if dedup else ())
    text = "".join(f"{ref}\t{src}\t{tgt}\n" for ref, src, tgt in rows)
    return code, text, words.tobytes(), hashes.tobytes(), len(rows)


def _parse_block(task: tuple) -> tuple[tuple[int, str, bytes, bytes, int], int, int]:
    """A reading task of `_file_blocks` parsed and normalized (in a worker process): (block, empty, malformed)."""
    code, chunk, fmt, path, name, skip_bad_lines, dedup = task
    pairs, empty, bad = parse_lines(chunk, fmt, path, skip_bad_lines)
    return _block(code, [(f"{name}:{i}", s, t) for i, s, t in pairs], dedup), empty, bad


def _bible_blocks(spec: StoreSpec, counts: ReadCounts) -> Iterator[tuple[tuple[int, str, bytes, bytes, int], int]]:
    """(block, rendering): the verses of each English rendering in turn, in canon order."""
    codes = {"train": _TRAIN, "dev": _DEV, "test": _TEST}
    for rendering, path in enumerate(input_files(spec)):
        dropped, records = iter_bible(path)
        counts.empty += dropped
        for chunk in chunks(records, _READ_CHUNK):
            for code in sorted({codes[r[0]] for r in chunk}):
                yield _block(code, [(ref, src, tgt) for split, ref, src, tgt in chunk if codes[split] == code],
                             spec.dedup), rendering


def _pair_hash(src: str, tgt: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=8).digest(), "little")


def _length_stats(lengths: np.ndarray) -> tuple[float, int]:
    return (float(lengths.mean()), int(lengths.max())) if len(lengths) else (0.0, 0)


# ---------------------------------------------------------------------------------------------- encoding
_worker_tokenizers: tuple[Tokenizer, Tokenizer] | None = None


def _init_worker(tokenizers: tuple[Tokenizer, Tokenizer]) -> None:
    global _worker_tokenizers
    _worker_tokenizers = tokenizers


def _flatten(ids: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return lengths, flat


def _encode_chunk(task: tuple[list[str], list[str], str]) -> tuple[np.ndarray, np.ndarray, bytes]:
    """(source lengths, target lengths, token bytes: each pair's source ids then its target ids)."""
    srcs, tgts, dtype = task
    assert _worker_tokenizers is not None, "encoding worker not initialised"
    src_tok, tgt_tok = _worker_tokenizers
    s_len, s_ids = _flatten(src_tok.encode_batch(srcs), np.dtype(dtype))
    t_len, t_ids = _flatten(tgt_tok.encode_batch(tgts), np.dtype(dtype))
    # interleave per pair: source ids of pair k, then its target ids
    s_off, t_off = np.concatenate([[0], np.cumsum(s_len)]), np.concatenate([[0], np.cumsum(t_len)])
    out = np.empty(len(s_ids) + len(t_ids), dtype=dtype)
    pos = s_off[:-1] + t_off[:-1]  # where pair k starts in `out`
    src_pos = np.repeat(pos - s_off[:-1], s_len) + np.arange(len(s_ids))
    tgt_pos = np.repeat(pos + s_len - t_off[:-1], t_len) + np.arange(len(t_ids))
    out[src_pos], out[tgt_pos] = s_ids, t_ids
    return s_len, t_len, out.tobytes()


def default_workers() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------- building
class _Build:
    """One prepare, in a staging folder: pass 1 reads the inputs once (normalized text to a scratch file, the
    per-pair facts the filters need to arrays), then the splits and filters are decided with numpy, pass 2 reads
    the scratch file for the tokenizer sample and the dev/test text, and pass 3 encodes the kept training pairs on
    every core into train.bin / train.idx."""

    def __init__(self, spec: StoreSpec, staging: Path, workers: int) -> None:
        self.spec, self.dir, self.workers = spec, staging, max(1, workers)
        self.scratch = staging / "pairs.scratch"
        self.counts: dict = {}
        self.train_words = np.zeros((0, 2), dtype=np.uint16)  # (kept training pairs, 2), set by `select`
        self.seconds: dict[str, float] = {}  # wall time of each phase
        self.t0 = time.perf_counter()

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Pass 1: per record its split code, its (source, target) word counts (N, 2), (data.dedup) a 64-bit
        hash of the pair (else an empty array) and its English rendering (the Bible; 0 for files). Files are parsed
        and normalized by worker processes when large."""
        spec, counts = self.spec, ReadCounts()
        codes, words, hashes, sources = array("B"), array("H"), array("Q"), array("B")
        pool = None
        if spec.corpus == "bible":
            blocks: Iterator = _bible_blocks(spec, counts)
        else:
            size = sum(f.stat().st_size for f in input_files(spec))
            if self.workers > 1 and size >= _PARALLEL_MIN_BYTES:
                pool = multiprocessing.get_context("fork").Pool(self.workers)
                parsed = pool.imap(_parse_block, _file_blocks(spec), chunksize=1)
            else:
                parsed = map(_parse_block, _file_blocks(spec))

            def unpack() -> Iterator:
                for block, empty, bad in parsed:
                    counts.empty += empty
                    counts.bad += bad
                    yield block, 0

            blocks = unpack()
        try:
            with _new_file(self.scratch, "w") as out:
                for (code, text, word_bytes, hash_bytes, n), rendering in blocks:
                    out.write(text)
                    codes.frombytes(bytes([code]) * n)
                    sources.frombytes(bytes([rendering]) * n)
                    words.frombytes(word_bytes)
                    hashes.frombytes(hash_bytes)
        finally:
            if pool is not None:
                pool.terminate()
        self.counts.update(records=len(codes), empty_skipped=counts.empty, bad_lines_skipped=counts.bad)
        self.seconds["read"] = time.perf_counter() - self.t0
        log.info("read %s pairs (%s empty, %s malformed skipped) in %.1f s", f"{len(codes):,}", f"{counts.empty:,}",
                 f"{counts.bad:,}", self.seconds["read"])
        return (np.frombuffer(codes, dtype=np.uint8).copy(), np.frombuffer(words, dtype=np.uint16).reshape(-1, 2),
                np.frombuffer(hashes, dtype=np.uint64), np.frombuffer(sources, dtype=np.uint8))

    def select(self, codes: np.ndarray, words: np.ndarray, hashes: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """The splits (holding out dev and test when needed) and the kept training records; returns the codes with
        dropped training records marked _DROPPED and the dev/test records of every English rendering but the first
        (read from the corpus when evaluated on) marked _OTHER_RENDERING."""
        spec = self.spec
        codes = codes.copy()
        other = (sources > 0) & ((codes == _DEV) | (codes == _TEST))
        held_by_source = [(int(((codes == _DEV) & (sources == r)).sum()),
                           int(((codes == _TEST) & (sources == r)).sum()))
                          for r in range(len(spec.english) if spec.corpus == "bible" else 1)]
        codes[other] = _OTHER_RENDERING
        held = np.flatnonzero(codes == _HOLDOUT)
        if len(held):  # the draw of `attnlab.corpus.holdout`: runs trained before the store keep their splits
            dev_at, test_at = holdout_indices(len(held), spec.dev_size, spec.test_size, spec.holdout_seed, "pairs")
            codes[held] = _TRAIN
            codes[held[np.asarray(dev_at, dtype=np.int64)]] = _DEV
            codes[held[np.asarray(test_at, dtype=np.int64)]] = _TEST
        train = codes == _TRAIN
        longer, shorter = words.max(axis=1).astype(np.int64), words.min(axis=1).astype(np.int64)
        too_long = train & (longer > spec.max_words) if spec.max_words else np.zeros_like(train)
        bad_ratio = train & ~too_long & (longer > spec.max_ratio * shorter) if spec.max_ratio else \
            np.zeros_like(train)
        keep = train & ~too_long & ~bad_ratio
        dropped_dup = 0
        if spec.dedup:
            idx = np.flatnonzero(keep)
            _, first = np.unique(hashes[idx], return_index=True)
            dropped_dup = len(idx) - len(first)
            keep[:] = False
            keep[idx[np.sort(first)]] = True
        n_filtered = int(keep.sum())
        if spec.max_train_pairs and n_filtered > spec.max_train_pairs:
            idx = np.flatnonzero(keep)
            # the draw of `attnlab.corpus.subsample` (runs trained before the store keep their training subset)
            chosen = np.asarray(subsample_indices(len(idx), spec.max_train_pairs, spec.subset_seed), dtype=np.int64)
            keep[:] = False
            keep[idx[chosen]] = True
        self.counts.update(dev=int((codes == _DEV).sum()), test=int((codes == _TEST).sum()),
                           train_read=int(train.sum()), too_long=int(too_long.sum()), bad_ratio=int(bad_ratio.sum()),
                           duplicates=dropped_dup, subsampled_out=n_filtered - int(keep.sum()), train=int(keep.sum()))
        log.info("train: %s pairs read, %s longer than max_words, %s beyond max_ratio, %s duplicates, %s left out by "
                 "max_train_pairs: %s kept; dev %s, test %s", *(f"{self.counts[k]:,}" for k in (
                     "train_read", "too_long", "bad_ratio", "duplicates", "subsampled_out", "train", "dev", "test")))
        if not keep.any():
            raise AttnlabError("data: no training pairs left after the filters (max_words, max_ratio, dedup)")
        self.train_words = words[keep]
        codes[train & ~keep] = _DROPPED
        if spec.corpus == "bible":
            self.counts["renderings"] = {
                name: {"train_read": int((train & (sources == r)).sum()), "train": int((keep & (sources == r)).sum()),
                       "dev": held_by_source[r][0], "test": held_by_source[r][1]}
                for r, name in enumerate(spec.english)}
            log.info("English renderings: %s", "; ".join(
                f"{name} {c['train']:,} training pairs" for name, c in self.counts["renderings"].items()))
        return codes

    def _scratch_lines(self) -> Iterator[tuple[str, str, str]]:
        with open(self.scratch, encoding="utf-8") as f:
            for line in f:
                ref, src, tgt = line.rstrip("\n").split("\t")
                yield ref, src, tgt

    def sample_and_heldout(self, codes: np.ndarray, need_src: bool, need_tgt: bool, joint: bool
                           ) -> tuple[list[str], list[str], dict[str, list[Pair]]]:
        """Pass 2: the tokenizer's training sentences (a seeded sample of at most tokenizer.sample_sentences of
        the kept training sentences, in corpus order, sources first) and the dev and test pairs."""
        cfg = self.spec.tokenizer
        n = int((codes == _TRAIN).sum())
        rng = np.random.default_rng(cfg.sample_seed)

        def chosen(total: int) -> np.ndarray:
            if total <= cfg.sample_sentences:
                return np.ones(total, dtype=bool)
            mask = np.zeros(total, dtype=bool)
            mask[rng.choice(total, cfg.sample_sentences, replace=False)] = True
            return mask

        if joint:  # one sample over the 2n sentences: ids < n are sources, the rest targets
            both = chosen(2 * n) if need_src else np.zeros(2 * n, dtype=bool)
            take_src, take_tgt = both[:n], both[n:]
        else:
            take_src = chosen(n) if need_src else np.zeros(n, dtype=bool)
            take_tgt = chosen(n) if need_tgt else np.zeros(n, dtype=bool)
        srcs, tgts = [], []
        held: dict[str, list[Pair]] = {"dev": [], "test": []}
        k = 0
        for code, (ref, src, tgt) in zip(codes, self._scratch_lines()):
            if code == _TRAIN:
                if take_src[k]:
                    srcs.append(src)
                if take_tgt[k]:
                    tgts.append(tgt)
                k += 1
            elif code == _DEV or code == _TEST:
                held["dev" if code == _DEV else "test"].append(Pair(src, tgt, ref))
        self.counts["tokenizer_sentences"] = len(srcs) + len(tgts)
        return srcs, tgts, held

    def encode(self, codes: np.ndarray, tokenizers: TokenizerPair) -> dict:
        """Pass 3: the kept training pairs' ids to train.bin and their lengths to train.idx, encoded by a pool of
        worker processes (SentencePiece's encoder, one process per core)."""
        vocab = max(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        dtype = np.dtype(np.uint16 if vocab <= 2**16 else np.uint32)
        s_lens, t_lens = array("I"), array("I")
        digest = hashlib.sha256()
        t0 = time.perf_counter()

        def tasks() -> Iterator[tuple[list[str], list[str], str]]:
            srcs: list[str] = []
            tgts: list[str] = []
            for code, (_, src, tgt) in zip(codes, self._scratch_lines()):
                if code == _TRAIN:
                    srcs.append(src)
                    tgts.append(tgt)
                    if len(srcs) == _CHUNK:
                        yield srcs, tgts, dtype.str
                        srcs, tgts = [], []
            if srcs:
                yield srcs, tgts, dtype.str

        sides = (tokenizers.src, tokenizers.tgt)
        workers = self.workers if int((codes == _TRAIN).sum()) >= _PARALLEL_MIN_PAIRS else 1
        with _new_file(self.dir / "train.bin") as out:
            if workers == 1:
                _init_worker(sides)
                results = map(_encode_chunk, tasks())
                pool = None
            else:  # fork: the workers start at once and inherit the tokenizers; they run SentencePiece only
                pool = multiprocessing.get_context("fork").Pool(workers, _init_worker, (sides,))
                results = pool.imap(_encode_chunk, tasks(), chunksize=1)
            try:
                for s_len, t_len, data in results:
                    s_lens.extend(s_len.tolist())
                    t_lens.extend(t_len.tolist())
                    out.write(data)
                    digest.update(data)
            finally:
                if pool is not None:
                    pool.terminate()
            out.flush()
            os.fsync(out.fileno())
        sizes = np.stack([np.frombuffer(s_lens, dtype=np.uint32), np.frombuffer(t_lens, dtype=np.uint32)], axis=1)
        longest = int(sizes.max())
        sizes = sizes.astype(np.uint16 if longest < 2**16 else np.uint32)
        with _new_file(self.dir / "train.idx") as f:
            np.save(f, sizes, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        seconds = time.perf_counter() - t0
        n_tokens = int(sizes.sum(dtype=np.int64))
        log.info("encoded %s training pairs (%s tokens) in %.1f s with %d worker(s): %s pairs/s", f"{len(sizes):,}",
                 f"{n_tokens:,}", seconds, workers, f"{len(sizes) / max(seconds, 1e-9):,.0f}")
        return {"dtype": dtype.str, "index_dtype": sizes.dtype.str, "pairs": len(sizes), "tokens": n_tokens,
                "bin_sha256": digest.hexdigest(), "idx_sha256": file_sha256(self.dir / "train.idx"),
                "encode_seconds": round(seconds, 3), "encode_workers": workers}


def _new_file(path: Path, mode: str = "wb"):
    """A new file of the staging folder open for writing (UTF-8 in text mode): never an existing file, never a
    symlink's target."""
    return os.fdopen(os.open(path, CREATE_FLAGS, 0o644), mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def _train_tokenizers(spec: StoreSpec, srcs: list[str], tgts: list[str], fixed_tgt: Tokenizer | None
                      ) -> TokenizerPair:
    cfg = spec.tokenizer
    t0 = time.perf_counter()
    if fixed_tgt is not None:
        pair = TokenizerPair(train_tokenizer(cfg, srcs), fixed_tgt, joint=False, config=cfg)
    elif cfg.joint:
        tok = train_tokenizer(cfg, [*srcs, *tgts])
        pair = TokenizerPair(tok, tok, joint=True, config=cfg)
    else:
        pair = TokenizerPair(train_tokenizer(cfg, srcs), train_tokenizer(cfg, tgts), joint=False, config=cfg)
    log.info("tokenizer: %s, vocab %s/%s, trained on %s sentences in %.1f s", cfg.kind, f"{pair.src.vocab_size:,}",
             f"{pair.tgt.vocab_size:,}", f"{len(srcs) + len(tgts):,}", time.perf_counter() - t0)
    return pair


def _split_stats(pairs: list[Pair]) -> dict:
    row: dict = {"pairs": len(pairs)}
    for side in ("src", "tgt"):
        words = np.array([getattr(p, side).count(" ") + 1 for p in pairs], dtype=np.int64)
        row[f"{side}_words_avg"], row[f"{side}_words_max"] = _length_stats(words)
    return row


def _build(spec: StoreSpec, staging: Path, key: str, workers: int, fixed: TokenizerPair | None,
           fixed_tgt: Tokenizer | None) -> None:
    """Builds a complete store in `staging` (store.json written last)."""
    build = _Build(spec, staging, workers)
    inputs = [_fingerprint(f) for f in input_files(spec)]
    read = build.read()
    t0 = time.perf_counter()
    codes = build.select(*read)
    del read
    need_src = fixed is None
    need_tgt = fixed is None and fixed_tgt is None
    t1 = time.perf_counter()
    srcs, tgts, held = build.sample_and_heldout(codes, need_src, need_tgt, spec.tokenizer.joint and fixed_tgt is None)
    t2 = time.perf_counter()
    tokenizers = fixed if fixed is not None else _train_tokenizers(spec, srcs, tgts, fixed_tgt)
    tokenizer_seconds = time.perf_counter() - t2
    build.seconds.update(select=t1 - t0, sample=t2 - t1, tokenizer=tokenizer_seconds)
    del srcs, tgts
    save_tokenizers(tokenizers, staging / "tokenizer")
    for split, pairs in held.items():
        atomic_write_text(staging / f"{split}.tsv", "".join(f"{p.ref}\t{p.src}\t{p.tgt}\n" for p in pairs))
    train = build.encode(codes, tokenizers)
    build.scratch.unlink()
    sizes = np.load(staging / "train.idx")
    stats = {split: _split_stats(held[split]) for split in ("dev", "test")}
    train_row = {"pairs": train["pairs"]}
    for k, side in enumerate(("src", "tgt")):
        train_row[f"{side}_words_avg"], train_row[f"{side}_words_max"] = _length_stats(build.train_words[:, k])
        train_row[f"{side}_tokens_avg"], train_row[f"{side}_tokens_max"] = _length_stats(sizes[:, k])
    for split in ("dev", "test"):
        for side in ("src", "tgt"):
            tok = getattr(tokenizers, side)
            lengths = np.array([len(ids) for ids in tok.encode_batch([getattr(p, side) for p in held[split]])],
                               dtype=np.int64)
            stats[split][f"{side}_tokens_avg"], stats[split][f"{side}_tokens_max"] = _length_stats(lengths)
    files = {str(f.relative_to(staging)): {"size": f.stat().st_size, "sha256": file_sha256(f)}
             for f in sorted([staging / "dev.tsv", staging / "test.tsv", *(staging / "tokenizer").iterdir()])}
    manifest = {
        "format": "attnlab-store", "version": STORE_VERSION, "key": key, "name": spec.name, "spec": spec_dict(spec),
        "files": files,
        "inputs": inputs, "counts": build.counts, "train": train,
        "stats": {"train": train_row, **stats},
        "vocab": {"src": tokenizers.src.vocab_size, "tgt": tokenizers.tgt.vocab_size, "joint": tokenizers.joint},
        "tokenizer_sha256": tokenizer_digest(tokenizers), "tokenizer_given": fixed is not None,
        "tokenizer_seconds": round(tokenizer_seconds, 3),
        "prepare_seconds": round(time.perf_counter() - build.t0, 3),
        "phase_seconds": {k: round(v, 3) for k, v in {**build.seconds, "encode": train["encode_seconds"]}.items()},
    }
    write_json(staging / MANIFEST, manifest)


# ---------------------------------------------------------------------------------------------- the store
class StoreDataset(Dataset):
    """The training pairs of a store: item i is (i, source ids, target ids) as lists (ids without BOS/EOS), as
    `attnlab.batching.Seq2SeqDataset` gives them; nothing per pair lives in the Python heap.

    The index (lengths, and the offsets computed from them) is held as two arrays, 8 bytes a pair; an item's ids
    are read from train.bin with one positional read (pread) from the page cache. Not a memory map of train.bin:
    the kernel maps the neighbours of every faulted page (fault-around, read-ahead) into the process, so random
    batches grew a mapped 320 MB store's share of the training RSS by ~25 MB a step (measured, issue 20); reads
    leave the page cache shared and the process's own memory flat.
    """

    def __init__(self, bin_path: Path, idx_path: Path, dtype: str) -> None:
        self.path, self.dtype = Path(bin_path), np.dtype(dtype)
        self.sizes = np.load(idx_path, allow_pickle=False)  # (N, 2) source and target lengths
        n = len(self.sizes)
        n_tokens = self.path.stat().st_size // self.dtype.itemsize
        # (N + 1,) where pair i starts in train.bin: 4 bytes a pair while the tokens fit uint32's range
        self.offsets = np.zeros(n + 1, dtype=np.uint32 if n_tokens < 2**32 else np.int64)
        step = 1 << 20
        for a in range(0, n, step):  # in slices: no (N, 2) temporary of int64
            part = self.sizes[a:a + step]
            ends = np.cumsum(part[:, 0].astype(np.int64) + part[:, 1]) + int(self.offsets[a])
            self.offsets[a + 1:a + 1 + len(part)] = ends
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        """This process's descriptor of train.bin (a forked DataLoader worker opens its own)."""
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        return self._fd

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None, "_pid": 0}

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> tuple[int, list[int], list[int]]:
        start = int(self.offsets[index])
        s, t = int(self.sizes[index, 0]), int(self.sizes[index, 1])
        size = (s + t) * self.dtype.itemsize
        data = os.pread(self._file(), size, start * self.dtype.itemsize)
        if len(data) != size:
            raise AttnlabError(f"{self.path}: ends before pair {index} (truncated while in use); {_REBUILD}")
        ids = np.frombuffer(data, dtype=self.dtype).tolist()
        return index, ids[:s], ids[s:]

    def lengths(self) -> np.ndarray:
        """Per-example (S, T) as collated: source length + 1 (EOS), target length + 1 (BOS or EOS); (N, 2), uint16
        while that fits (4 bytes a pair), else uint32."""
        fits = self.sizes.dtype == np.uint16 and (len(self.sizes) == 0 or int(self.sizes.max()) < 2**16 - 1)
        return self.sizes + np.array(1, dtype=np.uint16 if fits else np.uint32)


@dataclass
class Store:
    """An opened, checked store: its folder and manifest; the tokenizers, the training data and the dev/test
    pairs are read when asked for."""

    path: Path
    manifest: dict

    @property
    def key(self) -> str:
        return self.manifest["key"]

    def tokenizers(self) -> TokenizerPair:
        """The store's tokenizers, checked against the vocabulary sizes its ids were checked against."""
        tokenizers = load_tokenizers(self.path / "tokenizer")
        vocab = self.manifest["vocab"]
        if (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size) != (vocab["src"], vocab["tgt"]):
            raise AttnlabError(f"{self.path / 'tokenizer'}: vocabularies of {tokenizers.src.vocab_size:,} and "
                               f"{tokenizers.tgt.vocab_size:,} where the manifest says {vocab['src']:,} and "
                               f"{vocab['tgt']:,} (altered); {_REBUILD}")
        return tokenizers

    def train_data(self) -> StoreDataset:
        return StoreDataset(self.path / "train.bin", self.path / "train.idx", self.manifest["train"]["dtype"])

    def pairs(self, split: str, limit: int = 0) -> list[Pair]:
        """The pairs of a split as text; train pairs are decoded from their ids (refs "train:N")."""
        if split not in SPLITS:
            raise AttnlabError(f"unknown split {split!r}; choose train, dev or test")
        if split == "train":
            data, toks = self.train_data(), self.tokenizers()
            n = min(len(data), limit) if limit else len(data)
            return [Pair(toks.src.decode(s), toks.tgt.decode(t), f"train:{i}") for i, s, t in map(data.__getitem__,
                                                                                                   range(n))]
        pairs = []
        for i, line in iter_lines(self.path / f"{split}.tsv", max_line_bytes=0):  # our own file: no line limit
            fields = line.split("\t")
            if len(fields) != 3:
                raise AttnlabError(f"{self.path / f'{split}.tsv'}:{i}: damaged store file; {_REBUILD}")
            pairs.append(Pair(fields[1], fields[2], fields[0]))
            if limit and len(pairs) >= limit:
                break
        return pairs

    def stats(self) -> dict:
        """Pairs per split and lengths (words for dev/test, tokens for all), the vocabulary, the filter counts."""
        m = self.manifest
        return {"corpus": m["name"], "counts": m["counts"], "splits": m["stats"], "vocab": m["vocab"],
                "store": str(self.path), "store_bytes_per_token": self.bytes_per_token()}

    def bytes_per_token(self) -> float:
        size = (self.path / "train.bin").stat().st_size + (self.path / "train.idx").stat().st_size
        return size / max(self.manifest["train"]["tokens"], 1)


_STORE_ENTRIES = {MANIFEST, "tokenizer", "train.bin", "train.idx", "dev.tsv", "test.tsv"}  # a store's own files
_REBUILD = "rebuild it with `attnlab data prepare CONFIG --force` (or delete the folder)"


def open_store(path: Path | str, verify: bool = True) -> Store:
    """The store in `path`, checked: its manifest, the files' sizes and (verify) their SHA-256 sums. A missing,
    truncated or altered store is an AttnlabError that says how to rebuild it."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise AttnlabError(f"{path}: not a prepared corpus ({MANIFEST} missing); {_REBUILD}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        _check_manifest(manifest)
        version, train = manifest["version"], manifest["train"]
        n, n_tokens, itemsize = int(train["pairs"]), int(train["tokens"]), np.dtype(train["dtype"]).itemsize
        for key in ("dtype", "index_dtype"):
            if np.dtype(train[key]).str not in _ID_DTYPES:
                raise TypeError(f"train.{key} {train[key]!r} is not uint16 or uint32")
    except (OSError, ValueError, KeyError, TypeError, AttnlabError) as e:
        raise AttnlabError(f"{manifest_path}: damaged manifest ({e}); {_REBUILD}") from None
    if version != STORE_VERSION:
        raise AttnlabError(f"{path}: a store of format version {version}, this attnlab reads {STORE_VERSION}; "
                           f"{_REBUILD}")
    bin_path, idx_path = path / "train.bin", path / "train.idx"
    for f in (bin_path, idx_path, path / "dev.tsv", path / "test.tsv", path / "tokenizer" / "tokenizer.json"):
        if not f.is_file():
            raise AttnlabError(f"{f}: missing from the prepared corpus; {_REBUILD}")
    if bin_path.stat().st_size != n_tokens * itemsize:
        raise AttnlabError(f"{bin_path}: {bin_path.stat().st_size:,} bytes where the manifest says "
                           f"{n_tokens * itemsize:,} (truncated or altered); {_REBUILD}")
    try:
        sizes = np.load(idx_path, mmap_mode="r", allow_pickle=False)
        ok = sizes.shape == (n, 2) and sizes.dtype == np.dtype(train["index_dtype"])
    except (ValueError, OSError):
        ok = False
    if not ok:
        raise AttnlabError(f"{idx_path}: not the index of {n:,} pairs the manifest names (truncated or altered); "
                           f"{_REBUILD}")
    checks = [(path / name, entry["sha256"]) for name, entry in manifest["files"].items()]
    for f, entry in zip((c[0] for c in checks), manifest["files"].values()):
        if not f.is_file() or f.stat().st_size != entry["size"]:
            raise AttnlabError(f"{f}: missing, or not the {entry['size']:,} bytes the manifest says (truncated or "
                               f"altered); {_REBUILD}")
    if verify:
        checks += [(idx_path, train["idx_sha256"]), (bin_path, train["bin_sha256"])]
        for f, expected in checks:
            if file_sha256(f) != expected:
                raise AttnlabError(f"{f}: checksum differs from the manifest's (the file was altered); {_REBUILD}")
    # the index must cover train.bin exactly: pair i's offset is the sum of the lengths before it, so lengths that
    # add up to another count put pairs past the end of the data or leave data unread (a re-hashed manifest)
    indexed = int(sizes.sum(dtype=np.int64))
    if indexed != n_tokens:
        raise AttnlabError(f"{idx_path}: its lengths add up to {indexed:,} tokens where train.bin holds {n_tokens:,} "
                           f"(altered); {_REBUILD}")
    if verify:
        _check_ids(bin_path, sizes, np.dtype(train["dtype"]), manifest["vocab"]["src"], manifest["vocab"]["tgt"])
    return Store(path, manifest)


def _check_ids(bin_path: Path, sizes: np.ndarray, dtype: np.dtype, src_vocab: int, tgt_vocab: int) -> None:
    """An AttnlabError naming train.bin if a source id is not below src_vocab or a target id below tgt_vocab (an
    embedding lookup would fail mid-training). One pass of numpy over the memory-mapped ids, a slice of pairs at a
    time; the sides are told apart only when an id reaches the smaller vocabulary."""
    if not len(sizes) or not bin_path.stat().st_size:
        return
    data = np.memmap(bin_path, dtype=dtype, mode="r")  # (tokens,)
    start, step = 0, 1 << 18
    for a in range(0, len(sizes), step):
        part = np.asarray(sizes[a:a + step], dtype=np.int64)  # (k, 2) source and target lengths
        end = start + int(part.sum())
        ids = data[start:end]
        if len(ids) and int(ids.max()) >= min(src_vocab, tgt_vocab):
            is_tgt = np.repeat(np.tile(np.array([False, True]), len(part)), part.ravel())  # (end - start,)
            bad = np.flatnonzero(np.where(is_tgt, ids >= tgt_vocab, ids >= src_vocab))
            if len(bad):
                pair = a + int(np.searchsorted(np.cumsum(part.sum(axis=1)), bad[0], side="right"))
                side, vocab = ("target", tgt_vocab) if is_tgt[bad[0]] else ("source", src_vocab)
                raise AttnlabError(f"{bin_path}: pair {pair:,} holds the {side} token id {int(ids[bad[0]]):,}, not "
                                   f"below the vocabulary's {vocab:,} (altered); {_REBUILD}")
        start = end


# what a manifest holds: key -> type, and the keys of its tables
_MANIFEST_FIELDS = {"version": int, "key": str, "name": str, "spec": dict, "files": dict, "counts": dict,
                    "train": dict, "stats": dict, "vocab": dict, "tokenizer_sha256": str, "tokenizer_given": bool,
                    "tokenizer_seconds": (int, float), "prepare_seconds": (int, float)}
_TRAIN_FIELDS = {"dtype": str, "index_dtype": str, "pairs": int, "tokens": int, "bin_sha256": str,
                 "idx_sha256": str, "encode_seconds": (int, float), "encode_workers": int}
_COUNT_FIELDS = ("records", "empty_skipped", "bad_lines_skipped", "dev", "test", "train_read", "too_long",
                 "bad_ratio", "duplicates", "subsampled_out", "train", "tokenizer_sentences")


def _check_manifest(m: object) -> None:
    """A TypeError naming the first field of a store manifest that is missing or of the wrong type."""
    def check(table: object, fields: dict, where: str) -> None:
        if not isinstance(table, dict):
            raise TypeError(f"{where or 'the manifest'} is not a table")
        for name, kind in fields.items():
            value = table.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TypeError(f"{where}{name} is missing or not {getattr(kind, '__name__', 'a number')}")

    check(m, _MANIFEST_FIELDS, "")
    check(m["train"], _TRAIN_FIELDS, "train.")
    check(m["counts"], dict.fromkeys(_COUNT_FIELDS, int), "counts.")
    check(m["vocab"], {"src": int, "tgt": int, "joint": bool}, "vocab.")
    for split in SPLITS:
        check(m["stats"].get(split), {"pairs": int}, f"stats.{split}.")
    for name, entry in m["files"].items():
        check(entry, {"size": int, "sha256": str}, f"files.{name}.")
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise TypeError(f"files.{name} is not a path inside the store")


def _default_place(spec: StoreSpec, key: str) -> Path:
    return cache_dir() / "stores" / f"{spec.name}-{key[:16]}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def _find_reusable(spec: StoreSpec, place: Path | None, tokenizers: TokenizerPair | None) -> tuple[str, Path] | None:
    """A complete store made by training the tokenizer whose tokenizers equal the given ones (a resumed run whose
    store is still there): (key, place), else None."""
    if tokenizers is None:
        return None
    key = store_key(spec)
    where = place or _default_place(spec, key)
    try:
        store = open_store(where, verify=False)
    except AttnlabError:
        return None
    vocab = store.manifest["vocab"]
    if store.key == key and store.manifest["tokenizer_sha256"] == tokenizer_digest(tokenizers) and \
            (vocab["src"], vocab["tgt"]) == (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size):
        return key, where
    return None


def prepare(spec: StoreSpec, out: Path | str | None = None, tokenizers: TokenizerPair | None = None,
            tgt_tokenizer: Tokenizer | None = None, workers: int = 0, verify: bool = True, force: bool = False
            ) -> Store:
    """The store of `spec`: reused when a complete one with the same key exists (at `out`, else in the cache,
    `cache_dir()/stores/NAME-KEY`), else built.

    Args:
        spec: the corpus, its filters and the tokenizer settings.
        out: the store's folder (None: the cache, keyed by the inputs).
        tokenizers: use these tokenizers (a trained run's) instead of training them; a store that trained equal
            ones is reused.
        tgt_tokenizer: a fixed target tokenizer (a pretrained LM's); the source one is trained.
        workers: encoding processes (0: one per core).
        verify: check the SHA-256 sums when reusing a store.
        force: build it again even if a store of the same key is there (a damaged one).
    """
    reusable = None if force else _find_reusable(spec, Path(out) if out else None, tokenizers)
    if reusable is not None:
        key, place = reusable
    else:
        key = store_key(spec, tokenizers, tgt_tokenizer)
        place = Path(out) if out else _default_place(spec, key)
    existing = None if force else _open_if_key(place, key, verify)
    if existing is not None:
        log.info("prepared corpus %s: reused (%s training pairs)", place, f"{existing.manifest['train']['pairs']:,}")
        return existing
    if place.exists() and not (place.is_dir() and all(p.name in _STORE_ENTRIES for p in place.iterdir())):
        raise AttnlabError(f"{place}: exists and is not a prepared corpus (it holds other files); choose another "
                           "folder")
    make_dirs(place.parent)
    lock_path = place.parent / f".{place.name}.lock"
    try:  # never through a symlink: opening one for writing would create or touch its target
        lock_fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT | _NO_LINK, 0o644)
    except OSError as e:
        raise AttnlabError(f"{lock_path}: cannot open the store's lock file ({e.strerror or e}; a symlink there is "
                           "refused: remove it)") from None
    with os.fdopen(lock_fd, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is preparing %s; waiting for it", place)
            fcntl.flock(lock, fcntl.LOCK_EX)
        waited = None if force else _open_if_key(place, key, verify)  # the process we waited for may have built it
        if waited is not None:
            return waited
        for stale in place.parent.glob(f".{place.name}.tmp-*"):  # left by a killed prepare (we hold the lock)
            _remove(stale)
        staging = place.parent / f".{place.name}.tmp-{os.getpid()}"
        try:
            os.mkdir(staging)  # a new folder, or none: never an existing one or a link's target
        except OSError as e:
            raise AttnlabError(f"{staging}: cannot create the staging folder ({e.strerror or e})") from None
        try:
            log.info("preparing %s into %s", spec.name, place)
            _build(spec, staging, key, workers or default_workers(), tokenizers, tgt_tokenizer)
            if place.exists():  # an outdated store (other inputs) or an empty folder: moved aside, then removed
                old = place.parent / f".{place.name}.tmp-old-{os.getpid()}"
                os.rename(place, old)
                os.rename(staging, place)
                _remove(old)
            else:
                os.rename(staging, place)
            fd = os.open(place.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            _remove(staging)
    store = open_store(place, verify=False)
    log.info("prepared %s training pairs in %.1f s: %s (%.2f bytes per token)", f"{store.manifest['train']['pairs']:,}",
             store.manifest["prepare_seconds"], place, store.bytes_per_token())
    return store


def _open_if_key(place: Path, key: str, verify: bool) -> Store | None:
    """The complete store at `place` if it has this key; None if there is none or it has another key. A store of
    this key that fails its checks is an AttnlabError (never silently rebuilt: it may be another process's)."""
    if not (place / MANIFEST).is_file():
        return None
    try:
        manifest_key = json.loads((place / MANIFEST).read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        manifest_key = None
    if manifest_key != key:
        return None
    return open_store(place, verify=verify)


def format_store_stats(store: Store) -> str:
    """A prepared corpus's statistics as plain text: what reading and the filters kept and dropped, pairs and
    lengths per split, the vocabulary and the store's size."""
    m = store.manifest
    c, splits = m["counts"], m["stats"]
    lines = [f"corpus: {m['name']}  (prepared in {m['prepare_seconds']:.1f} s: {store.path})",
             f"read: {c['records']:,} pairs; skipped while reading: {c['empty_skipped']:,} empty, "
             f"{c['bad_lines_skipped']:,} malformed",
             f"train filters: {c['train_read']:,} read, {c['too_long']:,} over max_words, {c['bad_ratio']:,} over "
             f"max_ratio, {c['duplicates']:,} duplicates, {c['subsampled_out']:,} left out by max_train_pairs: "
             f"{c['train']:,} kept",
             f"{'split':<6} {'pairs':>10}  {'src words avg/max':>18}  {'tgt words avg/max':>18}  "
             f"{'src tokens avg/max':>19}  {'tgt tokens avg/max':>19}"]
    for split in SPLITS:
        r = splits[split]
        words = "".join(f"  {r[f'{side}_words_avg']:>12.1f} / {r[f'{side}_words_max']:<3}" if f"{side}_words_avg" in r
                        else f"  {'-':>18}" for side in ("src", "tgt"))
        toks = "".join(f"  {r[f'{side}_tokens_avg']:>13.1f} / {r[f'{side}_tokens_max']:<3}" for side in ("src", "tgt"))
        lines.append(f"{split:<6} {r['pairs']:>10,}{words}{toks}")
    v = m["vocab"]
    lines.append(f"vocabulary ({'joint' if v['joint'] else 'separate'}): source {v['src']:,}, target {v['tgt']:,}; "
                 f"tokenizer trained on {c.get('tokenizer_sentences', 0):,} sampled sentences"
                 + (" (given, not trained)" if m.get("tokenizer_given") else ""))
    for name, r in c.get("renderings", {}).items():
        lines.append(f"English rendering {name}: {r['train']:,} training pairs kept of {r['train_read']:,}; "
                     f"dev {r['dev']:,}, test {r['test']:,}")
    if len(c.get("renderings", {})) > 1:
        lines.append(f"dev and test above are {next(iter(c['renderings']))}'s (the headline); "
                     f"`attnlab evaluate RUN --source NAME` scores any rendering")
    lines.append(f"store: {m['train']['tokens']:,} training tokens, {store.bytes_per_token():.2f} bytes per token "
                 f"with the index")
    return "\n".join(lines)
