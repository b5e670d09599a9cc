# Two entry points: `make run` (set up what `optimize` needs, then optimize a built-in task) and `make test`
# (set up everything the tests need, then check and test); `make check` and `make unit` are the fast paths while
# working.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TASK ?= gemm
BUDGET ?= 24

.PHONY: setup setup-run run check lint unit test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# What `make run` needs: kernelcast and its runtime dependencies (the CPU OpenCL runtimes included). No llama.cpp
# build, no torch, no test or training tools: a few minutes from nothing with a warm package cache.
$(VENV)/.run-installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

# Everything the tests need: the extras test (pytest, ray, the checkers), local-llm (llama.cpp's server, for the
# LLM tests) and train (torch and the training stack, for the forecaster-training tests). The test server's
# llama.cpp is built portable: compiled for the host CPU (GGML_NATIVE, its default) it died with SIGSEGV at its
# first completion on a Xeon with AMX (2026-12-03); not from pip's cache, which may hold a native build from
# another CPU under the same name
$(VENV)/.installed: pyproject.toml | $(PY)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install --quiet --no-cache-dir "llama-cpp-python[server]>=0.3"
	$(PY) -m pip install --quiet -e ".[test,local-llm,train]"
	touch $@ $(VENV)/.run-installed

setup-run: $(VENV)/.run-installed

setup: $(VENV)/.installed

run: setup-run
	$(VENV)/bin/kernelcast optimize $(TASK) --budget $(BUDGET)

# The checkers read an installed copy: the layer folders map into the kernelcast namespace at install time
# (pyproject's [tool.setuptools.package-dir]), which import-linter and mypy cannot follow through an editable
# install. The copy is refreshed only when a .py file, a folder or pyproject.toml changed, and mypy and
# import-linter keep their caches in .lint, so a warm `make check` rechecks only what changed.
LINT_SITE := .lint/site
LAYERS := tools agents graphs
LINT_SOURCES := $(shell find kernelcast $(LAYERS) -name __pycache__ -prune -o \( -type d -o -name '*.py' \) -print)

$(LINT_SITE)/.copied: pyproject.toml $(LINT_SOURCES)
	rm -rf $(LINT_SITE)/kernelcast
	for layer in $(LAYERS); do mkdir -p $(LINT_SITE)/kernelcast/$$layer; done
	find kernelcast -name '*.py' -print0 | xargs -0 cp --parents -p -t $(LINT_SITE)
	for layer in $(LAYERS); do \
	  (cd $$layer && find . -name '*.py' -print0 | xargs -0 cp --parents -p -t ../$(LINT_SITE)/kernelcast/$$layer); \
	done
	touch $@

# import contract, ruff and mypy: under a minute on a warm venv
check: setup $(LINT_SITE)/.copied
	cd .lint && PYTHONPATH=site ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(VENV)/bin/ruff check .
	cd $(LINT_SITE) && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml --cache-dir ../mypy_cache -p kernelcast

lint: check

# the pure-logic tests: no device, worker, network or Ray (tests/unit/conftest.py refuses them); a few minutes
unit: setup
	$(PY) -m pytest -q tests/unit

# the whole suite (unit, device, e2e): what the README and CI run
test: setup check
	$(PY) -m pytest -q

bench: setup
	$(PY) -m pip install --quiet -e ".[bench]"

clean:
	rm -rf $(VENV) .kernelcast .pytest_cache .lint .lint.log
