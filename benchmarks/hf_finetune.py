#!/usr/bin/env python
"""An imported MarianMT model fine-tuned on 2,000 Bible pairs (issue 38, "Must show" 4): dev BLEU before and after,
and a fine-tune stopped and resumed against the uninterrupted one, bit for bit.

    python benchmarks/hf_finetune.py [--work runs/hf_finetune] [--base-minutes 10] [--steps 300] [--json OUT]

No internet: the MarianMT model is made here. A small post-norm SiLU Transformer (MarianMT's layout) is trained on
the KJV pairs for --base-minutes (`attnlab train`), exported with `attnlab export --to huggingface` (a MarianMT
folder: config.json, model.safetensors, source.spm/target.spm, vocab.json) and brought back with `attnlab import`
(what a user does with an OPUS-MT folder). That run is fine-tuned with `attnlab train CONFIG --init RUN_DIR` on
2,000 WEB-source pairs (`data.english = "web"`, `data.max_train_pairs = 2000`) for --steps updates, and a second
fine-tune stops after half of them and is resumed (`attnlab train --resume`). Dev BLEU (beam 5, every dev verse)
from the WEB and the KJV English, before (the imported run) and after, with `attnlab evaluate --json`.

Every step is the command line, run as a subprocess; the commands, their wall times and outputs go to --json (one
object) and each step as it ends to OUT's .jsonl twin. A step whose output exists in --work is not run again (the
base model is the slow part): delete --work to start over.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from attnlab.core.checkpoint import resolve_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_json_line, commit, machine, write_json  # noqa: E402

ATTNLAB = [sys.executable, "-m", "attnlab"]
BASE_SETS = [  # MarianMT's layout (post-norm, SiLU = swish, sinusoidal positions, one shared embedding), small
    "model.transformer.norm=post", "model.transformer.activation=silu", "model.transformer.d_model=128",
    "model.transformer.h=4", "model.transformer.d_ff=512", "model.transformer.enc_layers=2",
    "model.transformer.dec_layers=2", "model.transformer.dropout=0.1", "train.amp=none", "train.warmup_steps=200",
    "train.eval_every=200", "train.eval_max_sentences=100", "train.progress=false", "train.num_threads=1"]
FINETUNE = """\
# Fine-tuning an imported MarianMT run: no [model] or [tokenizer] (they are the run's, attnlab train --init RUN_DIR)
[data]
corpus = "bible"
english = "web"          # the World English Bible as the source side: a rendering the base model never saw
max_train_pairs = 2000   # a seeded random subset of the training pairs (dev and test stay whole)
subset_seed = 0

[train]
max_steps = {steps}
max_tokens = 2000
optimizer = "adamw"
lr = 0.0003
adam_beta2 = 0.98
schedule = "constant"
clip_norm = 1.0
label_smoothing = 0.1
eval_every = {eval_every}
eval_max_sentences = 100
keep_last = 1
amp = "none"
num_threads = 1
progress = false

[decode]
beam_size = 5
length_penalty = 0.6
"""


class Steps:
    """Runs `attnlab` commands, records each (command, seconds, parsed JSON output) and appends it to a JSONL."""

    def __init__(self, jsonl: Path | None) -> None:
        self.records: list[dict] = []
        self.jsonl = jsonl

    def run(self, name: str, args: list[str], json_out: bool = False, skip_if: Path | None = None) -> dict:
        command = "attnlab " + shlex.join(args)
        if skip_if is not None and skip_if.exists():
            record = {"step": name, "command": command, "skipped": f"{skip_if} exists"}
        else:
            print(f"[{name}] {command}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            done = subprocess.run([*ATTNLAB, *args], capture_output=True, text=True)
            record = {"step": name, "command": command, "seconds": round(time.perf_counter() - t0, 1),
                      "rc": done.returncode}
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"[{name}] exited with {done.returncode}")
            if json_out:
                record["result"] = json.loads(done.stdout)
            record["log_tail"] = done.stderr.strip().splitlines()[-3:]
        self.records.append(record)
        append_json_line(self.jsonl, record)
        return record


def updates(run_dir: Path) -> int:
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]


def dev_bleu(steps: Steps, name: str, run_dir: Path, source: str, beam: int, sentences: int) -> dict:
    result = steps.run(name, ["evaluate", str(run_dir), "--split", "dev", "--source", source, "--beam", str(beam),
                              "--max-sentences", str(sentences), "--json"], json_out=True)["result"]
    keep = ("split", "source", "trained_on", "sentences", "beam", "checkpoint", "bleu", "chrf", "bleu_signature")
    return {k: result[k] for k in keep}


def same_weights(a: Path, b: Path) -> dict:
    """Whether two runs' last checkpoints hold the same tensors, bit for bit; the largest difference if not."""
    wa, wb = load_file(str(resolve_checkpoint(a, "last"))), load_file(str(resolve_checkpoint(b, "last")))
    diff = max((float((wa[k].double() - wb[k].double()).abs().max()) for k in wa if k in wb), default=0.0)
    return {"tensors": len(wa), "same_names": sorted(wa) == sorted(wb),
            "bit_equal": sorted(wa) == sorted(wb) and all(torch.equal(wa[k], wb[k]) for k in wa),
            "max_abs_diff": diff}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("runs/hf_finetune"), help="the runs (default runs/hf_finetune)")
    p.add_argument("--base-minutes", type=float, default=10.0, help="training time of the base model (default 10)")
    p.add_argument("--steps", type=int, default=300, help="fine-tuning updates (default 300)")
    p.add_argument("--beam", type=int, default=5, help="beam of the dev BLEU (default 5)")
    p.add_argument("--dev-sentences", type=int, default=0, help="score the first N dev verses (default 0: all)")
    p.add_argument("--json", type=Path, help="write the result here (and each step to its .jsonl twin)")
    args = p.parse_args()
    work, half = args.work, args.steps // 2
    work.mkdir(parents=True, exist_ok=True)
    steps = Steps(args.json.with_suffix(".jsonl") if args.json else None)
    if steps.jsonl is not None:
        steps.jsonl.parent.mkdir(parents=True, exist_ok=True)
        steps.jsonl.write_text("")
    base, marian, imported = work / "base", work / "marian", work / "imported"
    straight, halves = work / "finetune", work / "finetune-halves"
    config = work / "finetune-web2000.toml"
    config.write_text(FINETUNE.format(steps=args.steps, eval_every=half))

    steps.run("base: train a MarianMT-shaped Transformer on KJV pairs",
              ["train", "bible-transformer-small", "--out", str(base), "--set", f"train.max_minutes={args.base_minutes}",
               *(x for s in BASE_SETS for x in ("--set", s))], skip_if=base / "checkpoints" / "latest.json")
    steps.run("export to Hugging Face (MarianMT)", ["export", str(base), "--to", "huggingface", "--out", str(marian)],
              skip_if=marian / "model.safetensors")
    steps.run("import the MarianMT folder", ["import", str(marian), "--out", str(imported)], skip_if=imported)
    before = {s: dev_bleu(steps, f"before: dev BLEU, {s} source", imported, s, args.beam, args.dev_sentences)
              for s in ("web", "kjv")}
    steps.run(f"fine-tune {args.steps} updates", ["train", str(config), "--init", str(imported), "--out", str(straight)],
              skip_if=straight / "checkpoints" / "latest.json")
    steps.run(f"fine-tune, stopped after {half}", ["train", str(config), "--init", str(imported), "--out", str(halves),
                                                   "--set", f"train.max_steps={half}"],
              skip_if=halves / "checkpoints" / "latest.json")
    steps.run(f"resume to {args.steps}", ["train", "--resume", str(halves), "--set", f"train.max_steps={args.steps}"])
    after = {s: dev_bleu(steps, f"after: dev BLEU, {s} source", straight, s, args.beam, args.dev_sentences)
             for s in ("web", "kjv")}
    result = {
        "what": "an imported MarianMT model fine-tuned on 2,000 WEB-source Bible pairs (issue 38)",
        "date": datetime.date.today().isoformat(), "commit": commit(), "machine": machine(),
        "base_updates": updates(base), "base_config": {"name": "bible-transformer-small", "sets": BASE_SETS,
                                                       "max_minutes": args.base_minutes},
        "finetune_config": config.read_text(), "finetune_updates": updates(straight),
        "dev_bleu": {"before": before, "after": after},
        "resume": {"stopped_at": half, "resumed_to": updates(halves), **same_weights(straight, halves)},
        "steps": steps.records,
    }
    print(write_json(args.json, result, indent=2))


if __name__ == "__main__":
    main()
