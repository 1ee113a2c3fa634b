#!/usr/bin/env bash
# Installs the Debian packages attnlab uses: the SWORD Bible modules (KJV, Reina-Valera 1909, World English
# Bible); with the argument `e2e`, also chromium + chromium-driver for the browser test (tests/e2e, `make e2e`);
# with `nginx`, also nginx-light for benchmarks/nginx_front.sh (attnlab behind a reverse proxy, docs/deployment.md).
# Does nothing when they are present; prints the apt command when not root.
set -euo pipefail
pkgs=(sword-text-kjv sword-text-sparv sword-text-web)
if [ "${1:-}" = "e2e" ]; then
  pkgs+=(chromium chromium-driver)
elif [ "${1:-}" = "nginx" ]; then
  pkgs+=(nginx-light)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "attnlab needs: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} ..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
