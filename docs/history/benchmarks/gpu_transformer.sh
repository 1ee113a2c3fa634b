#!/usr/bin/env bash
# The GPU figures of docs/results.md (Transformer section), in the order they were taken, on one GPU.
# Needs the Bible corpus in the cache (ATTNLAB_CACHE, built by `attnlab data bible` on a machine with the SWORD
# packages). Usage: benchmarks/gpu_transformer.sh OUT_DIR [bench|base] [extra --set overrides for the base run]
set -uo pipefail
out=${1:?OUT_DIR}; what=${2:-all}; shift 2 || true
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$py -c "import torch; print('torch', torch.__version__)" | tee -a "$out/gpu.txt"
if [ "$what" = all ] || [ "$what" = bench ]; then
  # speed: attnlab vs torch.nn.Transformer at base dims, bf16, eager then compiled; decoding with/without cache
  $py benchmarks/transformer_bench.py --device cuda --amp bf16 --batch 256 --src-len 48 --tgt-len 48 --steps 20 \
      --peak-tflops 989 --decode-sentences 64 2>&1 | tee "$out/bench_eager.txt"
  $py benchmarks/transformer_bench.py --device cuda --amp bf16 --batch 256 --src-len 48 --tgt-len 48 --steps 20 \
      --peak-tflops 989 --compile --skip-decode 2>&1 | tee "$out/bench_compiled.txt"
  $py benchmarks/attention_bench.py --device cuda --batch 64 --len 128 2>&1 | tee "$out/attention_bench.txt"
fi
if [ "$what" = all ] || [ "$what" = base ]; then
  # time to quality: base dims on the Bible, dev BLEU (greedy) every ~epoch, then test BLEU (beam 5 and greedy)
  run=runs/gpu/base
  rm -rf "$run"
  $py -m attnlab train configs/gpu/bible-transformer-base.toml --out "$run" --set train.progress=false "$@" \
      2>&1 | tee "$out/base_train.txt"
  cp "$run/metrics.jsonl" "$out/base_metrics.jsonl"
  $py -m attnlab evaluate "$run" --split test 2>&1 | tee "$out/base_test_beam5.txt"
  $py -m attnlab evaluate "$run" --split test --beam 1 --json > "$out/base_test_greedy.json"
fi
