#!/bin/bash
# side-by-side: the same venv, the old (0e24c85) and new src, the demo config for 100 updates, tokens/s of updates 1-50 and 51-100
cd "$(dirname "$0")/../.."  # the repo; /tmp/oldtree: `git worktree add /tmp/oldtree 0e24c85`
for round in 1 2; do
for tree in /tmp/oldtree "$PWD"; do
  out=/tmp/speed_$(basename $tree)_$round
  rm -rf $out
  PYTHONPATH=$tree/src .venv/bin/python -m attnlab.cli train $tree/configs/demo.toml --out $out \
    --set train.max_minutes=0 --set train.max_steps=100 --set train.eval_every=100000 --set train.progress=false \
    --set train.log_every=50 > /dev/null 2>&1
  echo "$tree round $round: $(grep -o '"tokens_per_s": [0-9.]*' $out/metrics.jsonl | tr '\n' ' ')"
done
done
