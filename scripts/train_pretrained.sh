#!/usr/bin/env bash
# Trains the four models that ship with attnlab with one recipe: configs/pretrained/NAME.toml (the same data,
# English KJV + WEB to Spanish, verses of at most 50 words; train.max_minutes and train.num_threads = 1 alike), two
# trainings at a time on a machine where nothing else runs, and records the load once a minute beside them.
#
#     bash scripts/train_pretrained.sh            # runs/pretrained/NAME, runs/pretrained/load.jsonl
#     OUT=DIR PAIRS="transformer,luong bahdanau,noattn" bash scripts/train_pretrained.sh
#
# A run that exists is resumed where it stopped (resume is exact) for the minutes left of the recipe's
# train.max_minutes, so a killed session loses nothing and a longer budget extends the runs. Then
# `python scripts/pack_pretrained.py` evaluates and packs them into src/attnlab/trained/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/pretrained}
ATTNLAB=${ATTNLAB:-.venv/bin/attnlab}
PAIRS=${PAIRS:-"transformer,luong bahdanau,noattn"}
mkdir -p "$OUT"

record_load() {  # one JSON line a minute: the time, the 1-minute load, and what is training
    while true; do
        printf '{"time": "%s", "load1": %s, "training": "%s"}\n' "$(date -u +%FT%TZ)" \
            "$(cut -d' ' -f1 /proc/loadavg)" "$(cat "$OUT/.training" 2>/dev/null)" >> "$OUT/load.jsonl"
        sleep 60
    done
}
record_load &
LOADER=$!
trap 'kill $LOADER 2>/dev/null; rm -f "$OUT/.training"' EXIT

for pair in $PAIRS; do
    names=${pair//,/ }
    echo "$names" > "$OUT/.training"
    pids=()
    for name in $names; do
        if [ -f "$OUT/$name/checkpoints/latest.json" ]; then  # the minutes left of the recipe's budget
            left=$("${ATTNLAB%/attnlab}/python" - "$OUT/$name" "pretrained/$name" <<'PY'
import json, sys
from pathlib import Path
from attnlab.core.config import read_config_file
run = Path(sys.argv[1])  # the recipe's budget, which may have grown since the run started (60 -> 90 minutes)
budget = read_config_file(sys.argv[2])["train"]["max_minutes"]
seconds = max([json.loads(line).get("time_s", 0) for line in (run / "metrics.jsonl").read_text().splitlines()
               if line.strip()] or [0])
print(max(0.01, budget - seconds / 60))
PY
)
            "$ATTNLAB" train --resume "$OUT/$name" --set "train.max_minutes=$left" >> "$OUT/$name.log" 2>&1 &
        else
            "$ATTNLAB" train "pretrained/$name" --out "$OUT/$name" > "$OUT/$name.log" 2>&1 &
        fi
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
done
echo "trained: $OUT (load: $OUT/load.jsonl)"
