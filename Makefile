# meshdash: `make run` starts the demo dashboard, `make test` runs every check. Both work from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PG_URL ?= postgres://postgres@127.0.0.1:5432/meshdash
REDIS_URL ?= redis://127.0.0.1:6379/0
DEVHUB_PORT ?= 8765
PORT ?= 8000

.PHONY: install system-deps promtool node-deps node-deps-if-npm services lint test test-sqlite test-serial test-services test-storeless test-sqlite-beside test-beside-serial coverage run demo-data clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	touch $@

# meshdash-agent on the venv's PATH. The agent is modules of the standard library only (packages_app/nodes/
# agent.py, the agent_*.py modules it imports, and the exposition parser, nodes/exposition.py), so the command
# is a zipapp of those (python -m zipapp: one executable file, the venv's Python on its first line): no
# copy of the project in site-packages to shadow the working tree, nothing that points into a folder that
# may go away. `pip install .` installs the same command from [project.scripts] where meshdash is
# deployed. Remade when the agent changes. tests/test_agent_files.py builds the same zipapp from this list.
AGENT := $(VENV)/bin/meshdash-agent
AGENT_MODULES := packages_app/nodes/__init__.py packages_app/nodes/agent.py packages_app/nodes/exposition.py \
	packages_app/nodes/agent_common.py packages_app/nodes/agent_baseline.py packages_app/nodes/agent_config.py \
	packages_app/nodes/agent_observations.py packages_app/nodes/agent_runs.py packages_app/nodes/agent_spool.py
$(AGENT): $(AGENT_MODULES) $(STAMP)
	rm -rf $@.d && mkdir -p $@.d/packages_app/nodes && touch $@.d/packages_app/__init__.py
	cp $(AGENT_MODULES) $@.d/packages_app/nodes/
	printf 'import sys\nfrom packages_app.nodes.agent import main\nsys.exit(main())\n' >$@.d/__main__.py
	$(PY) -m zipapp $@.d -p '$(realpath $(VENV))/bin/python' -o $@.tmp && rm -rf $@.d && mv $@.tmp $@

install: $(STAMP) $(AGENT)

# Debian's Chromium drives the browser tests (Playwright's own browser download cannot work here); Debian's
# nginx is the buffering proxy tests/test_proxy.py puts in front of gunicorn, as docs/configuration.md documents.
system-deps:
	@command -v chromium >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	@test -x /usr/sbin/nginx || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light; }

# promtool checks deploy/prometheus/alerts.yml and runs its unit tests (tests/test_alert_rules.py). Only the
# binary is taken from Debian's prometheus package, unpacked under var/: installing the package would start a
# Prometheus server. Without it (no package index) those two tests skip and say so.
PROMTOOL := var/promtool/usr/bin/promtool
$(PROMTOOL):
	@mkdir -p var/promtool
	@cd var/promtool && { apt-get download -q prometheus 2>/dev/null || { apt-get update -q && apt-get download -q prometheus; }; } \
		&& dpkg-deb -x prometheus_*.deb . && rm -rf prometheus_*.deb usr/bin/prometheus usr/share \
		|| echo "promtool not available: tests/test_alert_rules.py will skip its promtool checks"

promtool: $(PROMTOOL)

# axe-core (the accessibility rules the browser tests run), pinned in package-lock.json, from the npm registry.
NODE_STAMP := node_modules/.installed-stamp
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

node-deps: $(NODE_STAMP)

# make run works without npm: the pages then load the full plotly.js bundle of the plotly package.
node-deps-if-npm:
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory node-deps; \
	else echo "npm not found: the pages will load the full plotly.js bundle (4.8 MB)"; fi

# PostgreSQL and Redis: start them if they are not answering.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
	@redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
	@for i in $$(seq 30); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 1; done
	@psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='meshdash'" | grep -q 1 \
		|| createdb -h 127.0.0.1 -U postgres meshdash

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy packages_app meshdash

# The suite, spread over every core (pytest-xdist, TEST_WORKERS processes). Tests that touch no store run
# once, on the zero-configuration default, under coverage.py (branch coverage, which costs ~3x the CPU of a
# test: measured there only, where the pure modules are exercised). Tests that touch a store (a database or
# the shared cache; tests/passes.py) run without the tracer on the machine's PostgreSQL and Redis, where the
# task tests also start a real Celery worker; on SQLite (eager tasks, local-memory cache) run again only
# those of the code with a SQLite path of its own (tests/passes.py, SQLITE_PATHS; `make run`'s demo on
# SQLite is walked by the storeless pass). The `serial` tests (they start Celery workers, a redis-server,
# gunicorn, with time limits of seconds) run one at a time on PostgreSQL + Redis, after the xdist passes, so
# no other test with a clock competes with them for the cores (beside a niced pass, the demo and live-server
# tests of that pass starved). They mostly wait on the processes they start, so `make test` runs beside
# them what has no clock of seconds (test-beside-serial): the lint; the PostgreSQL tests of every store-test
# module whose source names no clock (tests/passes.py; left out of the PostgreSQL pass), in TEST_WORKERS
# processes at the lowest priority (nice 19: they take what the serial tests leave of the cores; the
# PostgreSQL server's own processes keep their priority); and the coverage gate. Likewise the SQLite store
# pass, which has no clock either, runs at the lowest priority beside the storeless pass, which idles about a
# third of its time while the demo and the drip tests wait (test-sqlite-beside). make prints each side's
# output when that side ends. Each run prints how many tests ran on its database. Each xdist worker gets its
# own test database (test_<name>_gwN) and Redis database (REDIS_URL's plus N, or the Nth of TEST_REDIS_DBS,
# e.g. "3,9"; tests/settings.py). The coverage table is printed and gated at 95 % on each pure module
# (tests/coverage_gate.py).
TEST_WORKERS ?= $(shell nproc)
SQLITE_WORKERS ?= 1
TEST_REDIS_DBS ?=
PYTEST := $(VENV)/bin/pytest -p no:cacheprovider
SQLITE_ENV := env -u DATABASE_URL -u CELERY_BROKER_URL -u REDIS_URL -u CACHE_URL PROMTOOL=$(abspath $(PROMTOOL))
SERVICES_ENV := DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) REDIS_URL=$(REDIS_URL) \
	MESHDASH_TEST_REDIS_DBS=$(TEST_REDIS_DBS)
STORELESS_PASS := $(SQLITE_ENV) $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --no-store-tests --cov --cov-report=
SQLITE_STORE_PASS := $(SQLITE_ENV) $(PYTEST) --dist loadgroup --store-tests-only --sqlite-paths
SERVICES_PASS := $(SERVICES_ENV) $(PYTEST) -n $(TEST_WORKERS) --store-tests-only -m "not serial"
# The store-test modules without a clock, beside the serial tests: their test databases test_<name>_gwN are
# free once the PostgreSQL pass ended; their Redis databases are not the serial tests' (REDIS_URL's own):
# TEST_REDIS_DBS, or else the TEST_WORKERS databases after REDIS_URL's.
comma := ,
NICE := nice -n 19
# REDIS_URL's database number (0 when the URL names none).
REDIS_DB := $(or $(shell printf '%s' '$(REDIS_URL)' | sed -n 's|^[a-z]*://[^/]*/\([0-9][0-9]*\).*|\1|p'),0)
BESIDE_REDIS_DBS ?= $(or $(TEST_REDIS_DBS),$(shell seq -s, $$(( $(REDIS_DB) + 1 )) $$(( $(REDIS_DB) + $(TEST_WORKERS) ))))
BESIDE_SERIAL_PASS := DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) REDIS_URL=$(REDIS_URL) \
	MESHDASH_TEST_REDIS_DBS=$(BESIDE_REDIS_DBS) $(NICE) $(PYTEST) -n $(TEST_WORKERS) --store-tests-only \
	-m "not serial" --beside-serial

test-sqlite: install system-deps node-deps promtool
	$(STORELESS_PASS)
	$(SQLITE_STORE_PASS) -n $(TEST_WORKERS)

test-serial: install system-deps node-deps services
	$(SERVICES_ENV) $(PYTEST) --store-tests-only -m serial

test-services: install system-deps node-deps services
	$(SERVICES_PASS)
	$(MAKE) --no-print-directory test-serial

# The table of the coverage pass, then the gate.
coverage: install
	$(VENV)/bin/coverage report
	$(VENV)/bin/coverage json -q -o var/coverage.json
	$(PY) -m tests.coverage_gate var/coverage.json

test-storeless: install system-deps node-deps promtool
	$(STORELESS_PASS)

# Beside the storeless pass, at the lowest priority.
test-sqlite-beside: install system-deps node-deps promtool
	$(NICE) $(SQLITE_STORE_PASS) -n $(SQLITE_WORKERS)

# Beside the serial tests, one after another: what has no clock of seconds.
test-beside-serial: install system-deps node-deps promtool services
	@test -n "$(BESIDE_REDIS_DBS)" || { echo "BESIDE_REDIS_DBS is empty"; exit 2; }
	@for db in $(subst $(comma), ,$(BESIDE_REDIS_DBS)); do test "$$db" != "$(REDIS_DB)" \
		|| { echo "BESIDE_REDIS_DBS=$(BESIDE_REDIS_DBS) holds REDIS_URL's own database, the serial tests' queue"; \
		exit 2; }; done
	$(MAKE) --no-print-directory lint
	$(BESIDE_SERIAL_PASS)
	$(MAKE) --no-print-directory coverage

test: install system-deps node-deps promtool services
	$(MAKE) --no-print-directory -j2 --output-sync=recurse test-storeless test-sqlite-beside
	$(SERVICES_PASS) --not-beside-serial
	$(MAKE) --no-print-directory -j2 --output-sync=recurse test-serial test-beside-serial

# The demo: devhub serves generated packages, a Celery worker ingests them, runserver shows them. It needs
# neither PostgreSQL nor Redis: SQLite, and Redis as the broker only when one answers (bin/run-demo).
# The demo is a development server: DEBUG is off unless set, so it is set here.
run: export DEBUG = true
run: install node-deps-if-npm
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collect_plotly
	REDIS_URL=$(REDIS_URL) HF_ENDPOINT=http://127.0.0.1:$(DEVHUB_PORT) MESHDASH_HUB_DEV=1 bin/run-demo $(DEVHUB_PORT) $(PORT)

clean:
	rm -rf $(VENV) db.sqlite3* staticfiles artifacts node_modules .coverage
