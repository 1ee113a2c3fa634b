"""Which on-disk format for a prepared corpus's training ids (issue 20): numpy memory-mapped files in fairseq's /
Megatron's `.bin` + `.idx` layout (attnlab's `StoreDataset`) against Apache Arrow (pyarrow), on the same token ids.

Formats, all written from the same in-memory arrays (each side's ids flat, uint16, and the (N, 2) lengths):

- memmap: train.bin (per pair its source ids then its target ids) + train.idx (.npy (N, 2) of lengths), read by
  `attnlab.data.store.StoreDataset` (offsets are a cumsum computed at open);
- arrow: one uncompressed Arrow IPC file (one record batch) with two `list<uint16>` columns src and tgt,
  memory-mapped with `pa.memory_map` + `pa.ipc.open_file`; read two ways: `arrow` through pyarrow's own
  accessors (`col[i].as_py()`, `col.take(idx).to_pylist()`), `arrow-np` through numpy views of the list
  columns' offsets and values buffers (zero-copy; what a hand-written Arrow reader would do);
- hf: Hugging Face `datasets` (`Dataset` over the same Arrow table, `save_to_disk`, `load_from_disk`, python
  format: `ds[i]`, `ds[indices]`, `ds.iter`); skipped if `datasets` is not importable.

Measured per format:

- bytes on disk per token (every file of the format, data and index);
- write: seconds from the arrays to durable files (layout work included, fsync included; median of up to 3);
- open: seconds until the first item is read, in a fresh process, with the files in the page cache (warm) and
  evicted from it first with posix_fadvise(DONTNEED) on the format's own files (cold); the RSS (VmRSS, RssAnon,
  RssFile from /proc/self/status) after imports, after open, after random access and after the scan;
- lengths: seconds to get the (N, 2) lengths the batch sampler needs;
- random access: mean microseconds per item over 100,000 random indices, the item returned as
  (index, source id list, target id list): what the trainer's collate takes;
- batch: mean microseconds per batch of 100 random items (1,000 batches), items as above;
- scan: seconds to read every item in order as Python lists.

Each format's reading is measured in its own fresh process, one after another (never concurrently); every child
imports the same modules (numpy, torch, pyarrow, attnlab.data.store; datasets for hf) before its baseline RSS. Random
access, batch and scan are repeated (--repeats) and the median is reported (all runs are in the JSON). All items
read are checked equal to the source's on a sample of indices.

Usage:
    python benchmarks/store_format.py --store /work/scale/store1m --json docs/results/issue20_store_format.json
    python benchmarks/store_format.py --pairs 668785          # synthetic ids, lengths ~27 tokens per side
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, machine, write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FORMATS = ("memmap", "memmap-nd", "arrow", "arrow-np", "hf")
FILES = {"memmap": "memmap", "memmap-nd": "memmap", "arrow": "arrow", "arrow-np": "arrow", "hf": "hf"}  # -> folder


# ---------------------------------------------------------------------------------------------- input ids
def load_source(store: Path | None, pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(source ids flat, target ids flat, lengths (N, 2) uint16, description): a prepared store's training ids, or
    synthetic ids (vocabulary 8,000, lengths 3 + Poisson(24) per side, capped at 79)."""
    if store is not None:
        manifest = json.loads((store / "store.json").read_text())
        if manifest["train"]["dtype"] != "<u2":
            raise SystemExit(f"{store}: ids are {manifest['train']['dtype']}; this benchmark handles uint16 stores")
        tokens = np.fromfile(store / "train.bin", dtype=np.uint16)
        sizes = np.load(store / "train.idx", allow_pickle=False).astype(np.uint16)
        s_len, t_len = sizes[:, 0].astype(np.int64), sizes[:, 1].astype(np.int64)
        s_off = np.concatenate([[0], np.cumsum(s_len)])
        t_off = np.concatenate([[0], np.cumsum(t_len)])
        pos = s_off[:-1] + t_off[:-1]
        src = tokens[np.repeat(pos - s_off[:-1], s_len) + np.arange(int(s_off[-1]))]
        tgt = tokens[np.repeat(pos + s_len - t_off[:-1], t_len) + np.arange(int(t_off[-1]))]
        what = {"source": str(store), "name": manifest.get("name"), "vocab": manifest["vocab"]}
    else:
        rng = np.random.default_rng(seed)
        sizes = np.minimum(3 + rng.poisson(24, size=(pairs, 2)), 79).astype(np.uint16)
        src = rng.integers(4, 8000, size=int(sizes[:, 0].sum(dtype=np.int64)), dtype=np.uint16)
        tgt = rng.integers(4, 8000, size=int(sizes[:, 1].sum(dtype=np.int64)), dtype=np.uint16)
        what = {"source": f"synthetic (seed {seed})", "vocab": 8000}
    return src, tgt, sizes, what


# ---------------------------------------------------------------------------------------------- writers
def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_memmap(out: Path, src: np.ndarray, tgt: np.ndarray, sizes: np.ndarray) -> None:
    """train.bin (per pair source ids then target ids) and train.idx, as attnlab.data.store writes them."""
    s_len, t_len = sizes[:, 0].astype(np.int64), sizes[:, 1].astype(np.int64)
    s_off = np.concatenate([[0], np.cumsum(s_len)])
    t_off = np.concatenate([[0], np.cumsum(t_len)])
    flat = np.empty(len(src) + len(tgt), dtype=np.uint16)
    pos = s_off[:-1] + t_off[:-1]
    flat[np.repeat(pos - s_off[:-1], s_len) + np.arange(len(src))] = src
    flat[np.repeat(pos + s_len - t_off[:-1], t_len) + np.arange(len(tgt))] = tgt
    with open(out / "train.bin", "wb") as f:
        flat.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    with open(out / "train.idx", "wb") as f:
        np.save(f, sizes, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def arrow_table(src: np.ndarray, tgt: np.ndarray, sizes: np.ndarray):
    """A pyarrow table of two list<uint16> columns over the arrays (values zero-copy, offsets int32)."""
    import pyarrow as pa

    cols = []
    for side, values in enumerate((src, tgt)):
        offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
        np.cumsum(sizes[:, side], out=offsets[1:], dtype=np.int32)
        cols.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.uint16())))
    return pa.table({"src": cols[0], "tgt": cols[1]})


def write_arrow(out: Path, src: np.ndarray, tgt: np.ndarray, sizes: np.ndarray) -> None:
    import pyarrow as pa

    table = arrow_table(src, tgt, sizes)
    path = out / "train.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:  # uncompressed
        writer.write_table(table, max_chunksize=len(sizes) or None)  # one record batch
    _fsync(path)


def write_hf(out: Path, src: np.ndarray, tgt: np.ndarray, sizes: np.ndarray) -> None:
    """A `datasets.Dataset` over the same Arrow table (not from Python lists, which is far slower), saved."""
    import datasets
    from datasets.table import InMemoryTable

    ds = datasets.Dataset(InMemoryTable(arrow_table(src, tgt, sizes)))
    ds.save_to_disk(str(out / "ds"))
    for f in (out / "ds").iterdir():
        _fsync(f)


WRITERS = {"memmap": write_memmap, "arrow": write_arrow, "hf": write_hf}


# ---------------------------------------------------------------------------------------------- readers
class MemmapReader:
    def __init__(self, folder: Path) -> None:
        from attnlab.data.store import StoreDataset

        self.ds = StoreDataset(folder / "train.bin", folder / "train.idx", "<u2")
        self.item = self.ds.__getitem__  # StoreDataset's own, called as the DataLoader calls it

    def __len__(self) -> int:
        return len(self.ds)

    def batch(self, idx: list[int]) -> list:
        return [self.item(i) for i in idx]

    def lengths(self) -> np.ndarray:
        return np.asarray(self.ds.sizes)

    def scan(self) -> int:
        n = 0
        for i in range(len(self.ds)):
            n += len(self.item(i)[1])
        return n


class MemmapNdReader(MemmapReader):
    """The same files and the same item code as StoreDataset, over plain ndarray views of its np.memmap arrays
    (slicing an np.memmap makes a memmap subclass object, whose Python-level __array_finalize__ costs per item)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.tokens = self.ds.tokens.view(np.ndarray)
        self.sizes = np.asarray(self.ds.sizes).view(np.ndarray)
        self.offsets = self.ds.offsets
        self.item = self._item

    def _item(self, i: int) -> tuple[int, list[int], list[int]]:
        start = int(self.offsets[i])
        s, t = int(self.sizes[i, 0]), int(self.sizes[i, 1])
        ids = self.tokens[start:start + s + t].tolist()
        return i, ids[:s], ids[s:]

    def lengths(self) -> np.ndarray:
        return self.sizes


def _list_views(col) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of an unsliced list<uint16> array without nulls, as numpy views of its Arrow buffers
    (np.frombuffer: zero-copy; pyarrow's to_numpy would import pandas on first use)."""
    if col.offset or col.null_count or col.values.offset:
        raise ValueError("a sliced or nullable list column")
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32, count=len(col) + 1)
    values = np.frombuffer(col.values.buffers()[1], dtype=np.uint16, count=len(col.values))
    return offsets, values


class ArrowReader:
    """pyarrow's own accessors: scalar `.as_py()` per item, `take(...).to_pylist()` per batch, record-batch slices
    `.to_pylist()` for the scan."""

    def __init__(self, folder: Path) -> None:
        import pyarrow as pa

        self.mm = pa.memory_map(str(folder / "train.arrow"), "r")
        reader = pa.ipc.open_file(self.mm)
        self.batch_ = reader.get_batch(0) if reader.num_record_batches else None
        self.src, self.tgt = (self.batch_.column(0), self.batch_.column(1)) if self.batch_ is not None else ([], [])
        self.n = self.batch_.num_rows if self.batch_ is not None else 0

    def __len__(self) -> int:
        return self.n

    def item(self, i: int) -> tuple[int, list[int], list[int]]:
        return i, self.src[i].as_py(), self.tgt[i].as_py()

    def batch(self, idx: list[int]) -> list:
        import pyarrow as pa

        where = pa.array(idx, type=pa.int64())
        return list(zip(idx, self.src.take(where).to_pylist(), self.tgt.take(where).to_pylist()))

    def lengths(self) -> np.ndarray:
        return np.stack([np.diff(_list_views(self.src)[0]), np.diff(_list_views(self.tgt)[0])], axis=1)

    def scan(self, step: int = 8192) -> int:
        n = 0
        for a in range(0, self.n, step):
            part = self.batch_.slice(a, step)
            for s, t in zip(part.column(0).to_pylist(), part.column(1).to_pylist()):
                n += len(s)
        return n


class ArrowNumpyReader(ArrowReader):
    """The same mapped Arrow file read through numpy views of the list columns' buffers (zero-copy)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        if self.n:
            self.so, self.sv = _list_views(self.src)
            self.to, self.tv = _list_views(self.tgt)

    def item(self, i: int) -> tuple[int, list[int], list[int]]:
        so, to = self.so, self.to
        return i, self.sv[so[i]:so[i + 1]].tolist(), self.tv[to[i]:to[i + 1]].tolist()

    def batch(self, idx: list[int]) -> list:
        return [self.item(i) for i in idx]

    def lengths(self) -> np.ndarray:
        return np.stack([np.diff(self.so), np.diff(self.to)], axis=1)

    def scan(self) -> int:
        n = 0
        for i in range(self.n):
            n += len(self.item(i)[1])
        return n


class HFReader:
    def __init__(self, folder: Path) -> None:
        import datasets

        self.ds = datasets.load_from_disk(str(folder / "ds"))

    def __len__(self) -> int:
        return len(self.ds)

    def item(self, i: int) -> tuple[int, list[int], list[int]]:
        row = self.ds[i]
        return i, row["src"], row["tgt"]

    def batch(self, idx: list[int]) -> list:
        rows = self.ds[idx]
        return list(zip(idx, rows["src"], rows["tgt"]))

    def lengths(self) -> np.ndarray:
        import pyarrow.compute as pc

        return np.stack([pc.list_value_length(self.ds.data.column(c)).to_numpy() for c in ("src", "tgt")], axis=1)

    def scan(self) -> int:
        n = 0
        for rows in self.ds.iter(batch_size=1000):
            for s, t in zip(rows["src"], rows["tgt"]):
                n += len(s)
        return n


READERS = {"memmap": MemmapReader, "memmap-nd": MemmapNdReader, "arrow": ArrowReader, "arrow-np": ArrowNumpyReader, "hf": HFReader}


# ---------------------------------------------------------------------------------------------- child process
def rss() -> dict:
    """VmRSS, RssAnon, RssFile of this process in MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def format_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def child(fmt: str, folder: Path, cold: bool, n_items: int, n_batches: int, repeats: int, seed: int,
          check: Path) -> dict:
    """Open the format (timed, until the first item is read) and, unless cold, measure lengths, random access,
    batches and the scan; returns the numbers."""
    import pyarrow  # noqa: F401  (every child imports the same modules before its baseline)
    import torch  # noqa: F401

    import attnlab.data.store  # noqa: F401

    if fmt == "hf":
        import datasets

        datasets.disable_progress_bars()
    res: dict = {"format": fmt, "rss_imports_mb": rss()}
    if cold:
        for f in format_files(folder):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    t0 = time.perf_counter()
    reader = READERS[fmt](folder)
    first = reader.item(0)
    res["open_s"] = time.perf_counter() - t0
    res["rss_open_mb"] = rss()
    if cold:
        return res
    n = len(reader)
    expected = np.load(check, allow_pickle=True).item()  # {index: (src list, tgt list)}
    for i, (s, t) in expected.items():
        got = reader.item(int(i))
        if got != (int(i), s, t):
            raise SystemExit(f"{fmt}: item {i} differs from the source")
    for (j, s, t), i in zip(reader.batch([int(k) for k in expected]), expected):
        if (j, s, t) != (int(i), *expected[i]):
            raise SystemExit(f"{fmt}: batch item {i} differs from the source")
    assert first[0] == 0
    t0 = time.perf_counter()
    lengths = reader.lengths()
    res["lengths_s"] = time.perf_counter() - t0
    assert lengths.shape == (n, 2)

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=n_items).tolist()
    item = reader.item
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in idx:
            item(i)
        runs.append((time.perf_counter() - t0) / len(idx) * 1e6)
    res["item_us_runs"] = [round(r, 3) for r in runs]
    res["item_us"] = statistics.median(runs)

    batches = rng.integers(0, n, size=(n_batches, 100)).tolist()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for b in batches:
            reader.batch(b)
        runs.append((time.perf_counter() - t0) / len(batches) * 1e6)
    res["batch100_us_runs"] = [round(r, 2) for r in runs]
    res["batch100_us"] = statistics.median(runs)
    res["rss_random_mb"] = rss()

    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = reader.scan()
        runs.append(time.perf_counter() - t0)
    assert tokens == int(lengths[:, 0].sum(dtype=np.int64)), (fmt, tokens)
    res["scan_s_runs"] = [round(r, 3) for r in runs]
    res["scan_s"] = statistics.median(runs)
    res["rss_scan_mb"] = rss()
    return res


def run_child(fmt: str, folder: Path, cold: bool, args: argparse.Namespace, check: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", fmt, "--child-dir", str(folder),
           "--check", str(check), "--items", str(args.items), "--batches", str(args.batches),
           "--repeats", str(args.repeats), "--seed", str(args.seed)] + (["--cold"] if cold else [])
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_DATASETS_CACHE=str(folder.parent / "hf_cache"), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{fmt} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- main
def machine_and_run() -> dict:
    """`common.machine` with the versions of the formats' libraries, and the keys this benchmark's JSON has had
    from the start: nproc, loadavg_start (`main` adds loadavg_end), the date, the commit and the command."""
    m = machine("numpy", "pyarrow", "datasets")
    return {**m, "nproc": m["usable_cores"], "loadavg_start": m["load_average"],
            "date": datetime.date.today().isoformat(), "commit": commit(),
            "command": " ".join([Path(sys.executable).name, *sys.argv])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--store", type=Path, help="a prepared store (attnlab data prepare) whose training ids to use")
    p.add_argument("--pairs", type=int, default=668_785, help="synthetic pairs when no --store (default 668,785)")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    p.add_argument("--items", type=int, default=100_000, help="random indices for the per-item timing")
    p.add_argument("--batches", type=int, default=1000, help="random batches of 100 items")
    p.add_argument("--repeats", type=int, default=3, help="runs of random access, batches and scan (median kept)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, help="where the formats are written (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the written files")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--child", choices=FORMATS, help=argparse.SUPPRESS)
    p.add_argument("--child-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--check", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child:
        res = child(args.child, args.child_dir, args.cold, args.items, args.batches, args.repeats, args.seed,
                    args.check)
        print(json.dumps(res))
        return

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    for f in formats:
        if f not in FORMATS:
            raise SystemExit(f"unknown format {f!r}; choose of {', '.join(FORMATS)}")
    if "hf" in formats:
        try:
            import datasets

            datasets.disable_progress_bars()
        except ImportError:
            print("datasets is not installed: hf skipped", file=sys.stderr)
            formats.remove("hf")

    src, tgt, sizes, what = load_source(args.store, args.pairs, args.seed)
    n, n_tokens = len(sizes), len(src) + len(tgt)
    print(f"{n:,} pairs, {n_tokens:,} tokens ({n_tokens / max(n, 1):.1f} per pair) from {what['source']}")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="store_format-"))
    work.mkdir(parents=True, exist_ok=True)

    rng = np.random.default_rng(args.seed + 1)
    s_off = np.concatenate([[0], np.cumsum(sizes[:, 0], dtype=np.int64)])
    t_off = np.concatenate([[0], np.cumsum(sizes[:, 1], dtype=np.int64)])
    sample = {int(i): (src[s_off[i]:s_off[i + 1]].tolist(), tgt[t_off[i]:t_off[i + 1]].tolist())
              for i in rng.integers(0, n, size=min(n, 1000))}
    sample[0] = (src[:s_off[1]].tolist(), tgt[:t_off[1]].tolist())
    sample[n - 1] = (src[s_off[n - 1]:].tolist(), tgt[t_off[n - 1]:].tolist())
    check = work / "check.npy"
    np.save(check, np.array(sample, dtype=object), allow_pickle=True)

    results: dict = {"machine": machine_and_run(), "data": {**what, "pairs": n, "tokens": n_tokens},
                     "settings": {"items": args.items, "batches_of_100": args.batches, "repeats": args.repeats,
                                  "seed": args.seed, "page_cache": "warm unless named cold; cold: posix_fadvise "
                                  "DONTNEED on the format's files before a fresh process opens them"},
                     "formats": {}}
    try:
        for fmt in formats:
            folder = work / FILES[fmt]
            rec: dict = {}
            if FILES[fmt] == fmt or not folder.is_dir():  # arrow-np reads the arrow files
                runs = []
                for _ in range(min(args.repeats, 3)):
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir()
                    t0 = time.perf_counter()
                    WRITERS[FILES[fmt]](folder, src, tgt, sizes)
                    runs.append(time.perf_counter() - t0)
                rec["write_s_runs"] = [round(r, 3) for r in runs]
                rec["write_s"] = statistics.median(runs)
            files = format_files(folder)
            rec["files"] = {str(f.relative_to(folder)): f.stat().st_size for f in files}
            rec["bytes"] = sum(rec["files"].values())
            rec["bytes_per_token"] = rec["bytes"] / n_tokens
            for f in files:  # into the page cache for the warm runs
                with open(f, "rb") as fh:
                    while fh.read(1 << 24):
                        pass
            rec["cold"] = run_child(fmt, folder, True, args, check)
            rec.update(run_child(fmt, folder, False, args, check))
            rec["open_cold_s"] = rec.pop("cold")["open_s"]
            results["formats"][fmt] = rec
            print(f"  {fmt}: done", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    sys.stderr.flush()
    print_table(results)
    if args.json:
        write_json(args.json, results)
        print(f"wrote {args.json}")


def print_table(results: dict) -> None:
    m, d = results["machine"], results["data"]
    print(f"\n{d['pairs']:,} pairs, {d['tokens']:,} tokens; {m['cpu']}, {m['nproc']} CPUs; {m['date']}, "
          f"commit {m['commit']}; load {m['loadavg_start'][0]}..{m['loadavg_end'][0]}; numpy {m['numpy']}, pyarrow {m['pyarrow']}, datasets {m['datasets']}")
    head = (f"{'format':<9} {'B/token':>8} {'write s':>8} {'open ms':>8} {'cold ms':>8} {'RSS+ MB':>8} "
            f"{'anon+ MB':>8} {'len ms':>7} {'item us':>8} {'b100 us':>8} {'scan s':>7} {'scanRSS':>8}")
    print(head)
    print("-" * len(head))
    for fmt, r in results["formats"].items():
        base = r["rss_imports_mb"]
        write = f"{r['write_s']:.2f}" if "write_s" in r else "(same)"
        print(f"{fmt:<9} {r['bytes_per_token']:>8.3f} {write:>8} {r['open_s'] * 1e3:>8.1f} "
              f"{r['open_cold_s'] * 1e3:>8.1f} {r['rss_open_mb']['VmRSS'] - base['VmRSS']:>8.1f} "
              f"{r['rss_open_mb']['RssAnon'] - base['RssAnon']:>8.1f} {r['lengths_s'] * 1e3:>7.1f} "
              f"{r['item_us']:>8.2f} {r['batch100_us']:>8.1f} {r['scan_s']:>7.2f} "
              f"{r['rss_scan_mb']['VmRSS'] - base['VmRSS']:>8.1f}")
    print("B/token: all files over all tokens; open/cold: until the first item is read (page cache warm / evicted);"
          "\nRSS+/anon+: VmRSS/RssAnon after open minus after imports; len: the (N, 2) lengths; item: per random item;"
          "\nb100: per batch of 100 random items; scan: every item in order; scanRSS: VmRSS after the scan minus "
          "after imports")


if __name__ == "__main__":
    main()
