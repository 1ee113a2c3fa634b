"""JoeyNMT 2.3 and attnlab on the same data, the same tokenizer, the same dims and the same wall time.

Run with attnlab's python after `bash benchmarks/peers/setup_joeynmt.sh`:

    python benchmarks/peers/joeynmt_vs_attnlab.py configs/demo.toml --minutes 7 --threads 2 --json out.json

Steps (each toolkit in turn, never both at once):
1. export: attnlab's split of the config (train after its max_words filter, dev, the 918 test verses) as plain
   text, and attnlab's own SentencePiece model of that config (trained on that train split, deterministic), so
   JoeyNMT cuts the text into exactly attnlab's pieces; its vocabulary file lists those pieces.
2. JoeyNMT: a config with the attnlab config's dims and optimiser (`joeynmt_config`), trained in its own venv;
   SIGINT at the deadline (`--minutes` after its training loop starts): JoeyNMT then saves the current weights,
   so no update is lost. Beam-5 decoding of the test split with those last weights.
3. attnlab: `attnlab train CONFIG --set train.max_minutes=M --set train.num_threads=T`, then
   `attnlab evaluate RUN --split test --checkpoint last`.
Both test outputs are scored by `attnlab.core.metrics.corpus_scores` (sacrebleu BLEU and chrF on detokenized text).

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
from attnlab.families.translation import ExperimentConfig, load_experiment, prepare_corpus
from attnlab.core.metrics import corpus_scores
from attnlab.data.tokenizers import SPECIALS, SentencePieceTokenizer
from attnlab.decode.translate import batch_size_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LOG_EVERY = 50  # updates per throughput window, both toolkits
JOEY_RATE = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")
JOEY_VALID = re.compile(r"duration:\s+([\d.]+)\[sec\]")


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


def _yaml(value, indent: int = 0) -> str:
    """A small YAML writer (PyYAML reads 1e-08 as a string, so floats are written with a decimal point)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, dict):
                lines.append(f"{pad}{k}:\n{_yaml(v, indent + 2)}")
            else:
                lines.append(f"{pad}{k}: {_yaml(v)}")
        return "\n".join(lines)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.10f}".rstrip("0")
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def joeynmt_config(cfg: ExperimentConfig, out: Path) -> dict:
    """JoeyNMT 2.3's config for the attnlab config: same data, pieces, dims, optimiser and batch size.
    JoeyNMT reads `fp16` and `normalization` only at the top level. Its token batches count
    max(source, target) tokens of each pair (attnlab counts padded positions), so batches are not identical;
    throughput is compared in real target tokens."""
    t, m = cfg.train, cfg.model
    side = lambda lang: {  # noqa: E731
        "lang": lang, "level": "bpe", "lowercase": False, "normalize": False, "max_length": -1,
        "min_length": -1, "voc_file": str(out / "vocab.txt"), "tokenizer_type": "sentencepiece",
        "tokenizer_cfg": {"model_file": str(out / "spm.model")}}
    training = {
        "model_dir": str(out / "model"), "overwrite": True, "shuffle": True, "use_cuda": False,
        "random_seed": t.seed, "optimizer": t.optimizer, "adam_betas": [t.adam_beta1, t.adam_beta2],
        "learning_rate": t.lr, "learning_rate_min": 1e-9, "weight_decay": t.weight_decay,
        "clip_grad_norm": t.clip_norm, "label_smoothing": t.label_smoothing,
        "batch_size": t.max_tokens, "batch_type": "token", "batch_multiplier": t.accum_steps,
        "epochs": 100000, "max_updates": t.max_steps, "validation_freq": t.eval_every, "logging_freq": LOG_EVERY,
        "early_stopping_metric": "bleu", "keep_best_ckpts": 2, "print_valid_sents": [0],
        "eval_metrics": ["bleu"]}
    if t.schedule == "inverse_sqrt":
        training.update(scheduling="warmupinversesquareroot", learning_rate_warmup=t.warmup_steps)
    elif t.schedule == "plateau":  # attnlab: factor 0.5 after plateau_patience validations without a better BLEU
        training.update(scheduling="plateau", decrease_factor=t.plateau_factor, patience=t.plateau_patience - 1)
    elif t.schedule != "constant":
        raise SystemExit(f"no JoeyNMT equivalent written for train.schedule {t.schedule!r}")
    if m.family == "transformer":
        tr = m.transformer
        if tr.positions != "sinusoidal" or tr.activation != "relu":
            raise SystemExit("JoeyNMT's Transformer has sinusoidal positions and ReLU only")
        block = lambda n: {  # noqa: E731
            "type": "transformer", "num_layers": n, "num_heads": tr.h, "hidden_size": tr.d_model,
            "ff_size": tr.d_ff, "dropout": tr.dropout, "layer_norm": tr.norm,
            "embeddings": {"embedding_dim": tr.d_model, "scale": True, "dropout": tr.dropout}}
        model = {"initializer": "xavier_uniform", "embed_initializer": "xavier_uniform", "bias_initializer": "zeros",
                 "tied_embeddings": tr.tie_embeddings == "all",
                 "tied_softmax": tr.tie_embeddings in ("decoder", "all"),
                 "encoder": block(tr.enc_layers), "decoder": block(tr.dec_layers)}
    else:
        r = m.rnn
        if r.attention != "bahdanau" or r.cell not in ("gru", "lstm"):
            raise SystemExit("only the Bahdanau GRU/LSTM model has a JoeyNMT counterpart here")
        emb = {"embedding_dim": r.emb_dim, "scale": False}
        model = {"initializer": "xavier_uniform", "embed_initializer": "normal", "bias_initializer": "zeros",
                 "tied_embeddings": False, "tied_softmax": False,
                 "encoder": {"type": "recurrent", "rnn_type": r.cell, "embeddings": emb,
                             "hidden_size": r.hidden_dim, "bidirectional": r.bidirectional,
                             "num_layers": r.enc_layers, "dropout": r.dropout},
                 "decoder": {"type": "recurrent", "rnn_type": r.cell, "embeddings": emb,
                             "hidden_size": r.hidden_dim, "attention": "bahdanau", "num_layers": r.dec_layers,
                             "dropout": r.dropout, "hidden_dropout": r.dropout, "init_hidden": "bridge",
                             "input_feeding": False}}
    d = cfg.decode
    return {
        "name": f"peers-{m.family}", "joeynmt_version": "2.3.0", "use_cuda": False, "fp16": False,
        "normalization": "tokens",  # attnlab divides the summed loss by the target tokens
        "model_dir": str(out / "model"), "random_seed": t.seed,
        "data": {"train": str(out / "data" / "train"), "dev": str(out / "data" / "dev"),
                 "test": str(out / "data" / "test"), "dataset_type": "plain", "sample_dev_subset": -1,
                 "src": side("en"), "trg": side("es"),
                 "special_symbols": {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>", "pad_id": 1,
                                     "bos_token": "<s>", "bos_id": 2, "eos_token": "</s>", "eos_id": 3}},
        "testing": {"n_best": 1, "beam_size": d.beam_size, "beam_alpha": d.length_penalty,
                    # attnlab's own CPU choice when decode.batch_size is 0 ("by device"): JoeyNMT needs a number
                    "batch_size": batch_size_for(d, torch.device("cpu")), "batch_type": "sentence",
                    "max_output_length": -1,
                    "eval_metrics": ["bleu", "chrf"], "sacrebleu_cfg": {"tokenize": "13a"},
                    "load_model": str(out / "model" / "latest.ckpt")},  # the weights at the deadline
        "training": training, "model": model}


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
    return {"updates": int(steps), "target_tokens": int(tokens), "window_rates": rates,
            "validations": len(JOEY_VALID.findall(log_text)),
            "validation_s": sum(float(x) for x in JOEY_VALID.findall(log_text))}


def decode_joeynmt(python: Path, config: dict, out: Path, threads: int) -> tuple[list[str], float]:
    """Beam search over the test split with the last weights; returns (hypotheses, seconds). The config has no
    dev set, so JoeyNMT's `test` decodes the test split only."""
    test_config = {**config, "data": {k: v for k, v in config["data"].items() if k != "dev"}}
    config = out / "config_test.yaml"
    config.write_text(_yaml(test_config) + "\n", encoding="utf-8")
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
    ap.add_argument("--minutes", type=float, required=True, help="training wall time of each toolkit")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads of both toolkits")
    ap.add_argument("--json", type=Path, required=True, help="where the results go")
    ap.add_argument("--work", type=Path, default=HERE / "work", help="data, checkpoints and logs")
    ap.add_argument("--joeynmt-python", type=Path, default=HERE / ".venv-joeynmt" / "bin" / "python")
    ap.add_argument("--max-test", type=int, default=0, help="score only the first N test verses (smoke tests)")
    ap.add_argument("--attnlab-procs", type=int, default=1,
                    help="attnlab trains as N data-parallel processes (train --procs N) sharing --threads")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra attnlab overrides (applied to both toolkits' configs)")
    args = ap.parse_args()
    if not args.joeynmt_python.exists():
        raise SystemExit(f"{args.joeynmt_python} not found: run `bash benchmarks/peers/setup_joeynmt.sh` first")

    cfg = load_experiment(args.config, [f"train.max_minutes={args.minutes}", *args.overrides])
    out = (args.work / f"{args.config.stem}-{args.minutes:g}min").resolve()
    jdir = out / "joeynmt"
    if jdir.exists():
        shutil.rmtree(jdir)
    jdir.mkdir(parents=True)
    print(f"exporting attnlab's split and tokenizer of {args.config} to {jdir}", file=sys.stderr)
    sizes = export_data(cfg, jdir, args.max_test)
    config_path = jdir / "config.yaml"
    joey_cfg = joeynmt_config(cfg, jdir)
    config_path.write_text(_yaml(joey_cfg) + "\n", encoding="utf-8")

    result: dict = {
        "config": str(args.config), "minutes": args.minutes, "threads": args.threads, "data": sizes,
        "machine": {"cpu": _cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "host": platform.node()},
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": _commit(),
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
        "config_yaml": config_path.read_text()}
    print(f"  JoeyNMT: {stats['updates']} updates, test BLEU {scores.bleu:.2f}", file=sys.stderr)

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
        "same_tokenizer_bytes_as_joeynmt": same_tokenizer, "loadavg_after": loadavg()}
    j, at = result["joeynmt"], result["attnlab"]
    result["ratio_tokens_per_s_attnlab_over_joeynmt"] = at["tokens_per_s"] / j["tokens_per_s"]
    result["ratio_tokens_per_budget_s_attnlab_over_joeynmt"] = at["tokens_per_budget_s"] / j["tokens_per_budget_s"]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")

    print(f"{args.config} for {args.minutes:g} min, {args.threads} threads, {result['machine']['cpu']}")
    print(f"{'toolkit':<13} {'tok/s':>8} {'tok/s budget':>12} {'updates':>8} {'BLEU':>6} {'chrF':>6}")
    for name, r in (("JoeyNMT 2.3", j), ("attnlab", at)):
        print(f"{name:<13} {r['tokens_per_s']:>8.0f} {r['tokens_per_budget_s']:>12.0f} {r['updates']:>8} "
              f"{r['bleu']:>6.2f} {r['chrf']:>6.2f}")
    print(f"attnlab / JoeyNMT tokens/s: {result['ratio_tokens_per_s_attnlab_over_joeynmt']:.2f}x "
          f"(budget: {result['ratio_tokens_per_budget_s_attnlab_over_joeynmt']:.2f}x); written {args.json}")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _joeynmt_versions(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import joeynmt, torch, sentencepiece as s; "
                           "print(f'joeynmt {joeynmt.__version__}, torch {torch.__version__}, "
                           "sentencepiece {s.__version__}')"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
