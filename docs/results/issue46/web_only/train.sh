#!/usr/bin/env bash
# WEB-only ceiling trial for issue 46: the shipped recipe with data.english = ["web"], two at a time, one thread each.
set -euo pipefail
cd /tmp/attnlab-src
export PYTHONPATH=/tmp/attnlab-src/src
OUT=/work/main/runs/p46c
A=/work/main/.venv/bin/attnlab
( while true; do printf '{"time": "%s", "load1": %s, "training": "transformer_web bahdanau_web"}\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1 /proc/loadavg)" >> $OUT/load.jsonl; sleep 60; done ) &
L=$!
trap 'kill $L' EXIT
$A train pretrained/transformer --out $OUT/transformer --set 'data.english=["web"]' > $OUT/transformer.log 2>&1 &
p1=$!
$A train pretrained/bahdanau --out $OUT/bahdanau --set 'data.english=["web"]' > $OUT/bahdanau.log 2>&1 &
p2=$!
wait $p1; wait $p2
echo done
