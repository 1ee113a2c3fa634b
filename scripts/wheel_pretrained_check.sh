#!/bin/bash
# Issue 39: the wheel with its trained models, installed in a fresh virtualenv, used from an empty folder.
#   bash scripts/wheel_pretrained_check.sh [OUT.json]
# Builds the wheel (records its size), makes a fresh venv (torch==2.13.0 from pip's cache or PyPI, then the wheel and
# its dependencies), and from an empty folder: `attnlab pretrained`, then `attnlab serve --pretrained`, timing from
# the command's start to the first answer of POST /api/translate for Ruth 1:3 with pretrained:bahdanau, and the
# request alone. Prints one JSON object (also written to OUT.json when given).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-}; [ -z "$out" ] || out=$(realpath -m "$out")  # before the cd below
work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
server=
python3 -m pip wheel -q --no-deps -w "$work/dist" "$repo" >/dev/null
wheel=$(ls "$work"/dist/attnlab-*.whl)
wheel_bytes=$(stat -c %s "$wheel")
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip >/dev/null
"$work/venv/bin/pip" install -q torch==2.13.0 >/dev/null
"$work/venv/bin/pip" install -q "$wheel" >/dev/null
mkdir "$work/empty" && cd "$work/empty"
export ATTNLAB_CACHE="$work/cache"
"$work/venv/bin/attnlab" pretrained > "$work/list.txt"
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
t0=$(date +%s.%N)
"$work/venv/bin/attnlab" serve --pretrained --port "$port" > "$work/serve.log" 2>&1 &
server=$!
python3 - "$port" "$t0" "$wheel_bytes" "$work/list.txt" "$out" "$(git -C "$repo" rev-parse --short HEAD)" <<'PY'
import json, sys, time, urllib.request
port, t0, wheel_bytes, listing, out, commit = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
url = f"http://127.0.0.1:{port}"
while True:
    try:
        models = json.load(urllib.request.urlopen(url + "/api/models", timeout=5))
        break
    except OSError:
        if time.time() - t0 > 300:
            sys.exit("serve did not answer within 300 s")
        time.sleep(0.1)
ready = time.time() - t0
body = json.dumps({"model": "pretrained:bahdanau", "sentence": "And Elimelech Naomi's husband died; and she was left, "
                   "and her two sons."}).encode()
t1 = time.time()
req = urllib.request.Request(url + "/api/translate", data=body, headers={"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(req, timeout=60))
t2 = time.time()
result = {"wheel_bytes": wheel_bytes, "wheel_mb": round(wheel_bytes / 1e6, 2),
          "models": [m.get("name") for m in (models if isinstance(models, list) else models.get("models", []))],
          "listing": open(listing).read().splitlines(), "translation": answer.get("translation"),
          "serve_ready_s": round(ready, 2), "request_s": round(t2 - t1, 3), "command_to_answer_s": round(t2 - t0, 2),
          "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M")}
print(json.dumps(result, ensure_ascii=False, indent=1))
if out:
    open(out, "w").write(json.dumps(result, ensure_ascii=False, indent=1) + "\n")
PY
