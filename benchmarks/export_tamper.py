"""Issue 36, item 4: `attnlab export` and the CTranslate2 path against a hostile run or export folder, through
the CLI, each case its own `attnlab` process:

- tamper: every tamper family (truncated, flipped-byte or zeroed model.bin; bad JSON in config.json;
  decoder_start_token changed; layer_norm_epsilon 1e300, -1 or 0.5; the vocabulary shuffled, an entry renamed or
  missing) applied to the run's own export (`translate --engine ctranslate2`) and to an export named with
  `--ct2-model`, with the manifest as the export left it and re-hashed by the tamperer;
- links: a symlink to a decoy at every position of an export folder (model.bin, config.json,
  shared_vocabulary.json, attnlab.json, tokenizer/tokenizer.json, the tokenizer folder, the export folder itself)
  under `export`, `export --out` and `translate --engine ctranslate2`, and in a run folder (checkpoints/, eval/,
  tokenizer/, config.json, checkpoints/latest.json) under `train --resume` and `evaluate`;
- kills: `attnlab export` SIGKILLed while model.bin is being written (a larger model, so that the write takes
  long enough to be caught), then `translate --engine ctranslate2`;
- stale: `--checkpoint last` after the checkpoint latest.json names moved;
- `export --out ''`.

A case ends as: ok (exit 0, the reference translation), rebuilt (the same, after exporting again), refused (exit
2, one error line), wrong (exit 0, another translation), traceback (a Python traceback or another exit status).
The reference is the PyTorch engine's greedy translation, which the CTranslate2 engine equals exactly.

    python benchmarks/export_tamper.py --work /tmp/export_tamper | tee docs/results/issue36/export_tamper.txt
    python benchmarks/export_tamper.py --work /tmp/export_tamper_old --src /tmp/old/src   # another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = {"the": "la", "house": "casa", "is": "es", "big": "grande", "small": "pequeña", "red": "roja", "a": "una",
         "cat": "gata", "sees": "ve", "and": "y", "old": "vieja", "my": "mi", "door": "puerta"}
SENTENCES = ["the red house", "my old door is big", "a cat sees the small house and the red door", "and"]
CONFIG = """[data]
corpus = "files"
train = ["{data}/train.tsv"]
dev = ["{data}/dev.tsv"]
test = ["{data}/test.tsv"]
[tokenizer]
kind = "char"
[model]
family = "transformer"
[model.transformer]
d_model = {d_model}
h = 2
d_ff = {d_ff}
enc_layers = {layers}
dec_layers = {layers}
dropout = 0.1
norm = "pre"
[train]
max_steps = {steps}
max_tokens = 1200
lr = 0.005
eval_every = {steps}
log_every = 10
seed = 3
progress = false
keep_last = 1
eval_max_sentences = 10
[decode]
beam_size = 2
max_src_tokens = 80
"""


def shuffled(tokens: list[str]) -> list[str]:
    return tokens[:4] + tokens[5:6] + tokens[4:5] + tokens[6:]


def flip(b: bytes) -> bytes:
    """Every bit of 64 bytes in the middle of the weights flipped (one flipped low bit rarely changes a greedy
    translation)."""
    i = len(b) // 2
    return b[:i] + bytes(x ^ 0xFF for x in b[i:i + 64]) + b[i + 64:]


TAMPERS = {  # name: (file, what it does to the file's bytes)
    "model.bin truncated": ("model.bin", lambda b: b[: len(b) // 2]),
    "model.bin byte flipped": ("model.bin", flip),
    "model.bin zeroed": ("model.bin", lambda b: bytes(len(b))),
    "config.json bad JSON": ("config.json", lambda b: b[:-5]),
    "decoder_start_token changed": ("config.json", lambda b: b.replace(b'"decoder_start_token": "<s>"',
                                                                      b'"decoder_start_token": "</s>"')),
    "layer_norm_epsilon 1e300": ("config.json", lambda b: b.replace(b"1e-05", b"1e300")),
    "layer_norm_epsilon -1": ("config.json", lambda b: b.replace(b"1e-05", b"-1")),
    "layer_norm_epsilon 0.5": ("config.json", lambda b: b.replace(b"1e-05", b"0.5")),  # in range, not attnlab's
    "vocabulary shuffled": ("shared_vocabulary.json", lambda b: json.dumps(shuffled(json.loads(b))).encode()),
    "vocabulary entry renamed": ("shared_vocabulary.json",
                                 lambda b: json.dumps(json.loads(b)[:-1] + ["renamed"]).encode()),
    "vocabulary entry missing": ("shared_vocabulary.json", lambda b: json.dumps(json.loads(b)[:-1]).encode()),
}


class Cli:
    """`attnlab` processes of one checkout's sources, one torch thread each, Python tracebacks on stderr."""

    def __init__(self, src: Path) -> None:
        self.env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "ATTNLAB_RAISE_INTERNAL": "1", "PYTHONFAULTHANDLER": "1"}

    def cmd(self, *args) -> list[str]:
        return [sys.executable, "-m", "attnlab.app.cli", *map(str, args)]

    def __call__(self, *args, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), env=self.env, capture_output=True, text=True, timeout=timeout)

    def popen(self, *args) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(*args), env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)


def make_run(cli: Cli, work: Path, name: str, d_model: int, d_ff: int, layers: int, steps: int) -> Path:
    data = work / "data"
    if not data.is_dir():
        data.mkdir(parents=True)
        rng = random.Random(0)
        for split, n in (("train", 600), ("dev", 20), ("test", 20)):
            rows = []
            for _ in range(n):
                words = [rng.choice(sorted(WORDS)) for _ in range(rng.randint(2, 6))]
                rows.append(f"{' '.join(words)}\t{' '.join(WORDS[w] for w in reversed(words))}\n")
            (data / f"{split}.tsv").write_text("".join(rows), encoding="utf-8")
        (work / "in.txt").write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    cfg = work / f"{name}.toml"
    cfg.write_text(CONFIG.format(data=data, d_model=d_model, d_ff=d_ff, layers=layers, steps=steps))
    run = work / name
    if not (run / "checkpoints" / "latest.json").is_file():
        r = cli("train", cfg, "--out", run)
        assert r.returncode == 0, r.stderr
    return run


def classify(r: subprocess.CompletedProcess, reference: str) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("attnlab:")]
    if "Traceback" in r.stderr or r.returncode not in (0, 2):
        return "traceback"
    if r.returncode == 2:
        return "refused" if len(errors) == 1 else "refused (several lines)"
    return "ok" if r.stdout == reference else "wrong"


def translate(cli: Cli, run: Path, *extra) -> subprocess.CompletedProcess:
    return cli("translate", run, run.parent / "in.txt", "--beam", "1", "--device", "cpu", *extra)


def snapshot(folder: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file under a folder (links not followed)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def link_to_decoy(target: Path, decoys: Path, folder: bool) -> None:
    """Replaces target with a symlink to a decoy holding a copy of it (so that reading through the link succeeds):
    decoys/folder for a folder, decoys/file for a file ("decoy\n" where there was no file)."""
    (decoys / "folder").mkdir(parents=True, exist_ok=True)
    if folder:
        if target.is_dir():
            shutil.copytree(target, decoys / "folder", dirs_exist_ok=True)
            shutil.rmtree(target)
        target.symlink_to(decoys / "folder", target_is_directory=True)
        return
    target.parent.mkdir(exist_ok=True)
    if target.is_file():
        shutil.copy(target, decoys / "file")
        target.unlink()
    else:
        (decoys / "file").write_bytes(b"decoy\n")
    target.symlink_to(decoys / "file")


def restore(folder: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if folder.is_symlink():
        folder.unlink()
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def rehash(folder: Path) -> bool:
    """Rewrites the manifest's file hashes as a tamperer would; False when the export has none."""
    import hashlib

    path = folder / "attnlab.json"
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    if not isinstance(manifest.get("files"), dict):
        return False
    manifest["files"] = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size,
                                                            "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                         for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "attnlab.json"}
    path.write_text(json.dumps(manifest))
    return True


def section(title: str) -> None:
    print(f"\n## {title}", flush=True)


def tamper_cases(cli: Cli, run: Path, reference: str, counts: Counter) -> None:
    section("tamper families (rebuilt / ok / refused are fine; wrong / traceback are not)")
    own = run / "ctranslate2-best-float32"
    good = snapshot(own)
    for name, (file, tamper) in TAMPERS.items():
        for manifest in ("as exported", "re-hashed"):
            for where in ("own export", "--ct2-model"):
                restore(own, good)
                (own / file).write_bytes(tamper(good[file]))
                if manifest == "re-hashed" and not rehash(own):
                    continue  # an export without hashes: the same case as above
                named = ["--ct2-model", own] if where == "--ct2-model" else []
                r = translate(cli, run, "--engine", "ctranslate2", *named)
                result = classify(r, reference)
                if result == "ok" and snapshot(own).get(file) == good[file]:
                    result = "rebuilt"
                counts[result] += 1
                line = next((ln for ln in r.stderr.splitlines() if ln.startswith("attnlab:")),
                            r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
                print(f"{name:28s} {manifest:12s} {where:12s} exit {r.returncode}  {result:9s} {line[:150]}",
                      flush=True)
    restore(own, good)


def link_cases(cli: Cli, run: Path, work: Path, counts: Counter) -> None:
    section("symlinks to decoys (a decoy modified or written into is a failure)")
    own = run / "ctranslate2-best-float32"
    out = work / "out"
    good = snapshot(own)
    positions = ("model.bin", "config.json", "shared_vocabulary.json", "attnlab.json", "tokenizer/tokenizer.json",
                 "tokenizer", ".")
    for how in ("export", "export --out", "translate --engine ctranslate2"):
        for position in positions:
            folder = out if how == "export --out" else own
            restore(folder, good)
            decoys = work / "decoys"
            shutil.rmtree(decoys, ignore_errors=True)
            (decoys / "folder").mkdir(parents=True)
            (decoys / "file").write_bytes(b"decoy")
            target = folder / position if position != "." else folder
            if position in ("tokenizer", "."):
                shutil.rmtree(target)
                target.symlink_to(decoys / "folder", target_is_directory=True)
            else:
                target.unlink()
                target.symlink_to(decoys / "file")
            if how == "export":
                r = cli("export", run)
            elif how == "export --out":
                r = cli("export", run, "--out", out)
            else:
                r = translate(cli, run, "--engine", "ctranslate2")
            written = snapshot(decoys) != {"file": b"decoy"}
            result = "DECOY WRITTEN" if written else ("traceback" if classify(r, "") == "traceback" else "safe")
            counts["decoy file modified" if written and position not in ("tokenizer", ".") else
                   "decoy folder written into" if written else result] += 1
            err = next((ln for ln in r.stderr.splitlines() if ln.startswith("attnlab:")), "")
            print(f"{how:32s} {position:26s} exit {r.returncode}  {result:13s} {err[:120]}", flush=True)
            if target.is_symlink():
                target.unlink()
    restore(own, good)
    shutil.rmtree(out, ignore_errors=True)
    for position, command in (("checkpoints", "train"), ("tokenizer", "train"), ("config.json", "train"),
                              ("checkpoints/latest.json", "train"), ("eval", "evaluate"),
                              ("eval/dev.json", "evaluate")):
        copy = work / "run_copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(run, copy, symlinks=True)
        decoys = work / "decoys"
        shutil.rmtree(decoys, ignore_errors=True)
        target = copy / position
        link_to_decoy(target, decoys, folder="." not in position)
        before = snapshot(decoys)
        if command == "train":
            steps = json.loads((copy / "checkpoints" / "latest.json").read_text())["step"] \
                if position != "checkpoints/latest.json" else 0
            r = cli("train", "--resume", copy, "--set", f"train.max_steps={steps + 2}")
        else:
            r = cli("evaluate", copy, "--split", "dev", "--device", "cpu", "--beam", "1", "--max-sentences", "5")
        written = snapshot(decoys) != before
        result = "DECOY WRITTEN" if written else ("traceback" if classify(r, "") == "traceback" else "safe")
        counts[("decoy folder written into" if "." not in position else "decoy file modified") if written
               else result] += 1
        err = next((ln for ln in r.stderr.splitlines() if ln.startswith("attnlab:")), "")
        print(f"{command + ' (run folder)':32s} {position:26s} exit {r.returncode}  {result:13s} {err[:120]}",
              flush=True)


def kill_cases(cli: Cli, big: Path, kills: int, counts: Counter) -> None:
    section(f"SIGKILL while model.bin is written ({kills} kills), then translate --engine ctranslate2")
    reference = translate(cli, big).stdout
    own = big / "ctranslate2-best-float32"
    full = None
    for i in range(kills):
        shutil.rmtree(own, ignore_errors=True)
        for leftover in big.glob(".ctranslate2-best-float32*"):
            shutil.rmtree(leftover, ignore_errors=True)
        if i % 2 == 1:  # every other kill replaces a complete export
            assert cli("export", big).returncode == 0
            full = full or (own / "model.bin").stat().st_size
        pattern = "*ctranslate2-best-float32*/model.bin"
        before = {(str(p), p.stat().st_ino) for p in big.glob(pattern)}  # the complete export, if any
        proc = cli.popen("export", big)
        caught = None
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline:
            writing = []
            for p in big.glob(pattern):
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                if st.st_size > 0 and (str(p), st.st_ino) not in before:
                    writing.append(p)
            if writing:  # a new model.bin being written: kill within 10 ms
                time.sleep(random.Random(i).uniform(0, 0.01))
                proc.send_signal(signal.SIGKILL)
                caught = writing[0]
                break
            time.sleep(0.0005)
        proc.wait()
        left = own / "model.bin"
        size = left.stat().st_size if left.is_file() else None
        if full is None and size is not None and proc.returncode == 0:
            full = size
        truncated = size is not None and full is not None and size < full
        counts["kills: truncated model.bin left in the export"] += truncated
        r = translate(cli, big, "--engine", "ctranslate2")
        result = classify(r, reference)
        counts[f"kills: then translate {result}"] += 1
        err = next((ln for ln in r.stderr.splitlines() if ln.startswith("attnlab:")), "")
        print(f"kill {i + 1}: {'caught ' + caught.parent.name if caught else 'not caught (export done)':44s} "
              f"model.bin {size} of {full} bytes{' TRUNCATED' if truncated else ''}; translate exit {r.returncode} "
              f"{result} {err[:100]}", flush=True)


def stale_case(cli: Cli, run: Path, work: Path, counts: Counter) -> None:
    section("a stale export: --checkpoint last after the last checkpoint moved")
    copy = work / "stale_run"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy)
    first = translate(cli, copy, "--engine", "ctranslate2", "--checkpoint", "last")
    r = cli("train", "--resume", copy, "--set",
            f"train.max_steps={json.loads((copy / 'checkpoints' / 'latest.json').read_text())['step'] + 40}")
    assert r.returncode == 0, r.stderr
    torch_out = translate(cli, copy, "--checkpoint", "last").stdout
    second = translate(cli, copy, "--engine", "ctranslate2", "--checkpoint", "last")
    result = classify(second, torch_out)
    counts[f"stale: {result}"] += 1
    print(f"before resume: exit {first.returncode}; the translation changed with the new checkpoint: "
          f"{first.stdout != torch_out}; after: exit {second.returncode} {result} (the PyTorch engine's translation "
          "of the new checkpoint is the reference)", flush=True)


def out_case(cli: Cli, run: Path, work: Path, counts: Counter) -> None:
    section("export --out ''")
    here = work / "cwd"
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir()
    r = subprocess.run(cli.cmd("export", run.resolve(), "--out", ""), env=cli.env, capture_output=True, text=True,
                       cwd=here)
    wrote = sorted(p.name for p in here.iterdir())
    counts["--out '' refused" if r.returncode == 2 and not wrote else "--out '' exported into the current folder"] += 1
    print(f"exit {r.returncode}; files in the current folder: {wrote}; {r.stderr.strip().splitlines()[-1:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="a scratch folder (runs are trained there once)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the attnlab sources to run (default: these)")
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    cli = Cli(args.src.resolve())
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# export_tamper: sources {args.src}", flush=True)
    t0 = time.time()
    run = make_run(cli, args.work, "run", d_model=32, d_ff=64, layers=1, steps=60)
    big = make_run(cli, args.work, "big", d_model=384, d_ff=1536, layers=3, steps=2)
    shutil.rmtree(run / "ctranslate2-best-float32", ignore_errors=True)
    reference = translate(cli, run).stdout
    r = translate(cli, run, "--engine", "ctranslate2")
    print(f"reference (PyTorch, greedy): {reference.splitlines()}; CTranslate2 engine, fresh export: exit "
          f"{r.returncode}, equal: {r.stdout == reference}", flush=True)
    counts: Counter = Counter()
    tamper_cases(cli, run, reference, counts)
    link_cases(cli, run, args.work, counts)
    kill_cases(cli, big, args.kills, counts)
    stale_case(cli, run, args.work, counts)
    out_case(cli, run, args.work, counts)
    section(f"counts ({time.time() - t0:.0f} s)")
    for key in sorted(counts):
        print(f"{key}: {counts[key]}")
    print(f"tracebacks: {counts['traceback'] + counts['kills: then translate traceback']}")
    print(f"wrong translations with exit 0: {counts['wrong'] + counts['kills: then translate wrong']}")


if __name__ == "__main__":
    main()
