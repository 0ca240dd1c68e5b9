# Coffer: `make run` starts the embedded default stack; `make test` runs every test.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := 3.11
# uv from PATH, else the one pip installs for the machine's Python 3.11.
UV = $(shell command -v uv 2>/dev/null || echo python3 -m uv)
PYTEST_ARGS ?=

.PHONY: help setup run test lint fmt chart bench

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup: ## Install what is missing: uv (through pip), then the locked Python dependencies
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@$(UV) sync --all-packages --frozen --quiet

run: setup ## Run the embedded default: all four services on this machine (Ctrl-C stops)
	@.venv/bin/coffer-stack

test: setup ## Run every test (unit, end-to-end over real processes, chart checks)
	@$(UV) run --frozen --no-sync pytest $(PYTEST_ARGS)

chart: setup ## Check the Helm chart: helm lint, helm template, schemas, policies
	@$(UV) run --frozen --no-sync pytest tests/chart -q

lint: setup ## Lint with ruff
	@$(UV) run --frozen --no-sync ruff check .
	@$(UV) run --frozen --no-sync ruff format --check .

fmt: setup ## Format with ruff
	@$(UV) run --frozen --no-sync ruff check --fix .
	@$(UV) run --frozen --no-sync ruff format .

bench: setup ## Benchmark Coffer against nginx and FastAPI, ~5 min (BENCH_ARGS=--production: PostgreSQL + S3)
	@$(UV) run --frozen --no-sync python bench/run.py $(BENCH_ARGS)
