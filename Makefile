# Two commands do all the set-up: `make book` builds the website, `make test` runs every check.
# Both install what they need into a local virtual environment (.venv), reused on the next run.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := chapters labs
# nbval runs notebooks on both cores; override with `make test JOBS=1`.
JOBS ?= 2

.PHONY: help install book test unit notebooks book-strict site strip bench clean

help:
	@echo "make book   build the website into _build/html (installs into $(VENV) first)"
	@echo "make test   unit tests, every notebook under nbval, the book with warnings as errors, site checks"
	@echo "make bench  python -m gpuinfer bench --quick on this machine"
	@echo "make strip  strip outputs and execution counts from every notebook"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "Built: _build/html/index.html"

# The whole check, in the order a failure is cheapest to find.
test: unit notebooks book-strict site

unit: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests -m "not site"

notebooks: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax -n $(JOBS) --dist loadfile $(NOTEBOOKS)

book-strict: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going

# The built site in headless Chromium (Debian's /usr/bin/chromium; .ci/run installs it),
# plus the offline link check. Screenshots for a person to look at: _build/screenshots/.
site: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests -m site
	@echo "Screenshots: _build/screenshots/"

strip: $(STAMP)
	$(BIN)/python -m gpuinfer strip $(NOTEBOOKS)

bench: $(STAMP)
	$(BIN)/python -m gpuinfer bench --quick

clean:
	rm -rf _build .pytest_cache
