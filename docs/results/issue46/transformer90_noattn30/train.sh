#!/usr/bin/env bash
# Issue 46 trials, one pair: the shipped Transformer run resumed for 45 more minutes (90 in all), beside the model
# without attention trained with verses of at most 30 words (Bahdanau et al. 2015's RNNencdec-30, the lecture's figure).
set -euo pipefail
cd /tmp/attnlab-src
export PYTHONPATH=/tmp/attnlab-src/src
OUT=/work/main/runs/p46r
A=/work/main/.venv/bin/attnlab
( while true; do printf '{"time": "%s", "load1": %s, "training": "transformer (resumed to 90 min) noattn (max_words 30)"}\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1 /proc/loadavg)" >> $OUT/load.jsonl; sleep 60; done ) &
L=$!
trap 'kill $L' EXIT
$A train --resume $OUT/transformer --set train.max_minutes=90 > $OUT/transformer.log 2>&1 &
p1=$!
$A train pretrained/noattn --out $OUT/noattn30 --set data.max_words=30 > $OUT/noattn30.log 2>&1 &
p2=$!
wait $p1; wait $p2
echo done
