#!/usr/bin/env bash
# `attnlab evaluate` of one trained run with the code of an older commit and of this checkout, in turn (ABBA...),
# each in its own process on an otherwise idle machine: wall, user and kernel seconds, the scores, and whether the
# two write the same hypotheses. One JSON line per run to OUT; the hypotheses are kept under OUT's folder.
#   bash benchmarks/evaluate_ab.sh OLD_COMMIT RUN_DIR OUT.jsonl [ROUNDS=2] [-- EVALUATE OPTIONS ...]
# e.g. bash benchmarks/evaluate_ab.sh f1aaab5 runs/tf runs/eval_ab.jsonl 2 -- --checkpoint last --beam 5
set -euo pipefail
old="${1:?usage: evaluate_ab.sh OLD_COMMIT RUN_DIR OUT.jsonl [ROUNDS] [-- OPTIONS]}" run="${2:?}" out="${3:?}"
shift 3
rounds=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds="$1"; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
python="${PYTHON:-$PWD/.venv/bin/python}"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
git archive "$old" src | tar -x -C "$src"
keep="$(dirname "$out")/evaluate_ab_hyps"
mkdir -p "$keep"
rm -f "$keep/old.hyp.txt" "$keep/new.hyp.txt"
: > "$out"
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then order=(old new); else order=(new old); fi
  for which in "${order[@]}"; do
    if [ "$which" = old ]; then path="$src/src"; else path="$PWD/src"; fi
    /usr/bin/time -f '%e %U %S' -o "$keep/time" env PYTHONPATH="$path" "$python" -m attnlab evaluate "$run" \
      --split test --json "$@" > "$keep/eval.json"
    cp "$run/eval/test.hyp.txt" "$keep/$which.hyp.txt"
    "$python" - "$keep" "$which" "$r" "$old" "$out" <<'PY'
import json, sys
keep, which, r, old, out = sys.argv[1:]
wall, user, sys_s = (float(x) for x in open(f"{keep}/time").read().split()[-3:])
ev = json.load(open(f"{keep}/eval.json"))
row = {"code": which, "commit": old if which == "old" else "checkout", "round": int(r), "wall_s": wall,
       "user_s": user, "sys_s": sys_s, **{k: ev[k] for k in ("sentences", "beam", "bleu", "chrf", "sentences_per_s")}}
try:
    a, b = open(f"{keep}/old.hyp.txt").read().splitlines(), open(f"{keep}/new.hyp.txt").read().splitlines()
    row["same_hypotheses_as_other"] = sum(x == y for x, y in zip(a, b))
except FileNotFoundError:
    pass
print(json.dumps(row))
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
PY
  done
done
