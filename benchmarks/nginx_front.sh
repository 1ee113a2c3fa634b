#!/usr/bin/env bash
# benchmarks/serve_hostile.py behind nginx (docs/deployment.md): starts nginx with benchmarks/nginx_front.conf in a
# temporary prefix (clients on 127.0.0.1:8080, attnlab on :8766), runs the benchmark against it, stops nginx.
#   bash benchmarks/nginx_front.sh RUN_DIR [serve_hostile.py options, e.g. --reconnect --json OUT]
# Needs Debian's nginx: scripts/system-deps.sh nginx installs it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run="$1"; shift
prefix="$(mktemp -d)"
cp "$here/nginx_front.conf" "$prefix/nginx.conf"
ulimit -n "$(ulimit -Hn)"
nginx -p "$prefix" -c "$prefix/nginx.conf"
trap 'nginx -p "$prefix" -c "$prefix/nginx.conf" -s stop || true' EXIT
python "$here/serve_hostile.py" "$run" --port 8766 --front-port 8080 \
    --serve-args "--max-connections-per-client 4096" "$@"
