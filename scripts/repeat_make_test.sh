#!/usr/bin/env bash
# Runs `make test` N times in a row on a fresh clone of this repository (with ../shared beside it, as CI has it)
# and writes one JSON line per run: run number, exit code, wall seconds, the pytest-randomly seed, the pytest
# summary line. Usage: scripts/repeat_make_test.sh N OUT.jsonl [COMMIT]   (COMMIT default: HEAD)
# The first run also creates the clone's .venv (make's install step); its install time is reported apart.
set -uo pipefail
n=${1:?number of runs}
out=$(realpath -m "${2:?output .jsonl}")
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse "${3:-HEAD}")
work=$(mktemp -d /tmp/attnlab-repeat.XXXXXX)
git clone -q "$repo" "$work/main" && git -C "$work/main" checkout -q "$commit"
ln -s "$(realpath "$repo/../shared")" "$work/shared"
cd "$work/main" || exit 1
t0=$(date +%s)
make venv > "$work/install.log" 2>&1 || { echo "install failed: $work/install.log" >&2; exit 1; }
echo "{\"clone\": \"$work/main\", \"commit\": \"$commit\", \"install_seconds\": $(( $(date +%s) - t0 ))}" > "$out"
for i in $(seq 1 "$n"); do
  t0=$(date +%s.%N)
  make test > "$work/run$i.log" 2>&1
  rc=$?
  secs=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
  seed=$(grep -o -m1 'randomly-seed=[0-9]*' "$work/run$i.log" | cut -d= -f2)
  summary=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$|(passed|failed)[^|]* in [0-9.]+s' "$work/run$i.log" \
            | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')
  echo "{\"run\": $i, \"rc\": $rc, \"seconds\": $secs, \"seed\": \"${seed:-}\", \"summary\": \"$summary\", \"log\": \"$work/run$i.log\"}" \
    | tee -a "$out"
done
