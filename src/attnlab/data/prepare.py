"""Preparing a corpus: a parallel corpus read once as a stream, filtered, tokenized on every core and written as
token ids to flat binary files (`attnlab.data.store`'s layout), so that training holds no per-pair Python objects and a
second run, a resume or another config with the same data starts in seconds.

A store is keyed by a hash of its inputs (`store_key`: the files' paths, sizes and modification times, the
reading options, the filters, the tokenizer settings): `prepare` reuses a complete store with the same key and
builds a new one when anything changed. It is built in a folder beside its place and renamed into it when
complete, under a lock, so a killed prepare leaves nothing that looks complete and two processes preparing the
same data do not both write it (the second waits and reuses). Nothing is written through a symlink: the staging
folder is new (mkdir), its files are created with O_EXCL | O_NOFOLLOW, the lock file is opened with O_NOFOLLOW,
and a link standing at the store's place or among its files is moved aside and removed, never followed.
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
from pathlib import Path

import numpy as np

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import (CREATE_FLAGS, atomic_write_text, cache_dir, file_sha256, make_dirs, open_lock_file,
                                 sync_dir, write_json)
from attnlab.data.bible import iter_bible
from attnlab.data.corpus import (Pair, ReadCounts, chunks, holdout_indices, length_stats, parse_lines, raw_lines,
                                 spec_name, subsample_indices)
from attnlab.data.spec import (StoreSpec, file_spec, fingerprint, held_sizes, input_files, spec_dict, store_key,
                               tokenizer_digest)
from attnlab.data.store import MANIFEST, STORE_ENTRIES, STORE_VERSION, Store, open_store
from attnlab.data.tokenizers import Tokenizer, TokenizerPair, save_tokenizers, train_tokenizer

log = logging.getLogger("attnlab")

_TRAIN, _DEV, _TEST, _HOLDOUT = 0, 1, 2, 3  # a record's split while reading; _HOLDOUT: decided once counted
_OTHER_RENDERING = 254  # a dev/test record of an English rendering but the first (read from the corpus when asked)
_DROPPED = 255  # a training record a filter or max_train_pairs left out
_CHUNK = 8192  # pairs per encoding task
_PARALLEL_MIN_PAIRS = 100_000  # fewer training pairs are encoded in this process: starting workers costs more
_PARALLEL_MIN_BYTES = 32 << 20  # smaller input files are parsed in this process
_READ_CHUNK = 16384  # lines per reading task


# ---------------------------------------------------------------------------------------------- reading
def _file_blocks(spec: StoreSpec) -> Iterator[tuple]:
    """The reading tasks of a files corpus: (split code, raw lines, format, file, ref prefix, skip_bad_lines,
    dedup), a chunk of lines each, in file order."""
    held_out = not spec.dev or not spec.test  # a split not given as a file is held out of train (`held_sizes`)
    for paths, code in ((spec.train, _HOLDOUT if held_out else _TRAIN), (spec.dev, _DEV), (spec.test, _TEST)):
        if paths:
            where = file_spec(paths)
            fmt, lines = raw_lines(where, spec.skip_bad_lines, spec.max_line_bytes, spec.max_expansion)
            if spec.monolingual == "lines":
                if not isinstance(where, str):
                    raise AttnlabError(f"a text corpus is one file per split, got {list(paths)}")
                fmt = "lines"
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
            if spec.monolingual:  # one side's sentence, as both sides of the record (see StoreSpec)
                k = 2 if spec.monolingual == "src" else 3  # a record is (split, ref, source, target)
                chunk = [(r[0], r[1], r[k], r[k]) for r in chunk]
            for code in sorted({codes[r[0]] for r in chunk}):
                yield _block(code, [(ref, src, tgt) for split, ref, src, tgt in chunk if codes[split] == code],
                             spec.dedup), rendering


def _pair_hash(src: str, tgt: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=8).digest(), "little")


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
    # a monolingual store (no sources given): every source is empty
    s_len, s_ids = _flatten(src_tok.encode_batch(srcs) if srcs else [[]] * len(tgts), np.dtype(dtype))
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
        if len(held):  # the draw of `attnlab.data.corpus.holdout`: runs trained before the store keep their splits
            dev_size, test_size = held_sizes(spec)
            try:
                dev_at, test_at = holdout_indices(len(held), dev_size, test_size, spec.holdout_seed, "pairs")
            except AttnlabError as e:
                raise AttnlabError(f"data.train {spec_name(file_spec(spec.train))}: {e}; lower data.dev_size or "
                                   "data.test_size, or give dev and test files") from None
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
            # the draw of `attnlab.data.corpus.subsample` (runs trained before the store keep their training subset)
            chosen = np.asarray(subsample_indices(len(idx), spec.max_train_pairs, spec.subset_seed), dtype=np.int64)
            keep[:] = False
            keep[idx[chosen]] = True
        self.counts.update(dev=int((codes == _DEV).sum()), test=int((codes == _TEST).sum()),
                           train_read=int(train.sum()), too_long=int(too_long.sum()), bad_ratio=int(bad_ratio.sum()),
                           duplicates=dropped_dup, subsampled_out=n_filtered - int(keep.sum()), train=int(keep.sum()))
        log.info("train: %s pairs read, %s longer than max_words, %s beyond max_ratio, %s duplicates, %s left out by "
                 "max_train_pairs: %s kept; dev %s, test %s", *(f"{self.counts[k]:,}" for k in (
                     "train_read", "too_long", "bad_ratio", "duplicates", "subsampled_out", "train", "dev", "test")))
        if not train.any():
            where = f"data.train {spec_name(file_spec(spec.train))}" if spec.corpus == "files" else "data"
            raise AttnlabError(f"{where}: no training pairs read ({self.counts.get('empty_skipped', 0):,} empty "
                               f"and {self.counts.get('bad_lines_skipped', 0):,} malformed lines skipped)")
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
            keep_src = not self.spec.monolingual  # a monolingual store keeps the sentence once, as the target
            for code, (_, src, tgt) in zip(codes, self._scratch_lines()):
                if code == _TRAIN:
                    if keep_src:
                        srcs.append(src)
                    tgts.append(tgt)
                    if len(tgts) == _CHUNK:
                        yield srcs, tgts, dtype.str
                        srcs, tgts = [], []
            if tgts:
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
    if spec.monolingual:  # the sentences, sampled once (as sources)
        tok = train_tokenizer(cfg, srcs)
        pair = TokenizerPair(tok, tok, joint=True, config=cfg)
    elif fixed_tgt is not None:
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
        row[f"{side}_words_avg"], row[f"{side}_words_max"] = length_stats(words)
    return row


def _build(spec: StoreSpec, staging: Path, key: str, workers: int, fixed: TokenizerPair | None,
           fixed_tgt: Tokenizer | None) -> None:
    """Builds a complete store in `staging` (store.json written last)."""
    build = _Build(spec, staging, workers)
    inputs = [fingerprint(f) for f in input_files(spec)]
    read = build.read()
    t0 = time.perf_counter()
    codes = build.select(*read)
    del read
    need_src = fixed is None
    need_tgt = fixed is None and fixed_tgt is None and not spec.monolingual
    t1 = time.perf_counter()
    joint = spec.tokenizer.joint and fixed_tgt is None and not spec.monolingual
    srcs, tgts, held = build.sample_and_heldout(codes, need_src, need_tgt, joint)
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
        train_row[f"{side}_words_avg"], train_row[f"{side}_words_max"] = length_stats(build.train_words[:, k])
        train_row[f"{side}_tokens_avg"], train_row[f"{side}_tokens_max"] = length_stats(sizes[:, k])
    for split in ("dev", "test"):
        for side in ("src", "tgt"):
            tok = getattr(tokenizers, side)
            lengths = np.array([len(ids) for ids in tok.encode_batch([getattr(p, side) for p in held[split]])],
                               dtype=np.int64)
            stats[split][f"{side}_tokens_avg"], stats[split][f"{side}_tokens_max"] = length_stats(lengths)
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
    if place.exists() and not (place.is_dir() and all(p.name in STORE_ENTRIES for p in place.iterdir())):
        raise AttnlabError(f"{place}: exists and is not a prepared corpus (it holds other files); choose another "
                           "folder")
    make_dirs(place.parent)
    with open_lock_file(place.parent / f".{place.name}.lock", "the store's") as lock:
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
            sync_dir(place.parent)
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
