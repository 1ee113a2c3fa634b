#!/usr/bin/env bash
# One training of CONFIG for STEPS updates in one process of THREADS threads, no validation, into a temporary run
# folder; prints one JSON line: the mean target tokens/s of the log records after the first fifth of the updates,
# and the last logged loss. Written for `benchmarks/ab.py`, which runs it in two checkouts in turn:
#   python benchmarks/ab.py REV_A REV_B --metric target_tokens_per_s --metric last_loss --rounds 3 -- \
#       bash benchmarks/train_rate.sh demo 150 2
# (python is the interpreter ab.py puts first on PATH; the checkout's own attnlab comes from its PYTHONPATH).
set -euo pipefail
config="${1:?usage: train_rate.sh CONFIG [STEPS] [THREADS]}"
steps="${2:-150}"
threads="${3:-2}"
run="$(mktemp -d)"
trap 'rm -rf "$run"' EXIT
python -m attnlab.app.cli train "$config" --out "$run/run" --set train.max_steps="$steps" --set train.max_minutes=0 \
  --set train.log_every=10 --set train.eval_every=1000000 --set train.num_threads="$threads" > "$run/log" 2>&1 \
  || { tail -5 "$run/log" >&2; exit 1; }
python - "$run/run/metrics.jsonl" "$steps" <<'PY'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1], encoding="utf-8") if '"tokens_per_s"' in x]
rate = [r["tokens_per_s"] for r in rows if r["step"] > int(sys.argv[2]) // 5]
print(json.dumps({"target_tokens_per_s": round(sum(rate) / len(rate), 1), "last_loss": rows[-1]["loss"],
                  "records": len(rate)}))
PY
