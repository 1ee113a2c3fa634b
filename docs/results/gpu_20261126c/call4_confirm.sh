#!/usr/bin/env bash
# cold `attnlab evaluate` after the cold-start changes (f14274c): a 1-minute base run, then fresh processes
set -u
out=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/.gpusrc/src ATTNLAB_CACHE=$PWD/.gpu/cache PYTHONUNBUFFERED=1
cd .gpusrc
exec > >(tee -a "$out/log.txt") 2>&1
date -u +%FT%TZ; nvidia-smi --query-gpu=name --format=csv,noheader
wall() { awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME - $1}"; }
s=$EPOCHREALTIME
timeout 120 python3 -m attnlab train configs/gpu/bible-transformer-base.toml --out runs/gpu/base-1min \
  --set train.progress=false --set train.max_minutes=1; echo "== train exit $? wall $(wall $s)"
cp runs/gpu/base-1min/metrics.jsonl "$out/metrics_1min.jsonl"
for tag in 1 2; do
  s=$EPOCHREALTIME
  timeout 45 python3 -m attnlab evaluate runs/gpu/base-1min --split test --json > "$out/eval_$tag.json"
  echo "== evaluate $tag (decode.batch_size by device): exit $? wall $(wall $s)"
done
s=$EPOCHREALTIME
timeout 45 python3 -m attnlab evaluate runs/gpu/base-1min --split test --batch-size 256 --json > "$out/eval_256.json"
echo "== evaluate --batch-size 256: exit $? wall $(wall $s)"
timeout 40 python3 - <<'PY'
import time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter(); print(f"import torch + cuda init {t1 - t0:.2f}s")
import attnlab.app.cli  # noqa: F401
t2 = time.perf_counter(); print(f"import attnlab.app.cli {t2 - t1:.2f}s")
from attnlab import load
run = load("runs/gpu/base-1min", device="cuda")
t3 = time.perf_counter(); print(f"load {t3 - t2:.2f}s")
for tag in ("all 918 cold", "all 918 again"):
    s = time.perf_counter(); r = run.evaluate("test"); torch.cuda.synchronize()
    print(f"{tag}: {time.perf_counter() - s:.2f}s bleu {r['bleu']:.2f}")
PY
