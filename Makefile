# Two commands from a fresh clone: `make smoke` and `make test`. Each creates .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Any torch >= 2.2 works. 2.13.0 is pinned here only because it is a small CPU build on the CI machines;
# `make TORCH=torch smoke` takes the newest release instead (a CUDA build on Linux).
TORCH  ?= torch==2.13.0

.PHONY: smoke test test-fast test-system lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

smoke: $(VENV)/.installed
	$(BIN)/modern-gpt ablate --seeds 3 --smoke

# Two tiers (docs/development.md): test-fast, in process (at most 300 s of tests on a quiet 2-core machine, the
# inner loop); test-system, the tests marked slow (the CLI as a subprocess, signals, worker pools, Ray, Slurm,
# servers, Chromium). `make test` is ruff and both: what .ci/run and a fresh clone run.
PYTEST_N ?= 2

test: lint test-fast test-system

test-fast: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m "not slow" -n $(PYTEST_N) --dist loadfile

test-system: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m slow

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(VENV)/.installed
	$(BIN)/python bench/bench_smoke.py

clean:
	rm -rf $(VENV) build *.egg-info modern_gpt.egg-info .pytest_cache .ruff_cache
