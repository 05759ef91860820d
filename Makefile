# rayworks: the two commands a fresh clone needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# DeepSpeed JIT-compiles a CPU comm op on first use (~1 min); keep it in a stable folder.
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.torch_extensions
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: setup system-deps demo test lint format bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: 2.13.0 is the CPU build on this disk; an unpinned torch pulls CUDA.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $(STAMP)

# mvc speaks its corpus with Debian's espeak-ng: install it where it is missing (apt, as root
# or through sudo). Where that fails, `rayworks run mvc` stops with a message saying so.
system-deps:
	@command -v espeak-ng >/dev/null 2>&1 || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  { $$sudo apt-get install -y -qq espeak-ng || \
	    { $$sudo apt-get update -qq && $$sudo apt-get install -y -qq espeak-ng; }; } >/dev/null 2>&1 \
	  || echo "espeak-ng could not be installed: the mvc pipeline will not run here"; }

setup: system-deps $(STAMP)

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/rayworks demo

lint: setup
	$(BIN)/ruff check rayworks tests benchmarks scripts
	$(BIN)/ruff format --check rayworks tests benchmarks scripts
	$(BIN)/lint-imports --no-cache

format: setup
	$(BIN)/ruff check --fix rayworks tests benchmarks scripts
	$(BIN)/ruff format rayworks tests benchmarks scripts

test: setup lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -ra --durations=15

# The benchmarks' peers (TRL) come from the `bench` extra; torch stays the pinned CPU build.
bench: setup
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev,bench]"
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/lm_train.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/rl_step.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/rl_learning.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
