#!/usr/bin/env bash
# the same record as scripts/train_pretrained.sh's, while the given PIDs live
OUT=/work/main/runs/p46s; TRAINING="$1"; shift
while true; do
  alive=0; for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive = 1 ] || break
  printf '{"time": "%s", "load1": %s, "training": "%s"}\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1 /proc/loadavg)" "$TRAINING" >> "$OUT/load.jsonl"
  sleep 60
done
