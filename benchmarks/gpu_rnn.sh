#!/usr/bin/env bash
# The RNN comparison on one GPU (docs/results.md): no attention, Bahdanau and Luong (configs/gpu/), trained at
# once on the same GPU with the same step budget, then test BLEU (beam 5). Usage: benchmarks/gpu_rnn.sh OUT_DIR STEPS
set -uo pipefail
out=${1:?OUT_DIR}; steps=${2:-800}
mkdir -p "$out"
py=${PYTHON:-python3}
for m in noattn bahdanau luong; do
  ( rm -rf runs/gpu/$m
    $py -m attnlab train configs/gpu/bible-rnn-$m.toml --out runs/gpu/$m --set train.progress=false \
        --set train.max_steps=$steps --set train.eval_every=$((steps / 2)) --set train.max_minutes=${RNN_MINUTES:-20}
    $py -m attnlab evaluate runs/gpu/$m --split test ) > "$out/rnn_$m.txt" 2>&1 &
done
wait
tail -n 14 "$out"/rnn_*.txt
