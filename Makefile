# attnlab: `make demo` and `make test` are the two commands a new user needs (see README).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CORE: the package and what it needs to run (all `make demo` installs); STAMP: CORE + the extras of the tests,
# notebooks, browser test, docs, MiniLM and CTranslate2
CORE   := $(VENV)/.core
STAMP  := $(VENV)/.installed

.PHONY: demo test test-plain e2e notebooks docs venv sysdeps bench peers clean

# torch==2.13.0 first: the CPU wheel on this machine's disk, so pip never pulls a multi-GB CUDA build.
# pyproject.toml only asks for torch>=2.4, so a user's own CUDA torch is kept. The demo installs the package alone
# (the extras take another minute on a 2-core machine); `make test` adds them.
$(CORE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	touch $(CORE)

$(STAMP): $(CORE)
	$(PY) -m pip install -q -e ".[test,e2e,docs,pretrained,ctranslate2]"
	touch $(STAMP)

venv: $(STAMP)

sysdeps:
	./scripts/system-deps.sh

demo: $(CORE) sysdeps
	$(VENV)/bin/attnlab demo

# pytest exits 5 when it collects no tests: that is a failure here, not a pass.
# Without the SWORD packages (and no root to install them) the one real-corpus test is skipped, not failed.
# The tests run on one torch thread each (tests/conftest.py), so pytest-xdist runs one worker per core, at most 4
# (each worker holds its own torch: about 1 GB); `make test TEST_WORKERS=0` runs them in this one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0)) \
                  if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1))")
test: $(STAMP)
	-./scripts/system-deps.sh
	$(PY) -m pytest --ignore=tests/e2e -n $(TEST_WORKERS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The same suite with every kernel off (ATTNLAB_KERNELS=0, src/attnlab/kernels): the models run their plain torch
# twins. Not part of CI (`make test` already holds each kernel equal to its twin, tests/test_kernels.py); run it
# after changing a kernel or a model that calls one.
test-plain: $(STAMP)
	-./scripts/system-deps.sh
	ATTNLAB_KERNELS=0 $(PY) -m pytest --ignore=tests/e2e -n $(TEST_WORKERS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-plain: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The browser test: `attnlab serve` in headless Chromium (Debian's chromium + chromium-driver, installed here as
# root; a failed install as root fails). Without root it is skipped with the reason (-rs prints it), not failed.
e2e: $(STAMP)
	./scripts/system-deps.sh e2e || [ "$$(id -u)" -ne 0 ]
	$(PY) -m pytest tests/e2e -rs; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make e2e: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The lecture notebooks (notebooks/*.ipynb) top to bottom with their full budgets; `make test` runs them in quick
# mode (ATTNLAB_QUICK=1). Executed copies go to runs/notebooks/, and as HTML pages that work with no network
# (MathJax inlined, progress as text) to runs/notebooks/html/; the committed notebooks stay without outputs.
notebooks: $(STAMP) sysdeps
	$(PY) scripts/run_notebooks.py --full --out runs/notebooks --html runs/notebooks/html \
	  --json runs/notebooks/timings.jsonl

# The API reference, generated from the docstrings by pdoc, into build/api/ (open build/api/index.html): the
# public API (`attnlab`) and every package under it with each of its modules, each named to pdoc (a package's
# `__all__` would hide its submodules).
# tests/test_docs_build.py runs it.
API_OUT ?= build/api
docs: $(STAMP)
	rm -rf $(API_OUT)
	$(PY) -m pdoc --docformat google -o $(API_OUT) \
	  $$(cd src && find attnlab -name '*.py' ! -name __main__.py ! -path '*/configs/*' | sort \
	     | sed 's/\.py$$//; s#/__init__$$##; s#/#.#g')
	@echo "API reference: $(API_OUT)/index.html"

bench: $(CORE)
	$(PY) benchmarks/attention_bench.py

# The JoeyNMT side-by-side (benchmarks/peers/): installs JoeyNMT 2.3 into its own venv, then a 1-minute smoke
# comparison of the demo GRU (100 test verses, 2 threads); the real one is benchmarks/peers/README.md's command
peers: $(STAMP) sysdeps
	bash benchmarks/peers/setup_joeynmt.sh
	$(PY) benchmarks/peers/joeynmt_vs_attnlab.py configs/demo.toml --minutes 1 --threads 2 --max-test 100 \
	  --json runs/peers/smoke.json

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis
