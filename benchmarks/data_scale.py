"""Corpora of any size: what preparing and training cost as the corpus grows (issue 20).

For each size it builds a TSV corpus (reproducibly: the Bible's training verses repeated, a copy number appended
to each side so every line is distinct; or the first lines of any TSV given with --source), and measures:

- prepare (`attnlab data prepare`, its own process): wall time, input pairs/s, the time of each phase, the encode
  phase's pairs/s, peak RSS, and SentencePiece's own encode throughput on the same sentences (the first 200,000
  pairs): one core's times the cores (the limit) and its batched encode with a thread per core;
- training from the prepared store (`attnlab train`, its own process, train.max_steps steps): time from the
  command to the first step, peak RSS, target tokens/s; and, in a process of its own, the RSS the corpus itself
  adds (store, dataset, sampler, an epoch's batches) and the longest example of the first batches (a step's
  activations, most of the peak, grow with it);
- `attnlab train --resume` of that run: time from the command to its first new step, peak RSS;
- the store's bytes per token (train.bin + train.idx over the training tokens);
- at --compare-size (1 M lines by default): training tokens/s from the store against the in-memory dataset of
  before (every pair a Python list of ids, `attnlab.data.batching.Seq2SeqDataset`), side by side in one process, the
  same model, seed and batches.

Peak RSS is ru_maxrss of the command's process as returned by wait4 (the largest of it and the children it
waited for, e.g. the encoding workers).

Usage:
    python benchmarks/data_scale.py --sizes 30000,1000000,4000000,4500000 --json docs/results/issue20_data_scale.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlab.data.batching import Seq2SeqDataset
from attnlab.data.bible import bible_corpus
from attnlab.data.corpus import iter_pairs
from attnlab.families.translation import build_translation_model, load_experiment, prepare_corpus
from attnlab.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_json_line  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ATTNLAB = [sys.executable, "-m", "attnlab.app.cli"]


def build_tsv(path: Path, lines: int, source: Path | None) -> None:
    """`lines` pairs: the source TSV's first lines, or the Bible's training verses repeated ("text k" on both
    sides for copy k)."""
    if path.is_file():
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        if source is not None:
            for n, (_, src, tgt) in enumerate(iter_pairs(source), start=1):
                out.write(f"{src}\t{tgt}\n")
                if n == lines:
                    break
        else:
            train = bible_corpus("kjv").train
            for i in range(lines):
                k, j = divmod(i, len(train))
                out.write(f"{train[j].src} {k}\t{train[j].tgt} {k}\n")
    os.replace(tmp, path)


def popen_wait4(cmd: list[str], watch: Path | None = None, step: int = 0) -> dict:
    """Runs cmd; returns wall seconds, peak RSS (MB; the process reaped with wait4 so its own rusage is read) and,
    with `watch` (a metrics.jsonl), the seconds until a record of `step` appeared in it."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if watch is not None and first is None and watch.is_file() and \
                any(line.startswith(f'{{"step": {step},') for line in watch.read_text().splitlines()):
            first = time.perf_counter() - t0
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    err = proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{err[-3000:]}")
    if watch is not None and first is None:  # the step landed between the last poll and the exit
        first = wall
    return {"wall_s": round(wall, 2), "first_step_s": None if first is None else round(first, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stderr": err}


def sentencepiece_limit(tsv: Path, tokenizer_dir: Path, workers: int, pairs: int = 200_000) -> dict:
    """SentencePiece's own encode throughput in pairs/s (two sentences per pair) on the first `pairs` pairs: one
    core (its batched encode on one thread) times the cores, the limit no prepare can pass (no reading, no IPC);
    and its batched encode with one thread per core (what SentencePiece itself does with every core)."""
    import sentencepiece as spm

    texts = []
    for n, (_, src, tgt) in enumerate(iter_pairs(tsv), start=1):
        texts += [src, tgt]
        if n == pairs:
            break
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_dir / "src.model"))
    rates = {}
    for threads in (1, workers):
        best = 0.0
        for _ in range(2):
            t0 = time.perf_counter()
            sp.encode(texts, num_threads=threads)
            best = max(best, len(texts) / 2 / (time.perf_counter() - t0))
        rates[threads] = best
    return {"sp_one_core_pairs_per_s": round(rates[1]), "sp_threads_pairs_per_s": round(rates[workers]),
            "sp_limit_pairs_per_s": round(rates[1] * workers), "sp_sample_pairs": len(texts) // 2}


def train_rates(metrics: Path, first: int, last: int) -> float:
    """The median target tokens/s of the logged steps first..last (train.log_every = 1)."""
    rates = [r["tokens_per_s"] for r in map(json.loads, metrics.read_text().splitlines())
             if "tokens_per_s" in r and first <= r["step"] <= last]
    return round(statistics.median(rates), 1)


def side_by_side(config: Path, overrides: list[str], steps: int, threads: int, rounds: int = 4) -> dict:
    """Training tokens/s from the memory-mapped store and from the in-memory dataset of before, one process, the
    same model init, seed and batches, in alternating blocks of `steps` steps (`rounds` each); also whether the
    two paths gave batches of the same sizes (the losses differ: dropout draws from one generator for both)."""
    torch.set_num_threads(threads)
    cfg = load_experiment(config, overrides)
    store = prepare_corpus(cfg)
    toks = store.tokenizers()
    mapped = store.train_data()
    t0 = time.perf_counter()
    items = [mapped[i] for i in range(len(mapped))]
    memory = Seq2SeqDataset([s for _, s, _ in items], [t for _, _, t in items])
    del items
    build_s = time.perf_counter() - t0
    trainers, iters = {}, {}
    for name, data in (("store", mapped), ("in_memory", memory)):
        torch.manual_seed(cfg.train.seed)
        model = build_translation_model(cfg.model, toks.src.vocab_size, toks.tgt.vocab_size)
        trainers[name] = Trainer(model, cfg.train, data, data, Path("/tmp/attnlab-data-scale-sbs") / name)
        iters[name] = iter(trainers[name]._loader(data, trainers[name].sampler.batches(0)))
        trainers[name].train_step([next(iters[name])])  # warm-up
    tokens = dict.fromkeys(trainers, 0)
    seconds = dict.fromkeys(trainers, 0.0)
    counts: dict[str, list[int]] = {name: [] for name in trainers}  # target tokens per step: the same batches
    for r in range(rounds):  # alternating blocks of steps (ABBA...): both paths see the same machine state
        for name, trainer in (list(trainers.items()) if r % 2 == 0 else list(trainers.items())[::-1]):
            for _ in range(steps):
                t = time.perf_counter()
                loss, n = trainer.train_step([next(iters[name])])  # loading the batch counts
                seconds[name] += time.perf_counter() - t
                tokens[name] += n
                counts[name].append(n)
    rate = {name: tokens[name] / seconds[name] for name in trainers}
    return {"store_tokens_per_s": round(rate["store"], 1), "in_memory_tokens_per_s": round(rate["in_memory"], 1),
            "ratio": round(rate["store"] / rate["in_memory"], 4), "same_batches": counts["store"] == counts["in_memory"],
            "in_memory_build_s": round(build_s, 1), "steps_per_block": steps, "rounds": rounds, "threads": threads}


def _vm(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def corpus_memory(config: Path, overrides: list[str], steps: int) -> dict:
    """What the corpus itself costs the training process: the RSS (MB) the opened store, its dataset, the batch
    sampler and one epoch's batches add (peak and after), measured in a process of their own after the imports;
    and the longest example among the first `steps` batches (the activations of a step grow with it)."""
    from attnlab.data.batching import TokenBudgetBatchSampler

    cfg = load_experiment(config, overrides)
    base = _vm("VmRSS")
    store = prepare_corpus(cfg)
    data = store.train_data()
    sampler = TokenBudgetBatchSampler(data.lengths(), cfg.train.max_tokens, seed=cfg.train.seed)
    batches = sampler.batches(0)
    costs = sampler.costs
    longest = [int(costs[batches[k]].max()) for k in range(min(steps, len(batches)))]
    return {"corpus_rss_peak_mb": round(_vm("VmHWM") - base, 1), "corpus_rss_after_mb": round(_vm("VmRSS") - base, 1),
            "first_batches_longest": max(longest), "first_batches_longest_median": int(statistics.median(longest))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30000,1000000,4000000,4500000", help="TSV lines per corpus, comma-separated")
    ap.add_argument("--source", type=Path, help="take the corpora's lines from this TSV (default: the Bible, repeated)")
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "bible-transformer-small.toml")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "data_scale")
    ap.add_argument("--steps", type=int, default=20, help="training steps per run (default 20)")
    ap.add_argument("--compare-size", type=int, default=1_000_000, help="the size of the side-by-side comparison "
                    "with the in-memory path (0: none)")
    ap.add_argument("--compare-steps", type=int, default=10, help="steps per block of the comparison (3 blocks each)")
    ap.add_argument("--json", type=Path, help="append one JSON line per size here")
    ap.add_argument("--sample-sentences", type=int, default=0, help="tokenizer.sample_sentences (0: the default)")
    ap.add_argument("--side-by-side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--corpus-memory", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = len(os.sched_getaffinity(0))
    if args.side_by_side:  # the child process of the comparison
        print(json.dumps(side_by_side(args.config, args.set, args.compare_steps, threads)))
        return 0
    if args.corpus_memory:  # the child process measuring the corpus's share of memory
        print(json.dumps(corpus_memory(args.config, args.set, args.steps)))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in args.sizes.split(",")):
        tsv = args.work / f"corpus-{size}.tsv"
        t0 = time.perf_counter()
        build_tsv(tsv, size, args.source)
        build_s = time.perf_counter() - t0
        store, run = args.work / f"store-{size}", args.work / f"run-{size}"
        for d in (store, run):
            subprocess.run(["rm", "-rf", str(d)], check=True)
        sets = ["data.corpus=files", f"data.train=['{tsv}']", "data.max_words=30", "tokenizer.vocab_size=8000",
                f"data.store={store}", f"train.max_steps={args.steps}",
                *([f"tokenizer.sample_sentences={args.sample_sentences}"] if args.sample_sentences else []), "train.eval_every=100000",
                "train.eval_bleu=false", "train.log_every=1", "train.progress=false", f"train.num_threads={threads}"]
        set_args = [a for s in sets for a in ("--set", s)]
        prep = popen_wait4(ATTNLAB + ["data", "prepare", str(args.config), "--json"] + set_args)
        manifest = json.loads((store / "store.json").read_text())
        limit = sentencepiece_limit(tsv, store / "tokenizer", threads)
        train = popen_wait4(ATTNLAB + ["train", str(args.config), "--out", str(run)] + set_args,
                            watch=run / "metrics.jsonl", step=1)
        resume = popen_wait4(ATTNLAB + ["train", "--resume", str(run), "--set", f"train.max_steps={args.steps + 5}"],
                             watch=run / "metrics.jsonl", step=args.steps + 1)
        size_bytes = (store / "train.bin").stat().st_size + (store / "train.idx").stat().st_size
        row = {
            "lines": size, "pairs_kept": manifest["train"]["pairs"], "tokens": manifest["train"]["tokens"],
            "build_tsv_s": round(build_s, 1),
            "prepare_s": prep["wall_s"], "prepare_pairs_per_s": round(size / prep["wall_s"]),
            "prepare_in_process_s": manifest["prepare_seconds"], "tokenizer_s": manifest["tokenizer_seconds"],
            "tokenizer_sentences": manifest["counts"]["tokenizer_sentences"],
            "phase_seconds": manifest["phase_seconds"],
            "sample_sentences": manifest["spec"]["tokenizer"]["sample_sentences"],
            "encode_s": manifest["train"]["encode_seconds"], "encode_workers": manifest["train"]["encode_workers"],
            "encode_pairs_per_s": round(manifest["train"]["pairs"] / max(manifest["train"]["encode_seconds"], 1e-9)),
            **limit,
            "encode_vs_limit": round(manifest["train"]["pairs"] / max(manifest["train"]["encode_seconds"], 1e-9)
                                     / limit["sp_limit_pairs_per_s"], 3),
            "prepare_vs_limit": round(size / prep["wall_s"] / limit["sp_limit_pairs_per_s"], 3),
            "prepare_peak_rss_mb": prep["peak_rss_mb"],
            "train_first_step_s": train["first_step_s"], "train_wall_s": train["wall_s"],
            "train_peak_rss_mb": train["peak_rss_mb"],
            "train_tokens_per_s": train_rates(run / "metrics.jsonl", 3, args.steps),
            "resume_first_step_s": resume["first_step_s"], "resume_peak_rss_mb": resume["peak_rss_mb"],
            "store_bytes": size_bytes, "store_bytes_per_token": round(size_bytes / manifest["train"]["tokens"], 3),
            "threads": threads, "steps": args.steps,
        }
        done = subprocess.run([sys.executable, __file__, "--corpus-memory", "--config", str(args.config),
                               "--steps", str(args.steps)] + set_args, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        row.update(json.loads(done.stdout.strip().splitlines()[-1]))
        if size == args.compare_size:
            done = subprocess.run([sys.executable, __file__, "--side-by-side", "--config", str(args.config),
                                   "--compare-steps", str(args.compare_steps)] + set_args,
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            row["side_by_side"] = json.loads(done.stdout.strip().splitlines()[-1])
        print(append_json_line(args.json, row), flush=True)
        for d in (run,):
            subprocess.run(["rm", "-rf", str(d)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
