# Pacer — the two commands that matter: `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# mypy's cache lives with the other tool caches, outside the checkout: a fresh clone re-checks
# only what changed (mypy compares each file's hash), not all of it.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pacer/mypy
# `make test` runs the suite on this many pytest-xdist workers (0: in one process). Three on a
# 2-core machine: a test spends much of its time waiting on leases, pacing and processes, and
# fresh-clone runs took 624-715 s of pytest on three workers against 793-795 s on two.
TEST_WORKERS ?= 3

.PHONY: install demo test up down env lint prometheus chaos bench clean helm chart lock docs schema-sql

$(STAMP): pyproject.toml libs/devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "uv>=0.5"
	$(BIN)/uv pip install --quiet --python $(BIN)/python $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) \
	  -e ".[dev]" -e libs/devtools
	touch $(STAMP)

install: $(STAMP)

demo: install           ## run Pacer end to end and print one summary line
	$(BIN)/pacer-demo

test: install lint prometheus helm  ## the whole suite, on real Kafka, Postgres and Prometheus started by the suite
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

prometheus: install     ## Debian's prometheus package (prometheus, promtool), installed if missing and root
	@$(BIN)/python -m pacer_dev.prometheus ensure

helm: install           ## build the pinned helm from the Go module proxy into ~/.cache/pacer/tools (once)
	@$(BIN)/python -m pacer_dev.tools helm > /dev/null

chart: install helm     ## the chart checks alone: lint, render and validate each value set, one line each
	$(BIN)/python -m pacer_dev.chart

docs: install           ## regenerate the settings tables of docs/configuration.md (and the metric list of docs/runbook.md)
	$(BIN)/python -m pacer_dev.docs

lock: install           ## recompile the image's dependency locks (deploy/docker/*.lock) from pyproject.toml
	$(BIN)/python -m pacer_dev.lock

lint: install           ## layering contracts, ruff (rules in pyproject.toml), mypy (strict on libs/common and every domain/)
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	MYPY_CACHE_DIR="$(MYPY_CACHE_DIR)" $(BIN)/mypy

schema-sql: install     ## regenerate libs/common/pacer_common/db/schema.sql from the migrations and function files
	$(BIN)/python -m pacer_dev.schema_dump

up: install             ## start infrastructure, fake gateway and services in the background
	$(BIN)/python -m pacer_dev.updown up

env: install            ## print `export …` lines for the stack `make up` started
	@$(BIN)/python -m pacer_dev.updown env

down: install           ## stop everything `make up` started
	$(BIN)/python -m pacer_dev.updown down

chaos: install          ## every fault scenario on real processes; exits non-zero on a duplicate or a loss
	$(BIN)/python -m pacer_dev.chaos $(SCENARIOS)

bench: install          ## benchmarks on real Kafka, Postgres and the fake gateway (long: see docs/performance.md)
	$(BIN)/python -m bench

clean: down
	$(BIN)/pacer-infra destroy
