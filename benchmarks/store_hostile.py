"""Hostile inputs for the prepared store and its readers (issue 36, item 5), each run through the CLI as its own
`attnlab` process: `attnlab data prepare CONFIG` on a hostile input file, `attnlab train CONFIG` on a store whose
manifest was re-hashed after tampering, and `attnlab data prepare --force` on a store folder whose files are
symlinks to decoys. Per case it prints the exit code, whether a Python traceback appeared, the one line that
matters (the error, or the reading counts of a store that was built), the peak memory (RSS) and the wall time.

    python benchmarks/store_hostile.py --work /tmp/store_hostile | tee docs/results/issue36/store_hostile.txt
    python benchmarks/store_hostile.py --src /tmp/old/src   # the attnlab of another checkout (before/after)

The big inputs are generated on the fly under --work and removed after: a 100 MB single line, and a 1 MB .gz that
expands to 1 GiB of newlines. Every process gets a 6 GB address-space limit (an allocation past it fails at once
instead of swapping), one torch thread and a private ATTNLAB_CACHE.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit  # noqa: E402

WORDS = {"the": "la", "house": "casa", "is": "es", "big": "grande", "small": "pequeña", "red": "roja", "a": "una",
         "cat": "gata", "sees": "ve", "and": "y", "old": "vieja", "my": "mi", "door": "puerta"}
ADDRESS_SPACE = 6 << 30
SRC: Path | None = None  # --src: the attnlab package folder's parent to run instead of the installed one


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(sorted(WORDS)) for _ in range(rng.randint(2, 6))]
        out.append((" ".join(words), " ".join(WORDS[w] for w in reversed(words))))
    return out


def tsv(rows: list[tuple[str, str]]) -> str:
    return "".join(f"{s}\t{t}\n" for s, t in rows)


def write_config(path: Path, train: list[str], dev: Path, test: Path, store: Path, tokenizer: str = "char",
                 **data) -> Path:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in data.items())
    vocab = "vocab_size = 300\n" if tokenizer != "char" else ""
    path.write_text(f"""[data]
corpus = "files"
train = {json.dumps(train)}
dev = {json.dumps([str(dev)])}
test = {json.dumps([str(test)])}
store = {json.dumps(str(store))}
{extra}[tokenizer]
kind = "{tokenizer}"
{vocab}[model.rnn]
cell = "gru"
emb_dim = 16
hidden_dim = 32
[train]
max_steps = 2
max_tokens = 600
eval_every = 2
eval_bleu = false
num_threads = 1
progress = false
device = "cpu"
keep_last = 1
""", encoding="utf-8")
    return path


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.setsid()


def run(argv: list[str], work: Path, timeout: float) -> dict:
    """One `attnlab` process: exit code (None: killed at the timeout), stdout, stderr, peak RSS (MB), seconds."""
    env = dict(os.environ, ATTNLAB_CACHE=str(work / "cache"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("ATTNLAB_RAISE_INTERNAL", None)
    if SRC is not None:
        env["PYTHONPATH"] = str(SRC)
    out, err = work / "stdout.txt", work / "stderr.txt"
    t0 = time.perf_counter()
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", *argv], stdout=o, stderr=e, env=env,
                                preexec_fn=_limits)
        rc, usage = None, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = rc if rc is not None else -9
    seconds = time.perf_counter() - t0
    return {"rc": rc, "stdout": out.read_text("utf-8", "replace"), "stderr": err.read_text("utf-8", "replace"),
            "peak_mb": usage.ru_maxrss / 1024, "seconds": seconds}


def line_of(result: dict, want: str = "") -> str:
    """The line that matters: the error line, else the line of stdout or stderr holding `want`."""
    lines = [ln for ln in result["stderr"].splitlines() if ln.strip()]
    if result["rc"] not in (0, None) and lines:
        return lines[-1][:300]
    if want:
        for ln in (result["stdout"] + "\n" + result["stderr"]).splitlines():
            if want in ln:
                return ln.strip()[:300]
    return (lines[-1] if lines else "(no output)")[:300]


def report(family: str, case: str, result: dict, want: str = "", extra: str = "") -> None:
    rc = "killed at timeout" if result["rc"] is None else str(result["rc"])
    traceback = "yes" if "Traceback" in result["stderr"] else "no"
    print(f"[{family}] {case}\n    exit {rc}; traceback: {traceback}; peak RSS {result['peak_mb']:,.0f} MB; "
          f"{result['seconds']:.1f} s{extra}\n    {line_of(result, want)}", flush=True)


# ---------------------------------------------------------------------------------------------- families
def prepare_case(work: Path, family: str, case: str, train: list[str], timeout: float = 300, want: str = "skipped",
                 **data) -> dict:
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    cfg = write_config(work / "c.toml", train, work / "dev.tsv", work / "test.tsv", store, **data)
    result = run(["data", "prepare", str(cfg), "--out", str(store)], work, timeout)
    report(family, case, result, want)
    return result


def long_line(work: Path, size: int) -> None:
    path = work / "long.tsv"
    good = pairs(200, 3)
    with open(path, "w", encoding="utf-8") as f:
        f.write(tsv(good[:2]))
        chunk = "the house " * 100_000  # 1 MB
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.write("\tla casa\n")
        f.write(tsv(good[2:]))
    name = f"a {size / 1e6:.0f} MB single line (line 3)"
    prepare_case(work, "long line", name, [str(path)])
    prepare_case(work, "long line", name + ", skip_bad_lines = true", [str(path)], skip_bad_lines=True)
    prepare_case(work, "long line", name + ", a unigram tokenizer", [str(path)], tokenizer="unigram")
    path.unlink()


def jsonl(work: Path) -> None:
    good = [json.dumps({"src": s, "tgt": t}) for s, t in pairs(200, 4)]
    for name, line in (("a lone surrogate escape \\ud800 (line 2)", '{"src": "a \\ud800 b", "tgt": "la"}'),
                       ("100,000 nested arrays (line 2)", "[" * 100_000 + "]" * 100_000),
                       ("30,000 nested arrays (line 2, 60 KB: under max_line_bytes)", "[" * 30_000 + "]" * 30_000),
                       ("100,000 nested arrays inside a pair (line 2)",
                        '{"src": "a", "tgt": "b", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")):
        path = work / "hostile.jsonl"
        path.write_text("\n".join([good[0], line, *good[1:]]) + "\n", encoding="utf-8")
        prepare_case(work, "JSON lines", name, [str(path)])
        prepare_case(work, "JSON lines", name + ", skip_bad_lines = true", [str(path)], skip_bad_lines=True)


def invalid_utf8(work: Path) -> None:
    good = pairs(200, 5)
    path = work / "latin1.tsv"
    path.write_bytes(tsv(good[:3]).encode() + "señor\tsir\n".encode("latin-1") + tsv(good[3:]).encode())
    prepare_case(work, "invalid UTF-8", "a Latin-1 line (line 4)", [str(path)])
    prepare_case(work, "invalid UTF-8", "a Latin-1 line (line 4), skip_bad_lines = true", [str(path)],
                 skip_bad_lines=True)
    src, tgt = work / "train.en", work / "train.es"
    src.write_bytes("".join(s + "\n" for s, _ in good[:3]).encode() + b"\xff\xfe bad\n"
                    + "".join(s + "\n" for s, _ in good[4:]).encode())  # line 4 replaced: still aligned
    tgt.write_text("".join(t + "\n" for _, t in good), encoding="utf-8")
    prepare_case(work, "invalid UTF-8", "aligned files, a bad byte in the source file (line 4), skip_bad_lines = "
                 "true", [str(src), str(tgt)], skip_bad_lines=True)


def not_regular(work: Path) -> None:
    folder = work / "a-folder.tsv"
    folder.mkdir(exist_ok=True)
    fifo = work / "a-fifo.tsv"
    if not fifo.exists():
        os.mkfifo(fifo)
    for name, path in (("a folder", folder), ("a FIFO", fifo), ("/dev/zero", Path("/dev/zero")),
                       ("/dev/null", Path("/dev/null")), ("a missing file", work / "missing.tsv")):
        prepare_case(work, "not a regular file", f"{name} as data.train", [str(path)], timeout=60)
    shutil.rmtree(folder)
    fifo.unlink()


def gz_bomb(work: Path, expanded: int, allowed_seconds: float) -> None:
    path = work / "bomb.tsv.gz"
    block = b"\n" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(tsv(pairs(50, 6)).encode())
        for _ in range(expanded >> 20):
            f.write(block)
    name = f"a {path.stat().st_size / 1e6:.1f} MB .gz of {expanded / 2**30:.0f} GiB of newlines"
    prepare_case(work, "decompression", name, [str(path)], timeout=150)
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    cfg = write_config(work / "c.toml", [str(path)], work / "dev.tsv", work / "test.tsv", store, max_expansion=0)
    result = run(["data", "prepare", str(cfg), "--out", str(store)], work, allowed_seconds)
    progress = [ln for ln in result["stderr"].splitlines() if "reading" in ln and "%" in ln]
    report("decompression", name + ", data.max_expansion = 0 (allowed)", result, "reading",
           f"; progress lines: {len(progress)}")
    if progress:
        print(f"    last progress line: {progress[-1].strip()[:200]}")
    path.unlink()


# ---------------------------------------------------------------------------------------------- stores
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rehash(store: Path) -> None:
    """What a tamperer who knows the format does: the manifest's sizes and checksums made to match the files."""
    m = json.loads((store / "store.json").read_text())
    m["train"]["bin_sha256"], m["train"]["idx_sha256"] = _sha(store / "train.bin"), _sha(store / "train.idx")
    m["train"]["tokens"] = (store / "train.bin").stat().st_size // np.dtype(m["train"]["dtype"]).itemsize
    (store / "store.json").write_text(json.dumps(m))


def _edit_index(edit):
    def damage(store: Path) -> None:
        sizes = np.load(store / "train.idx")
        edit(sizes)
        with open(store / "train.idx", "wb") as f:
            np.save(f, sizes)
    return damage


def _edit_ids(edit):
    def damage(store: Path) -> None:
        m = json.loads((store / "store.json").read_text())
        ids = np.fromfile(store / "train.bin", dtype=m["train"]["dtype"])
        edit(ids, m)
        ids.tofile(store / "train.bin")
    return damage


TAMPER = {
    "an index entry pointing past the end of train.bin": _edit_index(lambda s: s.__setitem__((5, 0), 60_000)),
    "all index lengths 0": _edit_index(lambda s: s.fill(0)),
    "index lengths shifted between two pairs, same total (a consistent store: no check can tell)": _edit_index(
        lambda s: (s.__setitem__((0, 0), s[0, 0] + s[1, 0] - 1), s.__setitem__((1, 0), 1))),
    "a token id above the source vocabulary": _edit_ids(lambda ids, m: ids.__setitem__(3, m["vocab"]["src"] + 7)),
    "a token id at the largest value of its dtype": _edit_ids(
        lambda ids, m: ids.__setitem__(-1, np.iinfo(ids.dtype).max)),
}


def tampered_stores(work: Path) -> None:
    train = work / "train.tsv"
    clean = work / "clean-store"
    cfg = write_config(work / "c.toml", [str(train)], work / "dev.tsv", work / "test.tsv", clean)
    result = run(["data", "prepare", str(cfg), "--out", str(clean)], work, 300)
    assert result["rc"] == 0, result["stderr"]
    for name, damage in TAMPER.items():
        store = work / "store"
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(clean, store)
        damage(store)
        _rehash(store)
        cfg = write_config(work / "c.toml", [str(train)], work / "dev.tsv", work / "test.tsv", store)
        shutil.rmtree(work / "run", ignore_errors=True)
        result = run(["train", str(cfg), "--out", str(work / "run")], work, 300)
        report("tampered store, manifest re-hashed", f"{name}: attnlab train", result, "step")
    shutil.rmtree(clean)


STORE_ENTRIES = ("store.json", "train.bin", "train.idx", "dev.tsv", "test.tsv", "tokenizer",
                 "tokenizer/tokenizer.json")


def symlink_decoys(work: Path) -> None:
    """Each file and folder a store folder holds (and the lock beside it) a symlink to a decoy; `data prepare
    --force` must write none of the decoys."""
    train = work / "train.tsv"
    decoys = work / "decoys"
    for position in (*STORE_ENTRIES, "the store folder itself", "the store folder itself (holding store names)",
                     "lock file beside the store"):
        shutil.rmtree(decoys, ignore_errors=True)
        decoys.mkdir()
        (decoys / "file").write_text("decoy\n")
        (decoys / "folder").mkdir()
        (decoys / "folder" / "tokenizer.json").write_text("decoy\n")
        store = work / "store"
        store.unlink() if store.is_symlink() else shutil.rmtree(store, ignore_errors=True)
        for stale in work.glob(".store.*"):
            stale.unlink() if stale.is_symlink() or stale.is_file() else shutil.rmtree(stale)
        cfg = write_config(work / "c.toml", [str(train)], work / "dev.tsv", work / "test.tsv", store)
        if position.startswith("the store folder itself"):
            if "names" in position:  # only names a store holds: the folder passes for an outdated store
                (decoys / "folder" / "tokenizer.json").rename(decoys / "folder" / "train.bin")
            store.symlink_to(decoys / "folder", target_is_directory=True)
        elif position == "lock file beside the store":
            (work / ".store.lock").symlink_to(decoys / "file")
        else:
            assert run(["data", "prepare", str(cfg), "--out", str(store)], work, 300)["rc"] == 0  # a store to redo
            target = store / position
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
            target.symlink_to(decoys / ("folder" if position == "tokenizer" else "file"))
        before = {p: p.read_bytes() for p in sorted(decoys.rglob("*")) if p.is_file()}
        result = run(["data", "prepare", str(cfg), "--out", str(store), "--force"], work, 300)
        after = {p: p.read_bytes() for p in sorted(decoys.rglob("*")) if p.is_file()}
        changed = sum(before.get(p) != after.get(p) for p in set(before) | set(after))
        report("symlink in the store folder", f"{position} -> decoy: attnlab data prepare --force", result,
               "read:", f"; decoys modified or added: {changed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/store_hostile"))
    ap.add_argument("--line-mb", type=int, default=100, help="the long line's size in MB")
    ap.add_argument("--gz-gib", type=int, default=1, help="what the .gz bomb expands to, GiB")
    ap.add_argument("--allowed-seconds", type=float, default=50.0,
                    help="how long the allowed .gz bomb is watched for progress before it is killed")
    ap.add_argument("--src", type=Path, help="run the attnlab package under this folder (another checkout's src)")
    ap.add_argument("--only", nargs="*", help="families to run (long, jsonl, utf8, regular, gz, tamper, symlink)")
    args = ap.parse_args()
    global SRC
    SRC = args.src.resolve() if args.src else None
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "train.tsv").write_text(tsv(pairs(300, 0)), encoding="utf-8")
    (work / "dev.tsv").write_text(tsv(pairs(20, 1)), encoding="utf-8")
    (work / "test.tsv").write_text(tsv(pairs(20, 2)), encoding="utf-8")
    print(f"store_hostile.py: attnlab of {SRC or 'this checkout'} at commit {commit(SRC or Path(__file__).parent)}, "
          f"python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, address space limit {ADDRESS_SPACE >> 30} GB per process\n", flush=True)
    families = {"long": lambda: long_line(work, args.line_mb * 1_000_000), "jsonl": lambda: jsonl(work),
                "utf8": lambda: invalid_utf8(work), "regular": lambda: not_regular(work),
                "gz": lambda: gz_bomb(work, args.gz_gib << 30, args.allowed_seconds),
                "tamper": lambda: tampered_stores(work), "symlink": lambda: symlink_decoys(work)}
    for name, family in families.items():
        if not args.only or name in args.only:
            family()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
