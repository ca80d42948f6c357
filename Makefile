# Saga shop: `make run` to try it, `make test` to prove it. `make help` lists every target.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# The bus is installed from its own folder: its dependencies (its pyproject.toml) count too. The contexts
# are not installed: the monolith runs them from this checkout (an installed copy would hide a removed
# one), and requirements.txt pins what each one's pyproject.toml declares (make service installs them).
BUS_PYPROJECT := packages/django-reliable-messaging/pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat requirements.txt $(BUS_PYPROJECT) | sha1sum | cut -c1-12)
PORT ?= 8000
SERVE_HOST ?= 0.0.0.0
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install run run-split service serve test suite-1 suite-2 suite-orchestrated test-unit test-bus bus-lane-1 bus-lane-2 upgrade-test lint chaos bench soak demo browser-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): requirements.txt $(BUS_PYPROJECT)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP) ## create .venv and install the pinned requirements

# The workers' metrics ports follow PORT (PORT + 1101..1104: 9101-9104 for the default 8000, which
# deploy/prometheus/ scrapes), and so does the fake gateway's (PORT + 90: 8090), so a second make run
# on another PORT (4 or more apart, not 90) does not clash. Each variable, set, wins.
run: export GATEWAY_PORT ?= $(shell expr $(PORT) + 90)
run: export RELAY_METRICS_PORT ?= $(shell expr $(PORT) + 1101)
run: export CONSUMERS_METRICS_PORT ?= $(shell expr $(PORT) + 1102)
run: export DEADLINE_METRICS_PORT ?= $(shell expr $(PORT) + 1103)
run: export ORDERS_CONSUMERS_METRICS_PORT ?= $(shell expr $(PORT) + 1104)
run: export DEBUG ?= 1
run: export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
run: $(STAMP) ## run the web server, the fake card gateway (on PORT + 90), the gateway worker that calls it, the relay, two consumer processes and the saga deadline loop until Ctrl-C, every installed context in one deployment (embedded SQLite + filesystem broker unless DATABASE_URL/BROKER_URL are set)
	python manage.py prepare_deployment
	@echo ""
	@echo "  API:    http://127.0.0.1:$(PORT)/api/products/   (checkout: POST /api/checkout/)"
	@echo "  Admin:  http://127.0.0.1:$(PORT)/admin/  - no default login; create one with:"
	@echo "          DEBUG=1 .venv/bin/python manage.py createsuperuser"
	@echo "  Metrics: /metrics on the web port; relay :$(RELAY_METRICS_PORT), consumers :$(CONSUMERS_METRICS_PORT) and :$(ORDERS_CONSUMERS_METRICS_PORT) (orders, events), deadline loop :$(DEADLINE_METRICS_PORT)"
	@echo "  Gateway: the fake card gateway on http://127.0.0.1:$(GATEWAY_PORT)/ (GATEWAY_PORT)"
	@echo "  Other commands from another terminal take the same DEBUG=1 (and DATABASE_URL/BROKER_URL"
	@echo "  if you set them here), e.g.  DEBUG=1 .venv/bin/python manage.py gateway_ledger"
	@echo "  Starting. Wait for the line saying it is up: the API then lists the catalogue and takes checkouts."
	@echo ""
	@# honcho answers Ctrl-C with 130 even when every process stopped cleanly (each exits 0). The
	@# shell ignores Ctrl-C itself (honcho still gets it): dying of it would make make say "Interrupt".
	@# scripts/announce_ready.py waits in the background for the catalogue, and ends with this shell.
	trap '' INT; python scripts/announce_ready.py --port $(PORT) --also http://127.0.0.1:$(GATEWAY_PORT)/healthz --parent $$$$ & honcho start -f Procfile -p $(PORT) || [ $$? -eq 130 ]

serve: $(STAMP) ## the production web tier on PORT (all interfaces; SERVE_HOST=127.0.0.1 for this machine only): nginx (installs Debian's package if missing) in front of gunicorn, DEBUG off; needs SECRET_KEY and ALLOWED_HOSTS, uses DATABASE_URL/BROKER_URL; migrates first; Ctrl-C stops both
	@$(PY) scripts/serve.py --host $(SERVE_HOST) --port $(PORT)

SPLIT_VAR := $(CURDIR)/var/split
run-split: export GATEWAY_PORT ?= $(shell expr $(PORT) + 90)
run-split: export DEBUG ?= 1
run-split: export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
run-split: $(STAMP) ## run each installed context as the service make service builds (under var/split/services/), each on its own database, one broker (embedded unless <CONTEXT>_DATABASE_URL and BROKER_URL are set; scripts/run_split.py)
	python scripts/run_split.py --port $(PORT) --var-dir $(SPLIT_VAR)

service: $(STAMP) ## CONTEXT=<name> OUT=<dir>: build that context as a service of its own (its package, the platform, the bus's wheel, settings, manage.py, Procfile, requirements.txt; scripts/build_service.py)
	@test -n "$(CONTEXT)" -a -n "$(OUT)" || { echo "make service CONTEXT=<name> OUT=<dir>, e.g. make service CONTEXT=payments OUT=/tmp/payments-service"; exit 2; }
	$(PY) scripts/build_service.py $(CONTEXT) $(OUT)

BUS := packages/django-reliable-messaging

test: $(STAMP) ## import contracts, the frozen event schemas, the AsyncAPI parser, the bus's own tests on its wheel (each Python and Django it supports) + the whole suite on real PostgreSQL and RabbitMQ (tests/orchestration and the orchestrator's own tests in a second session, ORCHESTRATOR=1)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) scripts/ensure_prometheus.py
	amtool check-config deploy/alertmanager/alertmanager.yml
	$(PY) scripts/ensure_nginx.py
	$(PY) scripts/ensure_asyncapi_parser.py
	DEBUG=1 ORCHESTRATOR=1 $(PY) manage.py event_schemas
	$(MAKE) --no-print-directory -j4 --output-sync=recurse $(if $(NOX_ARGS),test-bus,bus-lane-1 bus-lane-2) suite-1 suite-2 suite-orchestrated

# The suite in two halves at once, beside the bus's two lanes, then (when the first lane ends) the orchestrated
# session: the suites wait on processes and the broker far more than they compute. pytest-split cuts the
# suite where the durations in tests/durations.json (a test missing there counts as the average) add up
# to half (docs/testing.md says how to refresh them). Each session has its own vhost and test database,
# and no test changes what another session sees (a memory alarm is raised on a RabbitMQ node of the test's
# own; every test that starts make run or a deployment gives it a VAR_DIR of its own).
# MAKEFLAGS emptied: the make the tests run (make run, make test-unit) would inherit -j and --output-sync,
# and hold back the output they read until it ends.
SUITE = MAKEFLAGS= $(PY) scripts/with_test_services.py $(VENV)/bin/pytest

suite-1 suite-2: $(STAMP)
	$(SUITE) --ignore=tests/orchestration --splits 2 --group $(subst suite-,,$@) --durations-path tests/durations.json $(PYTEST_ARGS)

suite-orchestrated: $(STAMP)
	ORCHESTRATOR=1 $(SUITE) tests/orchestration $(wildcard orchestrator/tests) $(PYTEST_ARGS)

# No DATABASE_URL or BROKER_URL is read: the unit tier touches neither (pytest-django refuses any database access
# outside a django_db test, and tests/e2e/test_unit_tier.py runs this target with both pointing at a port that counts connections: none is made).
test-unit: export DEBUG ?= 1
test-unit: $(STAMP) ## the unit tier only (tests/unit and each context's <context>/tests/unit): no database, no broker, seconds
	$(VENV)/bin/pytest tests/unit $(wildcard */tests/unit) -p no:schemathesis $(PYTEST_ARGS)

BUS_NOX = $(PY) scripts/with_test_services.py $(VENV)/bin/nox --noxfile $(BUS)/noxfile.py

test-bus: export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
test-bus: $(STAMP) ## the bus's own tests on its built wheel: every Python and Django it supports on PostgreSQL + RabbitMQ, the embedded default, its types and its release (nox, in two lanes at once, noxfile.py says which; NOX_ARGS="-s embedded" runs those sessions alone)
ifeq ($(NOX_ARGS),)
	$(MAKE) --no-print-directory -j2 --output-sync=recurse bus-lane-1 bus-lane-2
else
	$(BUS_NOX) $(NOX_ARGS)
endif

bus-lane-1 bus-lane-2: export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
bus-lane-1 bus-lane-2: $(STAMP)
	$(BUS_NOX) -t $(subst bus-,,$@)

upgrade-test: $(STAMP) ## the rolling upgrade: a past release (git 83b4deb, before versioned events; c91459c, before orders.order.created v4) as some deployments, this tree as the others, one broker, both ways (docs/evolving-events.md)
	$(PY) scripts/with_test_services.py $(VENV)/bin/pytest -m upgrade tests/e2e/test_rolling_upgrade.py $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format check) and import-linter
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

clean: ## remove the embedded mode's data (var/)
	rm -rf var

chaos: $(STAMP) ## the long fault-injection run on PostgreSQL + RabbitMQ (bounded; prints what it injected and the invariants it checked; CHAOS_ARGS="--seed N --only a,b --scale F --gateway-latency MS", the gateway at 50 ms by default)
	$(PY) scripts/with_test_services.py $(PY) chaos/run.py $(CHAOS_ARGS)

bench: $(STAMP) ## the benchmarks on PostgreSQL + RabbitMQ, with the machine's own ceilings (prints a table, writes bench/results/)
	$(PY) scripts/with_test_services.py $(PY) bench/run.py $(BENCH_ARGS)

soak: $(STAMP) ## sustained load on PostgreSQL + RabbitMQ through make serve (nginx + gunicorn) and make run's server (64 clients, 5 min each; fails on any 5xx, unbounded connections, memory growth; SOAK_ARGS="--clients N --seconds S --modes gunicorn,runserver")
	$(PY) scripts/with_test_services.py $(PY) bench/soak.py $(SOAK_ARGS)

# With SPLIT=1 the demo reads as the orders deployment of `make run-split` does (and the ledger
# through payments'), with the same defaults.
DEMO_SPLIT_ENV = CONTEXTS=orders DATABASE_URL=$${ORDERS_DATABASE_URL:-sqlite:///$(SPLIT_VAR)/orders.sqlite3} \
	PAYMENTS_DATABASE_URL=$${PAYMENTS_DATABASE_URL:-sqlite:///$(SPLIT_VAR)/payments.sqlite3} VAR_DIR=$(SPLIT_VAR)
demo: $(STAMP) ## place orders that show every saga path against what `make run` is running (SPLIT=1: `make run-split`), and print their timelines
	DEBUG=$${DEBUG:-1} $(if $(SPLIT),$(DEMO_SPLIT_ENV) )$(PY) scripts/demo.py --base-url http://127.0.0.1:$(PORT)

browser-check: $(STAMP) ## check the admin and the API docs in headless Chromium on throwaway shops, about 5 minutes (as root: installs Debian's chromium and chromium-driver if missing); screenshots in var/browser-check/
	$(PY) scripts/browser_check.py
