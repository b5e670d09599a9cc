# Two entry points: `make run` (set up, then optimize a built-in task) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TASK ?= gemm
BUDGET ?= 24

.PHONY: setup run test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the test server's llama.cpp is built portable: compiled for the host CPU (GGML_NATIVE, its default) it died
	# with SIGSEGV at its first completion on a Xeon with AMX (2026-12-03); not from pip's cache, which may hold a
	# native build from another CPU under the same name
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install --quiet --no-cache-dir "llama-cpp-python[server]>=0.3"
	$(PY) -m pip install --quiet -e ".[test,local-llm,train]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/kernelcast optimize $(TASK) --budget $(BUDGET)

# The checkers read an installed copy: the layer folders map into the kernelcast namespace at install time,
# which import-linter and mypy cannot follow through an editable install.
lint: setup
	rm -rf .lint && $(PY) -m pip install --quiet --no-deps --target .lint/site . > .lint.log 2>&1 || (cat .lint.log; exit 1)
	rm -rf build
	cd .lint && PYTHONPATH=site ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(VENV)/bin/ruff check .
	cd .lint/site && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml -p kernelcast

test: setup lint
	$(PY) -m pytest -q

bench: setup
	$(PY) -m pip install --quiet -e ".[bench]"

clean:
	rm -rf $(VENV) .kernelcast .pytest_cache .lint .lint.log
