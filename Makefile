# Pacer — the two commands that matter: `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test up down env lint prometheus chaos bench clean helm chart lock docs schema-sql

$(STAMP): pyproject.toml libs/devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet -e libs/devtools
	touch $(STAMP)

install: $(STAMP)

demo: install           ## run Pacer end to end and print one summary line
	$(BIN)/pacer-demo

test: install lint prometheus helm  ## the whole suite, on real Kafka, Postgres and Prometheus started by the suite
	$(BIN)/pytest

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
	$(BIN)/mypy

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
