# Coffer: `make run` starts the embedded default stack; `make test` runs every test.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := 3.11
# Machines that set PYTHONDONTWRITEBYTECODE make every process compile every module it
# imports again: a service start took 3-4 s instead of 1 s, and the test suite starts
# hundreds of processes. Our runs keep Python's default and cache bytecode (ignored by git).
unexport PYTHONDONTWRITEBYTECODE
# uv from PATH, else the one pip installs for the machine's Python 3.11.
UV = $(shell command -v uv 2>/dev/null || echo python3 -m uv)
PYTEST_ARGS ?=
# Test processes (pytest-xdist). Two keep both cores busy: most tests wait on a service, a
# browser or a database at any moment. Each worker starts its own session stacks and holds its
# own database connections: with the tests' small pools (coffer_testkit.testing.TEST_DATABASE_BUDGET)
# two fit PostgreSQL's default max_connections = 100, which no target ever changes. 0: one process.
PYTEST_WORKERS ?= 2
# test-fast's in-process tests wait on expiry timers and databases more than they compute, so
# a third worker fills the waits: 760 tests took 58.7 s with two and 50.8 s with three (quiet).
FAST_WORKERS ?= 3

.PHONY: help setup run clamd test test-fast test-images lint typecheck fmt chart bench bench-scale bench-peers browser node vendor dist unasync

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup: ## Install what is missing: uv (through pip), libmagic (apt, as root), then the locked Python dependencies
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@ldconfig -p 2>/dev/null | grep -q libmagic.so.1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "installing libmagic1 (blob's media type detection)"; apt-get install -y -qq libmagic1 >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq libmagic1 >/dev/null; }; }; } || true
	@$(UV) sync --all-packages --frozen --quiet

run: setup ## Run the embedded default: all four services on this machine (Ctrl-C stops)
	@.venv/bin/coffer-stack

test: setup browser node clamd ## Run every test (unit, end-to-end over real processes, browser, chart checks)
	@command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || { echo "installing pgbouncer (the conformance tests run behind it in transaction mode)"; \
	  apt-get install -y -qq pgbouncer >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq pgbouncer >/dev/null; }; }
	@command -v tmux >/dev/null 2>&1 || { echo "installing tmux (the client's terminal test)"; \
	  apt-get install -y -qq tmux >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq tmux >/dev/null; }; }
	@$(UV) run --frozen --no-sync pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# blob's scan tests (services/blob/tests/test_scan.py) and tests/e2e/test_scan.py run a real clamd.
clamd: ## Install Debian's clamav-daemon when clamd is missing (apt, as root)
	@command -v clamd >/dev/null 2>&1 || [ -x /usr/sbin/clamd ] || { echo "installing clamav-daemon (the malware scan tests run a real clamd)"; \
	  apt-get install -y -qq clamav-daemon >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq clamav-daemon >/dev/null; }; }

# The dashboard's browser tests drive Debian's chromium through Playwright's bundled driver;
# no browser is ever downloaded (never `playwright install`). COFFER_CHROMIUM overrides.
browser: ## Install Debian's chromium for the browser tests when it is missing (apt, as root)
	@if [ -z "$$COFFER_CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium with apt-get (about 20 s)"; \
	    (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)); \
	  else echo "chromium is missing: the browser tests will skip (install it: apt-get install chromium)"; fi; \
	fi

# tus-js-client under Node for the resumable-upload tests (tests/e2e/test_tus.py), and
# standardwebhooks for the Node webhook receiver of docs/webhooks.md
# (tests/e2e/test_webhook_receivers.py), from the npm registry as their package-lock.json pin them.
node: ## Install the Node packages of the tests (npm ci; Debian's nodejs and npm when missing)
	@command -v npm >/dev/null 2>&1 || { echo "installing nodejs and npm with apt-get"; \
	  apt-get install -y -qq nodejs npm >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }; }
	@[ -d tests/e2e/tusjs/node_modules/tus-js-client ] || (cd tests/e2e/tusjs && npm ci --silent --no-audit --no-fund)
	@[ -d tests/e2e/webhookjs/node_modules/standardwebhooks ] || (cd tests/e2e/webhookjs && npm ci --silent --no-audit --no-fund)

HTMX_VERSION := 2.0.11
HTMX_SHA384 := 2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg
HTMX_FILE := services/edge/src/coffer_edge/dashboard/static/vendor/htmx-$(HTMX_VERSION).min.js

TUS_VERSION := 4.3.1
TUS_SHA384 := UlHjK3F7TCQCEUpnoa1ohMbP2oaWB3Aypv4gMo511vaZ86uUZ0Zv7UzZ0J1zRUT1
TUS_FILE := services/edge/src/coffer_edge/dashboard/static/vendor/tus-js-client-$(TUS_VERSION).min.js

vendor: ## Re-fetch the dashboard's vendored htmx and tus-js-client (with its licence) from npm and check their sha384
	@tmp=$$(mktemp -d) && cd $$tmp && npm pack --silent htmx.org@$(HTMX_VERSION) >/dev/null && \
	  tar xzf htmx.org-$(HTMX_VERSION).tgz && \
	  got=$$(openssl dgst -sha384 -binary package/dist/htmx.min.js | openssl base64 -A) && \
	  if [ "$$got" != "$(HTMX_SHA384)" ]; then echo "htmx $(HTMX_VERSION): sha384 $$got, expected $(HTMX_SHA384)"; exit 1; fi && \
	  cp package/dist/htmx.min.js $(CURDIR)/$(HTMX_FILE) && rm -rf $$tmp && echo "$(HTMX_FILE): sha384-$$got"
	@tmp=$$(mktemp -d) && cd $$tmp && npm pack --silent tus-js-client@$(TUS_VERSION) >/dev/null && \
	  tar xzf tus-js-client-$(TUS_VERSION).tgz && \
	  got=$$(openssl dgst -sha384 -binary package/dist/tus.min.js | openssl base64 -A) && \
	  if [ "$$got" != "$(TUS_SHA384)" ]; then echo "tus-js-client $(TUS_VERSION): sha384 $$got, expected $(TUS_SHA384)"; exit 1; fi && \
	  cp package/dist/tus.min.js $(CURDIR)/$(TUS_FILE) && cp package/LICENSE $(CURDIR)/$(TUS_FILE:.min.js=.LICENSE) && \
	  rm -rf $$tmp && echo "$(TUS_FILE): sha384-$$got"

test-fast: setup ## Run the in-process tests on the embedded default's SQLite and disk (no server, no process of their own)
	@$(UV) run --frozen --no-sync pytest -n $(FAST_WORKERS) libs services -m "not e2e" --embedded-only $(PYTEST_ARGS)

test-images: setup ## Build the four images with podman (root) and run them against each other, about 1.5 min on a quiet machine, up to 4 on a busy one
	@bash scripts/install-image-tools.sh
	@$(UV) run --frozen --no-sync pytest -m images tests/images $(PYTEST_ARGS)

chart: setup ## Check the Helm chart: helm lint, helm template, schemas, policies
	@$(UV) run --frozen --no-sync pytest tests/chart -q

# The client's wheel and sdist, built the standard way (PEP 517, the backend its pyproject names);
# DIST= elsewhere. `pip install dist/coffer_client-*.whl` is how a user installs a release.
DIST ?= dist
dist: ## Build the coffer client's wheel and sdist into dist/
	@$(UV) build --quiet --package coffer-client --out-dir $(DIST)
	@ls $(DIST)/coffer_client-*

unasync: setup ## Generate the client's synchronous Coffer (_sync.py) from AsyncCoffer (_async.py)
	@$(UV) run --frozen --no-sync python scripts/unasync_client.py

lint: setup ## Lint with ruff (rules in pyproject.toml), and check the formatting
	@$(UV) run --frozen --no-sync ruff check .
	@$(UV) run --frozen --no-sync ruff format --check .

typecheck: setup ## Type-check every service and library with mypy --strict
	@$(UV) run --frozen --no-sync mypy

fmt: setup ## Format with ruff
	@$(UV) run --frozen --no-sync ruff check --fix .
	@$(UV) run --frozen --no-sync ruff format .

bench-scale: setup ## Scale benchmark: PostgreSQL seeded by COPY with 1,000,000 assets (+1,000 orgs of 5,000), per-request figures against 10,000; ~40 min on 2 busy cores (BENCH_ARGS=--sqlite for the embedded stack)
	@$(UV) run --frozen --no-sync python bench/scale.py $(BENCH_ARGS)

bench: setup ## Benchmark Coffer against nginx and FastAPI, ~5 min, then the coffer CLI against curl, ~2 min (BENCH_ARGS=--production: PostgreSQL + S3)
	@$(UV) run --frozen --no-sync python bench/run.py $(BENCH_ARGS)
	@$(UV) run --frozen --no-sync python bench/cli.py

bench-peers: setup ## Coffer beside tus-node-server, thumbor and Directus in one run (first run installs them, ~10 min)
	@$(UV) run --frozen --no-sync python bench/peers/specialists.py $(BENCH_ARGS)
