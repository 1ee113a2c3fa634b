#!/usr/bin/env bash
# Installs JoeyNMT 2.3.0 into its own virtualenv (benchmarks/peers/.venv-joeynmt) with the CPU torch wheel, then
# applies the compatibility patches JoeyNMT 2.3 needs (patch_joeynmt.py). Idempotent: run it again to re-check.
#   bash benchmarks/peers/setup_joeynmt.sh            # TORCH_SPEC=torch==2.13.0 PYTHON=python3 to override
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${JOEYNMT_VENV:-$here/.venv-joeynmt}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0+cpu}"  # "+cpu": a CUDA build can never match

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
# The CPU torch wheel first, then JoeyNMT with torch pinned by a constraint, so pip's resolver can never replace
# it with a CUDA build from PyPI.
# The "+cpu" wheel comes from PIP_FIND_LINKS (e.g. /opt/wheels) when it is there, else from PyTorch's CPU index.
"${pip[@]}" install -q "$torch_spec" 2>/dev/null \
  || "${pip[@]}" install -q "$torch_spec" --extra-index-url https://download.pytorch.org/whl/cpu
installed_torch="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==$installed_torch" > "$constraints"
# importlib_metadata: joeynmt/helpers.py imports it but 2.3.0 does not declare it
"${pip[@]}" install -q "joeynmt==2.3.0" importlib_metadata -c "$constraints"
"$venv/bin/python" "$here/patch_joeynmt.py"
"$venv/bin/python" -c 'import joeynmt, torch, sentencepiece; print("joeynmt", joeynmt.__version__, "torch", torch.__version__, "sentencepiece", sentencepiece.__version__)'
