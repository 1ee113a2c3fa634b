#!/usr/bin/env bash
# One 2-thread training process against two 1-thread processes (`attnlab train --procs 2`, gloo) on this machine,
# for the demo GRU and the small Transformer (issue 23, item 2). Each run's metrics.jsonl lines are appended to
# OUT tagged with config, procs and threads, and a summary line per run gives the mean target tokens/s after the
# first 20 updates (the trainer logs the rate of all ranks together: rank 0's tokens x the number of ranks).
#   bash benchmarks/procs_bench.sh OUT.jsonl [demo:100 bible-transformer-small:40 ...]
set -euo pipefail
out="${1:?usage: procs_bench.sh OUT.jsonl [CONFIG:STEPS ...]}"
shift
if [ $# -gt 0 ]; then runs=("$@"); else runs=(demo:100 bible-transformer-small:40); fi
attnlab="${ATTNLAB:-.venv/bin/attnlab}"
python="${PYTHON:-.venv/bin/python}"
cores="$(nproc)"
: > "$out"
for spec in "${runs[@]}"; do
  config="${spec%%:*}" steps="${spec##*:}"
  for procs in 1 "$cores"; do
    dir="runs/procs_bench/$config-$procs"
    rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
    "$attnlab" train "$config" --procs "$procs" --out "$dir" --set train.max_steps="$steps" \
      --set train.max_minutes=0 --set train.log_every=10 --set train.eval_every=100000 > "$dir.log" 2>&1
    "$python" - "$dir/metrics.jsonl" "$out" "$config" "$procs" "$cores" <<'PY'
import json, sys
path, out, config, procs, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(x) for x in open(path, encoding="utf-8") if '"tokens_per_s"' in x]
with open(out, "a", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps({**r, "config": config, "procs": procs, "threads_each": cores // procs}) + "\n")
    rate = [r["tokens_per_s"] for r in rows if r["step"] > 20]
    summary = {"summary": True, "config": config, "procs": procs, "threads_each": cores // procs,
               "target_tokens_per_s": round(sum(rate) / len(rate), 1), "last_loss": rows[-1]["loss"]}
    f.write(json.dumps(summary) + "\n")
    print(json.dumps(summary))
PY
  done
done
