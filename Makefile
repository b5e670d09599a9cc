# Two entry points: `make run` (set up, then optimize a built-in task) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TASK ?= gemm
BUDGET ?= 24

.PHONY: setup run test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,local-llm]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/kernelcast optimize $(TASK) --budget $(BUDGET)

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .kernelcast .pytest_cache
