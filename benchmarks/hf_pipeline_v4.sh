#!/bin/bash
# Issue 38: pipeline("translation", model=DIR) on an export. transformers 5 removed the translation pipeline, so this
# installs transformers 4.57.1 (and the hub/tokenizers it needs) into a private folder (PyPI only; attnlab's venv is
# not touched) and runs the pipeline there on a verse. Prints one JSON line.
#   bash benchmarks/hf_pipeline_v4.sh EXPORT_DIR [SENTENCE]
set -euo pipefail
dir=$(cd "$1" && pwd); sentence=${2:-"And Elimelech Naomi's husband died; and she was left, and her two sons."}
repo=$(cd "$(dirname "$0")/.." && pwd); py=${PYTHON:-$repo/.venv/bin/python}
site=${ATTNLAB_TF4:-/tmp/attnlab-transformers4}
[ -d "$site/transformers" ] || "$py" -m pip install -q --target "$site" --no-deps "transformers==4.57.1" \
    "huggingface_hub==0.36.2" "tokenizers==0.22.2" requests "urllib3<3" idna certifi charset_normalizer
cd "$(mktemp -d)"  # a clean sys.path[0]
PYTHONPATH="$site" "$py" -W ignore - "$dir" "$sentence" <<'PY'
import json, sys
import transformers
translate = transformers.pipeline("translation", model=sys.argv[1])
out = translate(sys.argv[2], num_beams=5)
print(json.dumps({"transformers": transformers.__version__, "pipeline": "translation", "model": sys.argv[1],
                  "class": type(translate.model).__name__, "input": sys.argv[2],
                  "output": out[0]["translation_text"]}, ensure_ascii=False))
PY
