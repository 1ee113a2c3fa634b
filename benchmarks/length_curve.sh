#!/usr/bin/env bash
# BLEU by source length along a training: every checkpoint of RUN_DIR whose step is a multiple of EVERY (and the
# last), each evaluated on its own (no averaging) on the test split with the run's decoding (attnlab evaluate:
# beam and length penalty of the run's [decode], KJV and WEB source). Each step becomes a run folder OUT/step_N
# (the run's config and tokenizer, that one checkpoint as best and latest), so anything that reads a run reads it;
# then benchmarks/length_fall.py gives each step's fall from 11-20 to 31+ words with its bootstrap interval.
# Train with --set train.keep_last=K large enough to keep the checkpoints wanted (one each train.eval_every).
#
#     bash benchmarks/length_curve.sh RUN_DIR OUT EVERY     # e.g. runs/p46l/noattn runs/p46l/curve 1600
set -euo pipefail
RUN=$1 OUT=$2 EVERY=$3
ATTNLAB=${ATTNLAB:-.venv/bin/attnlab}
PYTHON=${ATTNLAB%/attnlab}/python
latest=$("$PYTHON" -c "import sys; from pathlib import Path; from attnlab.core.checkpoint import read_pointer
print(read_pointer(Path(sys.argv[1]), 'latest.json')['step'])" "$RUN/checkpoints")
mkdir -p "$OUT"
dirs=()
for file in "$RUN"/checkpoints/step_*.safetensors; do
    name=$(basename "$file" .safetensors)
    case $name in *.train) continue ;; esac
    step=$((10#${name#step_}))
    if [ $((step % EVERY)) -ne 0 ] && [ "$step" -ne "$latest" ]; then continue; fi
    dir=$OUT/$name
    if [ ! -f "$dir/eval/test.hyp.txt" ]; then
        rm -rf "$dir" && mkdir -p "$dir/checkpoints"
        cp -r "$RUN/config.json" "$RUN/tokenizer" "$dir/"
        cp "$file" "$RUN/checkpoints/$name.json" "$dir/checkpoints/"
        "$PYTHON" -c "import sys; from pathlib import Path; from attnlab.core.checkpoint import write_best, write_latest
run, step = Path(sys.argv[1]), int(sys.argv[2]); write_latest(run / 'checkpoints', step, run)
write_best(run / 'checkpoints', step, None)" "$dir" "$step"  # the one writer of each pointer
        OMP_NUM_THREADS=1 "$ATTNLAB" evaluate "$dir" --split test > "$dir.eval.log" 2>&1
    fi
    dirs+=("$dir")
done
"$PYTHON" "$(dirname "$0")/length_fall.py" "${dirs[@]}" --json "$OUT/length_fall.jsonl"
