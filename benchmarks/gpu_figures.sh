#!/usr/bin/env bash
# The open GPU figures of docs/results.md in one call of a lent GPU machine, inside a fixed time budget:
#   1. the 2-minute Transformer: configs/gpu/bible-transformer-base.toml trained for MINUTES minutes
#      (train.max_minutes), then `attnlab evaluate RUN --split test` (beam 5, BLEU/chrF, sentences/s) as a user runs it;
#   2. the 918 test verses decoded greedy and beam 5 at decode batch sizes 256 and 1024, fp32 and bf16, timed after a
#      warm-up (benchmarks/decode_batch.py); with REFERENCE_SEARCH=FILE (another version's search.py) side by side;
#   3. the trainer's own update on real batches (benchmarks/trainer_steps.py): the first shapes' warm-up, and reading
#      the loss every update against once per block, side by side;
#   4. with VARIANT="--set KEY=VALUE ...": the 2-minute training and evaluation again with those overrides;
#   5. unless SKIP_HARNESS=1: the harness table at base dims: benchmarks/transformer_bench.py as the H100 table of
#      docs/results.md ran it (attnlab against torch.nn.Transformer, bf16, batches of 256 x 48 tokens, eager with
#      decoding, then compiled), and benchmarks/train_bench.py on real Bible batches (eager, bucketed, packed and with
#      train.fused_loss; MFU against the measured bf16 peak); near the end, the same compiled beside
#      torch.nn.Transformer compiled on the grid of shapes (--length-multiple 16: few shapes to compile).
#   6. whether CTranslate2's GPU decode can run on this image (its wheels load cuBLAS 12).
# Each step has its own time limit cut to what is left of BUDGET seconds, so a step that fails or hangs leaves the
# others their time; everything goes to OUT_DIR (a handful of files: the limits of the device tool).
# Needs the Bible corpus in $ATTNLAB_CACHE (built by `attnlab data bible` where the SWORD packages are), and the
# packages the GPU image lacks, carried as wheels: pysword, fastapi with opentelemetry-api (fastapi imports it),
# starlette, uvicorn, pydantic, pydantic-core, typing-inspection, annotated-types (the CLI imports the server).
#
#   [REFERENCE_SEARCH=F] [VARIANT="--set K=V"] [SKIP_HARNESS=1] benchmarks/gpu_figures.sh OUT_DIR [BUDGET_S=560] [MINUTES=2]
#       [extra train --set overrides...]
set -uo pipefail
out=${1:?OUT_DIR}; budget=${2:-560}; minutes=${3:-2}; shift 3 2>/dev/null || shift $#
py=${PYTHON:-python3}
config=${CONFIG:-configs/gpu/bible-transformer-base.toml}  # CONFIG=... DEVICE=cpu: a dry run of the script on a CPU
device=${DEVICE:-cuda}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
start=$SECONDS
left() { echo $(( budget - (SECONDS - start) )); }
step() {  # step NAME MAX_SECONDS CMD...: run CMD under min(MAX, what is left) seconds, log its time and status
  local name=$1 max=$2; shift 2
  local t=$(left); (( t > max )) && t=$max
  if (( t < 20 )); then echo "== $name: skipped, ${t}s left"; return; fi
  echo "== $name (limit ${t}s, $(( SECONDS - start ))s into the budget): $*"
  local t0=$EPOCHREALTIME
  timeout -k 5 "$t" "$@"; local rc=$?
  echo "== $name: exit $rc after $(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME - $t0}")s"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
$py -c "import torch, platform; print('torch', torch.__version__, 'python', platform.python_version(), 'cuda',
torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
git rev-parse --short HEAD 2>/dev/null || true
date -u +%FT%TZ

train_and_evaluate() {  # train_and_evaluate RUN_DIR TAG [train overrides...]: the 2-minute run and its test BLEU
  local run=$1 tag=$2; shift 2
  rm -rf "$run"
  step "train$tag" 300 $py -m attnlab train "$config" --out "$run" \
      --set train.progress=false --set "train.max_minutes=$minutes" "$@"
  cp "$run/metrics.jsonl" "$out/metrics$tag.jsonl" 2>/dev/null
  # the cold start as a user meets it: a fresh process, model loading included; every 20 s a stack dump shows
  # where a slow one is (faulthandler)
  step "evaluate$tag" 75 sh -c "$py -X faulthandler -c 'import faulthandler, runpy, sys
faulthandler.dump_traceback_later(20, repeat=True)
sys.argv = [\"attnlab\", \"evaluate\", \"$run\", \"--split\", \"test\", \"--json\"]
runpy.run_module(\"attnlab\", run_name=\"__main__\")' > '$out/eval_test$tag.json'"
  # the same evaluation through the Python API in a fresh process: on the H200 (f14274c) the command decoded at 36
  # verses/s and the API at 350, because the command's --device default had become cpu (fixed 2d97175)
  step "evaluate-api$tag" 45 $py -c "import time; t = time.perf_counter(); import attnlab
r = attnlab.load('$run', device='auto').evaluate('test')
print('api evaluate: %.2f s, %.1f verses/s' % (time.perf_counter() - t, r['sentences_per_s']))"
}
run=runs/gpu/base-${minutes}min
train_and_evaluate "$run" "" "$@"
reference=()
[[ -n "${REFERENCE_SEARCH:-}" ]] && reference=(--reference-search "$REFERENCE_SEARCH")
step decode 90 $py benchmarks/decode_batch.py "$run" --device "$device" --batch-sizes 256,1024 --warmup 64 \
    "${reference[@]}" --json "$out/decode_batch.json"
step decode-bf16 90 $py benchmarks/decode_batch.py "$run" --device "$device" --batch-sizes 256,1024 --warmup 64 \
    --amp bf16 --json "$out/decode_batch_bf16.json"
if [[ -n "${VARIANT:-}" ]]; then
  # shellcheck disable=SC2086  # VARIANT is a list of words
  train_and_evaluate "runs/gpu/variant-${minutes}min" "_variant" "$@" $VARIANT
fi
if [[ -z "${SKIP_HARNESS:-}" ]]; then
  # the H100 table's own commands (synthetic batches of fixed shape, base dims): eager with decoding, then compiled
  step bench-eager 60 $py benchmarks/transformer_bench.py --device "$device" --amp bf16 --batch 256 --src-len 48 \
      --tgt-len 48 --steps 20 --peak-tflops 989 --decode-sentences 64
  step bench-compiled 150 $py benchmarks/transformer_bench.py --device "$device" --amp bf16 --batch 256 \
      --src-len 48 --tgt-len 48 --steps 20 --peak-tflops 989 --compile --skip-decode
  step harness-eager 90 $py benchmarks/train_bench.py --config "$config" \
      --device "$device" --amp bf16 --pack --fused-loss --steps 20 --warmup 3 --json "$out/harness_eager.json"
fi
# the must-show's own comparison: real Bible batches, compiled, against torch.nn.Transformer compiled; on the grid of
# shapes (train.length_multiple = 16), so that the compiled variants meet a few shapes (before the diagnostics below)
if [[ -z "${SKIP_HARNESS:-}" ]]; then
  step harness-compiled 150 $py benchmarks/train_bench.py --config "$config" --device "$device" --amp bf16 \
      --compile --length-multiple 16 --steps 20 --warmup 5 --json "$out/harness_compiled.json"
fi
# the first meeting of each batch shape (cuDNN's attention, which plans per shape, is kept out since a886aaa)
step trainer-steps 90 $py benchmarks/trainer_steps.py "$config" --device "$device" --first 80 --block 25 \
    --rounds 4 --json "$out/trainer_steps.json"
# CTranslate2 on this GPU: its wheels load cuBLAS 12 at run time (libcublas.so.12); say whether this image has it
step ct2-cublas 20 $py -c "import ctypes
try:
    ctypes.CDLL('libcublas.so.12'); print('libcublas.so.12: found')
except OSError as e:
    print('libcublas.so.12: not loadable:', e)"
echo "== done after $(( SECONDS - start ))s"
