"""Prepared corpora on disk, as training reads them: the store's files, opening and checking them, and the
training pairs (`StoreDataset`). A store is built by `attnlab.data.prepare` (`attnlab data prepare`, or the first
`attnlab train` of a config).

The layout is fairseq's / Megatron's binarized dataset (`MMapIndexedDataset`: a `.bin` of token ids and an
`.idx` of lengths), with numpy's own `.npy` header for the index. Both can be memory-mapped with numpy
(`np.load(..., mmap_mode="r")`, `np.memmap`); training (`StoreDataset`) holds the index in memory (8 bytes a
pair with the offsets) and reads each pair's ids from the page cache with one positional read::

    STORE/store.json     the manifest: inputs and their fingerprints, settings, counts, statistics, checksums;
                         written last, so a folder without it is not a store
    STORE/tokenizer/     the tokenizers (`attnlab.data.tokenizers.save_tokenizers`), trained on a bounded sample
    STORE/train.bin      the training pairs' token ids, pair after pair: source ids then target ids (no BOS/EOS),
                         uint16 when the vocabulary has at most 65,536 ids, else uint32
    STORE/train.idx      a .npy array (N, 2) of (source length, target length), uint16 or uint32
    STORE/dev.tsv        dev and test pairs as text (ref, source, target): small, and decoded and scored as text
    STORE/test.tsv

A pair's offset in train.bin is the sum of the lengths before it, computed once when the store is opened.
`open_store` checks the files against the manifest's sizes and SHA-256 sums, and the data against itself, so that a
store whose manifest was re-hashed after tampering cannot train on garbage either: the index's lengths must add up
to train.bin's size and every id must be below its side's vocabulary (one numpy pass). A truncated or altered
store is a one-line error that says how to rebuild it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import file_sha256, read_json, write_json
from attnlab.data.corpus import SPLITS, Pair, iter_lines
from attnlab.data.tokenizers import TokenizerPair, load_tokenizers

log = logging.getLogger("attnlab")

STORE_VERSION = 1
MANIFEST = "store.json"
_ID_DTYPES = ("<u2", "<u4")  # train.bin's token ids and train.idx's lengths: uint16 or uint32
class StoreDataset(Dataset):
    """The training pairs of a store: item i is (i, source ids, target ids) as lists (ids without BOS/EOS), as
    `attnlab.data.batching.Seq2SeqDataset` gives them; nothing per pair lives in the Python heap.

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


class RepeatedDataset(Dataset):
    """A dataset whose item i is `base[index[i]]` (each base item once or several times, in any order): the
    training pairs of a Bible store with `data.english_weights`. Its lengths are the base's, indexed alike."""

    def __init__(self, base: StoreDataset, index: np.ndarray) -> None:
        self.base, self.index = base, index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[int, list[int], list[int]]:
        return self.base[int(self.index[i])]

    def lengths(self) -> np.ndarray:
        return self.base.lengths()[self.index]


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

    def train_data(self, weights: Sequence[int] = ()) -> StoreDataset | RepeatedDataset:
        """The training pairs; with `weights` (a Bible store of several English renderings: one count per
        rendering, in `data.english`'s order) each rendering's pairs appear that many times an epoch."""
        data = StoreDataset(self.path / "train.bin", self.path / "train.idx", self.manifest["train"]["dtype"])
        if all(w == 1 for w in weights):
            return data
        counts = [c["train"] for c in self.manifest["counts"].get("renderings", {}).values()]
        if len(counts) != len(weights):
            raise AttnlabError(f"data.english_weights: {list(weights)} gives {len(weights)} weight(s), the corpus "
                               f"has {len(counts)} English rendering(s) with training pairs")
        if sum(counts) != len(data):  # the pairs are stored rendering after rendering (attnlab.data.prepare)
            raise AttnlabError(f"{self.path}: {len(data):,} training pairs where the renderings' counts add up to "
                               f"{sum(counts):,}; {_REBUILD}")
        ends = np.cumsum([0, *counts])
        index = np.concatenate([np.tile(np.arange(a, b, dtype=np.int64), w)
                                for a, b, w in zip(ends[:-1], ends[1:], weights)])
        return RepeatedDataset(data, index)

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

    def held_digests(self) -> dict[str, str]:
        """The SHA-256 of the dev and test splits' files, as the manifest records them (`record_splits`)."""
        files = self.manifest["files"]
        return {split: files[f"{split}.tsv"]["sha256"] for split in ("dev", "test")}

    def stats(self) -> dict:
        """Pairs per split and lengths (words for dev/test, tokens for all), the vocabulary, the filter counts."""
        m = self.manifest
        return {"corpus": m["name"], "counts": m["counts"], "splits": m["stats"], "vocab": m["vocab"],
                "store": str(self.path), "store_bytes_per_token": self.bytes_per_token()}

    def bytes_per_token(self) -> float:
        size = (self.path / "train.bin").stat().st_size + (self.path / "train.idx").stat().st_size
        return size / max(self.manifest["train"]["tokens"], 1)


SPLITS_RECORD = "splits.json"  # in a run folder: the dev and test splits it was trained beside (`record_splits`)


def record_splits(store: Store, run_dir: Path) -> None:
    """Writes RUN_DIR/splits.json, the digests of the dev and test splits of the store a new run trains on, for
    `check_splits` to compare the splits it is later evaluated on with."""
    write_json(Path(run_dir) / SPLITS_RECORD, store.held_digests(), run_dir)


def check_splits(store: Store, run_dir: Path, split: str) -> None:
    """Compares a store's dev or test split with the one the run recorded at training (`record_splits`; a run
    without the record, trained before it or shipped, passes). A split drawn at random out of the training corpus
    (a files corpus without that split's file, as the store's spec says) that differs was drawn again from changed
    corpus files, so it can hold pairs the run trained on: refused. A split given as a file that differs is the
    user's new one: logged."""
    path = Path(run_dir) / SPLITS_RECORD
    if split not in ("dev", "test") or not path.is_file():
        return
    record = read_json(path)
    if not isinstance(record, dict):
        raise AttnlabError(f"{path}: not the record attnlab writes (a JSON object of the splits' digests)")
    recorded = record.get(split)
    if recorded is None or recorded == store.held_digests()[split]:
        return
    spec = store.manifest.get("spec", {})
    if spec.get("corpus") == "files" and not spec.get(split):
        raise AttnlabError(f"{run_dir}: the {split} split, held out of the corpus at random, is not the one this run "
                           f"was trained beside: the corpus files changed since, so the {split} pairs drawn now can "
                           "be training pairs of the run; evaluate it on the corpus files as they were")
    log.warning("%s: the %s split differs from the one the run was trained beside (its file changed)", run_dir, split)


STORE_ENTRIES = {MANIFEST, "tokenizer", "train.bin", "train.idx", "dev.tsv", "test.tsv"}  # a store's own files
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
    except Exception:  # noqa: BLE001  numpy parses the .npy header with ast: ValueError, SyntaxError, TokenError...
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
