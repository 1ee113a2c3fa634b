"""JoeyNMT 2.3 and attnlab on the same data, the same tokenizer, the same dims and the same wall time.

Run with attnlab's python after `bash benchmarks/peers/setup_joeynmt.sh`:

    python benchmarks/peers/joeynmt_vs_attnlab.py configs/demo.toml --minutes 7 --threads 2 --json out.json
    python benchmarks/peers/joeynmt_vs_attnlab.py configs/demo.toml --show-config   # JoeyNMT's config, no run

Steps (each toolkit in turn, never both at once):
1. export: attnlab's split of the config (train after its max_words filter, dev, the 918 test verses) as plain
   text, and attnlab's own SentencePiece model of that config (trained on that train split, deterministic), so
   JoeyNMT cuts the text into exactly attnlab's pieces; its vocabulary file lists those pieces.
2. JoeyNMT: configured as its users do (`joeynmt_settings.joeynmt_config`): the settings of JoeyNMT's own example
   config for the model kind (RNN or Transformer), with attnlab's data, model dimensions, token budget and test
   beam, and every departure from the example listed with its reason (`joeynmt_settings.departures`, in the JSON);
   --joey-recipe minutes gives it the recipe with which it learned within 7 minutes on a 2-core CPU, and --joey-lr,
   --joey-schedule, --joey-warmup and --joey-set change either after a short probe (all recorded too).
   Trained in its own venv; SIGINT at the deadline (`--minutes` after its training loop starts): JoeyNMT then
   saves the current weights, so no update is lost. Beam search over the test split with those last weights.
3. attnlab: `attnlab train CONFIG --set train.max_minutes=M --set train.num_threads=T`, then
   `attnlab evaluate RUN --split test --checkpoint last`.
Both test outputs are scored by `attnlab.core.metrics.corpus_scores` (sacrebleu BLEU and chrF on detokenized text).
Both dev BLEU curves (greedy, on the same dev verses) go into the JSON as `dev_curve`: JoeyNMT's from its
validations.txt and log, attnlab's from metrics.jsonl.

Throughput: real (non-pad) target tokens per second of training. `tokens_per_s` is the mean of each toolkit's
own windowed rate over equal windows of 50 updates, validation excluded (JoeyNMT's "Tokens per Sec" log lines,
attnlab's `tokens_per_s` records in metrics.jsonl); `tokens_per_budget_s` divides all target tokens trained by
the whole training wall time, validation and checkpoints included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

import attnlab
from attnlab.core.metrics import corpus_scores
from attnlab.data.tokenizers import SPECIALS, SentencePieceTokenizer
from attnlab.families.translation import ExperimentConfig, load_experiment, prepare_corpus

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from common import commit, cpu_name, write_json  # noqa: E402  (benchmarks/common.py)

sys.path.insert(0, str(HERE))
from joeynmt_settings import (  # noqa: E402  (benchmarks/peers/joeynmt_settings.py)
    EXAMPLES, LOG_EVERY, RECIPES, SCHEDULES, VALID_EVERY, check_dev_subset, departures,
    departures_markdown, joeynmt_config, model_differences, model_kind, parse_set, recipe_options, to_yaml)

JOEY_RATE = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")
# JoeyNMT 2.3's validation: "Generation took 1.2345[sec]." then "Evaluation result (greedy): bleu: ..., 0.12[sec]"
JOEY_GEN = re.compile(r"Generation took ([\d.]+)\[sec\]")
JOEY_EVAL = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - \w+ - [\w.]+ - "
                       r"Evaluation result \(greedy\): .*?([\d.]+)\[sec\]")
JOEY_START = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - \w+ - [\w.]+ - EPOCH 1\s*$", re.M)
JOEY_TIME = "%Y-%m-%d %H:%M:%S,%f"  # the asctime of JoeyNMT's log format


# ---------------------------------------------------------------------------------------------- export
def export_data(cfg: ExperimentConfig, out: Path, max_test: int = 0) -> dict:
    """Writes attnlab's splits (out/data/{train,dev,test}.{en,es}) and its tokenizer (out/spm.model,
    out/vocab.txt); returns their sizes. dev: the first train.eval_max_sentences verses, the ones attnlab's
    validation decodes. max_test: only the first N test verses (smoke tests)."""
    store = prepare_corpus(cfg)
    tokenizers = store.tokenizers()
    train_pairs, dev_pairs, test_pairs = store.pairs("train"), store.pairs("dev"), store.pairs("test")
    if not (tokenizers.joint and isinstance(tokenizers.src, SentencePieceTokenizer)):
        raise SystemExit("this comparison needs a joint SentencePiece tokenizer ([tokenizer] joint = true, "
                         f"kind bpe or unigram), got kind {cfg.tokenizer.kind!r}, joint {cfg.tokenizer.joint}")
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    dev = dev_pairs[: cfg.train.eval_max_sentences or None]
    test = test_pairs[: max_test or None]
    for split, pairs in (("train", train_pairs), ("dev", dev), ("test", test)):
        (data / f"{split}.en").write_text("".join(p.src + "\n" for p in pairs), encoding="utf-8")
        (data / f"{split}.es").write_text("".join(p.tgt + "\n" for p in pairs), encoding="utf-8")
    tok = tokenizers.src
    (out / "spm.model").write_bytes(tok.to_bytes())
    # JoeyNMT puts its four specials first (unk, pad, bos, eos, by the names attnlab uses too), then these
    pieces = [tok.id_to_piece(i) for i in range(len(SPECIALS), tok.vocab_size)]
    (out / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    return {"train": len(train_pairs), "dev": len(dev), "dev_all": len(dev_pairs), "test": len(test),
            "vocab": tok.vocab_size}


# ---------------------------------------------------------------------------------------------- runs
def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "n/a"


class LoadSampler:
    """The 1-minute load average every `every` seconds while training runs (alone with T threads it stays
    near T; more means other work shared the CPU)."""

    def __init__(self, every: float = 10.0) -> None:
        self.every, self.samples, self._stop = every, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(float(loadavg().split()[0]))

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        return {"every_s": self.every, "mean": _mean(self.samples), "max": max(self.samples, default=float("nan")),
                "samples": self.samples}


def thread_env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")


def train_joeynmt(python: Path, config: Path, log_path: Path, minutes: float, threads: int) -> dict:
    """Trains JoeyNMT; the clock starts at its first "EPOCH" line (data and model are ready), SIGINT at
    the deadline. Returns wall times."""
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(python), str(HERE / "joeynmt_run.py"), str(threads), "train", str(config),
                                 "--skip-test"], stdout=log, stderr=subprocess.STDOUT, env=thread_env(threads))
    started = None
    while proc.poll() is None:
        time.sleep(0.5)
        if started is None and "EPOCH 1" in log_path.read_text(errors="replace"):
            started = time.time()
            print(f"  JoeyNMT training loop started after {started - t0:.0f} s of set-up", file=sys.stderr)
        if started is not None and time.time() - started >= 60 * minutes:
            proc.send_signal(signal.SIGINT)
            stopped = time.time()
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise SystemExit(f"JoeyNMT did not stop within 300 s of SIGINT; see {log_path}") from None
            break
    else:
        raise SystemExit(f"JoeyNMT stopped by itself (exit {proc.returncode}) before the deadline; see {log_path}")
    return {"setup_s": started - t0, "train_s": stopped - started, "save_s": time.time() - stopped}


def joeynmt_stats(python: Path, model_dir: Path, log_text: str) -> dict:
    ckpt = model_dir / "latest.ckpt"
    probe = ("import sys, torch; s = torch.load(sys.argv[1], map_location='cpu', weights_only=False)['stats_state'];"
             "print(s['steps'], s['total_tokens'])")
    steps, tokens = subprocess.run([str(python), "-c", probe, str(ckpt)], check=True, capture_output=True,
                                   text=True).stdout.split()
    rates = [float(r) for _, r in JOEY_RATE.findall(log_text)]
    curve = joeynmt_dev_curve((model_dir / "validations.txt").read_text(encoding="utf-8")
                              if (model_dir / "validations.txt").exists() else "", log_text)
    validation_s = sum(float(x) for x in JOEY_GEN.findall(log_text)) + sum(
        float(x) for _, x in JOEY_EVAL.findall(log_text))
    return {"updates": int(steps), "target_tokens": int(tokens), "window_rates": rates, "validations": len(curve),
            "validation_s": validation_s, "dev_curve": curve}


def joeynmt_dev_curve(validations: str, log_text: str) -> list[dict]:
    """JoeyNMT's validations in order: {step, time_s, bleu, loss, ppl, acc, lr, best} from its validations.txt
    ("Steps: 300\tloss: 61.2\tacc: 0.31\tppl: 9.8\tbleu: 4.12\tLR: 0.00020000\t*"); time_s: seconds since its
    training loop started ("EPOCH 1"), validation included, from the log's timestamps (None without them)."""
    start = JOEY_START.search(log_text)
    t0 = datetime.strptime(start.group(1), JOEY_TIME) if start else None
    stamps = [datetime.strptime(t, JOEY_TIME) for t, _ in JOEY_EVAL.findall(log_text)]
    curve = []
    reports = [row for row in validations.splitlines() if row.startswith("Steps:")]
    for i, line in enumerate(reports):
        point: dict = {"step": None, "time_s": round((stamps[i] - t0).total_seconds(), 2)
                       if t0 is not None and i < len(stamps) else None}
        for field in line.split("\t"):
            name, sep, value = field.partition(": ")
            if sep:
                key = {"Steps": "step", "LR": "lr"}.get(name, name)
                point[key] = int(value) if key == "step" else float(value)
        point["best"] = line.rstrip().endswith("*")
        curve.append(point)
    return curve


def attnlab_dev_curve(records: list[dict]) -> list[dict]:
    """attnlab's validations in order: {step, time_s, bleu, dev_loss, dev_ppl} from its metrics.jsonl records."""
    keys = ("step", "time_s", "bleu", "chrf", "dev_loss", "dev_ppl")
    return [{k: r[k] for k in keys if k in r} for r in records if "bleu" in r]


def decode_joeynmt(python: Path, config: dict, out: Path, threads: int) -> tuple[list[str], float]:
    """Beam search over the test split with the last weights; returns (hypotheses, seconds). The config has no
    dev set, so JoeyNMT's `test` decodes the test split only."""
    test_config = {**config, "data": {k: v for k, v in config["data"].items() if k != "dev"}}
    config = out / "config_test.yaml"
    config.write_text(to_yaml(test_config) + "\n", encoding="utf-8")
    t0 = time.time()
    with open(out / "test.log", "w") as log:
        subprocess.run([str(python), str(HERE / "joeynmt_run.py"), str(threads), "test", str(config),
                        "--output-path", str(out / "hyp")],
                       stdout=log, stderr=subprocess.STDOUT, env=thread_env(threads), check=True)
    return (out / "hyp.test").read_text(encoding="utf-8").splitlines(), time.time() - t0


def run_attnlab(config: Path, run_dir: Path, minutes: float, threads: int, overrides: list[str], max_test: int,
                load: LoadSampler, procs: int = 1) -> dict:
    attnlab = Path(sys.executable).parent / "attnlab"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    sets = [f"train.max_minutes={minutes}", f"train.num_threads={max(1, threads // procs)}", *overrides]
    cmd = [str(attnlab), "train", str(config), "--out", str(run_dir)] + [a for s in sets for a in ("--set", s)]
    if procs > 1:  # N data-parallel processes sharing the threads
        cmd += ["--procs", str(procs)]
    t0 = time.time()
    with open(run_dir.parent / f"{run_dir.name}.train.log", "w") as log, load:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=thread_env(threads), check=True)
    wall = time.time() - t0
    t1 = time.time()
    with open(run_dir.parent / f"{run_dir.name}.eval.log", "w") as log:
        subprocess.run([str(attnlab), "evaluate", str(run_dir), "--split", "test", "--checkpoint", "last",
                        "--max-sentences", str(max_test)],
                       stdout=log, stderr=subprocess.STDOUT, env=thread_env(threads), check=True)
    decode_s = time.time() - t1
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["name"]
    state = json.loads((run_dir / "checkpoints" / f"{latest}.json").read_text())
    state = state.get("trainer_state", state.get("state", state))
    evaluation = json.loads((run_dir / "eval" / "test.json").read_text())
    return {"command": " ".join(cmd), "records": records, "state": state, "eval": evaluation,
            "process_wall_s": wall, "decode_s": decode_s}


def find_key(obj, key: str):
    """The first value of `key` in a nested dict (the checkpoint JSON's layout is attnlab's business)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = find_key(v, key)
            if found is not None:
                return found
    return None


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="an attnlab translation config (joint SentencePiece tokenizer)")
    ap.add_argument("--minutes", type=float, help="training wall time of each toolkit (required to run)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads of both toolkits")
    ap.add_argument("--json", type=Path, help="where the results go (required to run)")
    ap.add_argument("--work", type=Path, default=HERE / "work", help="data, checkpoints and logs")
    ap.add_argument("--joeynmt-python", type=Path, default=HERE / ".venv-joeynmt" / "bin" / "python")
    ap.add_argument("--max-test", type=int, default=0, help="score only the first N test verses (smoke tests)")
    ap.add_argument("--attnlab-procs", type=int, default=1,
                    help="attnlab trains as N data-parallel processes (train --procs N) sharing --threads")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra attnlab overrides (applied to both toolkits' configs)")
    recipe = ap.add_argument_group("JoeyNMT's recipe (default: its example config's; every change is recorded as a "
                                   "departure, for a short probe of what makes JoeyNMT learn faster)")
    recipe.add_argument("--joey-recipe", choices=RECIPES, default="example",
                        help="example: JoeyNMT's example config's recipe; minutes: the one with which JoeyNMT learned "
                             "within 7 minutes on a 2-core CPU (warm-up 200, 1,000-token batches; RNN lr 0.003 and "
                             "clipping, Transformer lr 0.001 and dropout 0.1; benchmarks/peers/README.md). The "
                             "options below change either (default: example)")
    recipe.add_argument("--joey-lr", type=float, metavar="LR",
                        help="JoeyNMT's learning rate (the peak, with a warm-up); default: the example's "
                             f"({EXAMPLES['rnn']['training.learning_rate'][0]:g} RNN, "
                             f"{EXAMPLES['transformer']['training.learning_rate'][0]:g} Transformer)")
    recipe.add_argument("--joey-schedule", choices=SCHEDULES,
                        help="JoeyNMT's learning-rate schedule; default: the example's (plateau); none: constant")
    recipe.add_argument("--joey-warmup", type=int, metavar="N",
                        help="warm-up updates of --joey-schedule warmupinversesquareroot (default 4000, as "
                             "JoeyNMT's iwslt14_deen_sp.yaml)")
    recipe.add_argument("--joey-valid-every", type=int, metavar="N",
                        help=f"JoeyNMT validates (greedy dev BLEU) every N updates, a multiple of {LOG_EVERY} "
                             f"(default {VALID_EVERY}; 200 for the Transformer with --joey-recipe minutes)")
    recipe.add_argument("--joey-set", action="append", default=[], metavar="SETTING=VALUE",
                        help="any other JoeyNMT setting by its dotted path, e.g. model.encoder.dropout=0.1")
    recipe.add_argument("--joeynmt-only", action="store_true",
                        help="train and score JoeyNMT only (a probe of its recipe: its dev curve and test BLEU)")
    ap.add_argument("--show-config", action="store_true",
                    help="print JoeyNMT's config and its departures from the example, then exit (no training)")
    args = ap.parse_args()
    cfg = load_experiment(args.config, [f"train.max_minutes={args.minutes or 0}", *args.overrides])
    try:
        kind = model_kind(cfg)
        options = recipe_options(args.joey_recipe, kind, lr=args.joey_lr, schedule=args.joey_schedule,
                                 warmup=args.joey_warmup, valid_every=args.joey_valid_every,
                                 sets=tuple(parse_set(text) for text in args.joey_set))
        options.settings(kind)
    except ValueError as e:
        ap.error(str(e))
    if args.show_config:
        joey_cfg = joeynmt_config(cfg, (args.work / f"{args.config.stem}-show" / "joeynmt").resolve(), options)
        print(to_yaml(joey_cfg))
        print(f"\nDepartures from JoeyNMT's {kind} example:\n")
        print(departures_markdown(departures(joey_cfg, kind, options)))
        for what in model_differences(cfg):
            print(f"- not expressible in JoeyNMT: {what}")
        return
    if args.minutes is None or args.json is None:
        ap.error("--minutes and --json are required to run (or --show-config)")
    if not args.joeynmt_python.exists():
        raise SystemExit(f"{args.joeynmt_python} not found: run `bash benchmarks/peers/setup_joeynmt.sh` first")

    out = (args.work / f"{args.config.stem}-{args.minutes:g}min").resolve()
    jdir = out / "joeynmt"
    if jdir.exists():
        shutil.rmtree(jdir)
    jdir.mkdir(parents=True)
    print(f"exporting attnlab's split and tokenizer of {args.config} to {jdir}", file=sys.stderr)
    sizes = export_data(cfg, jdir, args.max_test)
    config_path = jdir / "config.yaml"
    joey_cfg = joeynmt_config(cfg, jdir, options)
    check_dev_subset(joey_cfg, sizes["dev"])
    config_path.write_text(to_yaml(joey_cfg) + "\n", encoding="utf-8")

    result: dict = {
        "config": str(args.config), "minutes": args.minutes, "threads": args.threads, "data": sizes,
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "host": platform.node()},
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
        "attnlab_package": str(Path(attnlab.__file__).parent),
        "throughput_definition": __doc__.split("Throughput: ")[1].split("\n\n")[0].replace("\n", " ")}

    print(f"JoeyNMT: training {args.minutes:g} min ({sizes['train']:,} train pairs)", file=sys.stderr)
    load_before = loadavg()
    with LoadSampler() as joey_load:
        times = train_joeynmt(args.joeynmt_python, config_path, jdir / "train.log", args.minutes, args.threads)
    log_text = (jdir / "train.log").read_text(errors="replace")
    stats = joeynmt_stats(args.joeynmt_python, jdir / "model", log_text)
    load_after_train = loadavg()
    hyps, decode_s = decode_joeynmt(args.joeynmt_python, joey_cfg, jdir, args.threads)
    refs = (jdir / "data" / "test.es").read_text(encoding="utf-8").splitlines()
    scores = corpus_scores(hyps, refs)
    result["joeynmt"] = {
        "version": _joeynmt_versions(args.joeynmt_python), "loadavg_before": load_before,
        "loadavg_after_training": load_after_train, "loadavg_1min_during_training": joey_load.summary(),
        "command": f"{args.joeynmt_python} -m joeynmt train {config_path} --skip-test (SIGINT at the deadline)",
        "updates": stats["updates"], "target_tokens": stats["target_tokens"],
        "tokens_per_s": _mean(stats["window_rates"]), "window_rates": stats["window_rates"],
        "tokens_per_budget_s": stats["target_tokens"] / times["train_s"], "validations": stats["validations"],
        "validation_s": stats["validation_s"], **times, "checkpoint": "last (saved at the interrupt)",
        "test_sentences": len(hyps), "beam": cfg.decode.beam_size, "decode_s": decode_s,
        "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
        "dev_curve": stats["dev_curve"],
        "settings": {"kind": kind, "example_files": sorted({src.split(" (")[0] for _, src in EXAMPLES[kind].values()}),
                     "repository": "https://github.com/joeynmt/joeynmt", "recipe": args.joey_recipe, "options": options.as_dict(),
                     "departures": departures(joey_cfg, kind, options),
                     "model_differences": model_differences(cfg)},
        "config_yaml": config_path.read_text()}
    print(f"  JoeyNMT: {stats['updates']} updates, test BLEU {scores.bleu:.2f}", file=sys.stderr)
    if args.joeynmt_only:
        write_json(args.json, result)
        points = "  ".join(f"{p['step']}: {p['bleu']:.2f}" for p in stats["dev_curve"])
        print(f"JoeyNMT {stats['updates']} updates, {result['joeynmt']['tokens_per_s']:.0f} tok/s, test BLEU "
              f"{scores.bleu:.2f}; dev BLEU (greedy) by update: {points or 'no validation'}; written {args.json}")
        return

    print(f"attnlab: training {args.minutes:g} min", file=sys.stderr)
    load_before = loadavg()
    attnlab_load = LoadSampler()
    a = run_attnlab(args.config, out / "attnlab", args.minutes, args.threads, args.overrides, args.max_test,
                    attnlab_load, args.attnlab_procs)
    ranks = args.attnlab_procs  # the checkpoint counts rank 0's tokens; the logged rates already count all ranks
    same_tokenizer = (out / "attnlab" / "tokenizer" / "src.model").read_bytes() == (jdir / "spm.model").read_bytes()
    train_recs = [r for r in a["records"] if "tokens_per_s" in r]
    dev_recs = [r for r in a["records"] if "bleu" in r]
    result["attnlab"] = {
        "loadavg_before": load_before, "loadavg_1min_during_training": attnlab_load.summary(),
        "command": a["command"], "updates": find_key(a["state"], "step"),
        "procs": ranks, "target_tokens": find_key(a["state"], "train_tokens") * ranks,
        "tokens_per_s": _mean([r["tokens_per_s"] for r in train_recs]),
        "window_rates": [round(r["tokens_per_s"], 1) for r in train_recs],
        "tokens_per_budget_s": find_key(a["state"], "train_tokens") * ranks / find_key(a["state"], "train_seconds"),
        "train_s": find_key(a["state"], "train_seconds"), "validations": len(dev_recs),
        "process_wall_s": a["process_wall_s"], "checkpoint": "last", "test_sentences": a["eval"]["sentences"],
        "beam": a["eval"]["beam"], "decode_s": a["decode_s"], "bleu": a["eval"]["bleu"],
        "chrf": a["eval"]["chrf"], "bleu_signature": a["eval"]["bleu_signature"],
        "same_tokenizer_bytes_as_joeynmt": same_tokenizer, "loadavg_after": loadavg(),
        "dev_curve": attnlab_dev_curve(a["records"])}
    j, at = result["joeynmt"], result["attnlab"]
    result["ratio_tokens_per_s_attnlab_over_joeynmt"] = at["tokens_per_s"] / j["tokens_per_s"]
    result["ratio_tokens_per_budget_s_attnlab_over_joeynmt"] = at["tokens_per_budget_s"] / j["tokens_per_budget_s"]
    write_json(args.json, result)

    print(f"{args.config} for {args.minutes:g} min, {args.threads} threads, {result['machine']['cpu']}")
    print(f"{'toolkit':<13} {'tok/s':>8} {'tok/s budget':>12} {'updates':>8} {'BLEU':>6} {'chrF':>6}")
    for name, r in (("JoeyNMT 2.3", j), ("attnlab", at)):
        print(f"{name:<13} {r['tokens_per_s']:>8.0f} {r['tokens_per_budget_s']:>12.0f} {r['updates']:>8} "
              f"{r['bleu']:>6.2f} {r['chrf']:>6.2f}")
    print(f"attnlab / JoeyNMT tokens/s: {result['ratio_tokens_per_s_attnlab_over_joeynmt']:.2f}x "
          f"(budget: {result['ratio_tokens_per_budget_s_attnlab_over_joeynmt']:.2f}x); written {args.json}")
    for name, r in (("JoeyNMT 2.3", j), ("attnlab", at)):
        points = "  ".join(f"{p['step']}: {p['bleu']:.2f}" for p in r["dev_curve"])
        print(f"dev BLEU (greedy) by update, {name}: {points or 'no validation in the budget'}")
    print(f"JoeyNMT's {kind} example config, {len(j['settings']['departures'])} departures with their reasons: "
          "joeynmt.settings in the JSON")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _joeynmt_versions(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import joeynmt, torch, sentencepiece as s; "
                           "print(f'joeynmt {joeynmt.__version__}, torch {torch.__version__}, "
                           "sentencepiece {s.__version__}')"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
