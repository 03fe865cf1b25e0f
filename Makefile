# Two commands do everything on a fresh machine (only Python needed):
#   make demo   - the main job: a scripted session on the embedded defaults
#   make test   - the test suite
# Each creates .venv and installs what it needs on first use.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
TS_SDK := tests/interop/ts/node_modules/.package-lock.json
# The real agent CLIs whose hooks ask broker serve (tests/agents), pinned by their lockfiles.
AGENTS := tests/agents/claude-code/node_modules/.package-lock.json \
  tests/agents/codex/node_modules/.package-lock.json
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# flake8-async: the library must checkpoint in every async function (ASYNC910/911/912, house
# rule 3). Tests and benches are exempt from those and from ASYNC124 (async without await):
# their answerer stubs deliberately answer without yielding, a case the broker must handle.
STARTABLE   := serve_answerer,serve_broker,serve_acp,start_answerer,run_actor,run_timer,session_task,actor,serve_inbox,run_poller,serve_socket,_hold
ASYNC_LIB   := --disable=ASYNC124 --startable-in-context-manager=$(STARTABLE)
ASYNC_TESTS := --disable=ASYNC124,ASYNC910,ASYNC911,ASYNC912 \
  --startable-in-context-manager=$(STARTABLE)

.PHONY: demo test lint docs bench bench-quick system-deps clean

# The system packages come first: pyfuse3 (a test dependency) builds against libfuse3's headers.
$(STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# compat: a .pth with the checkout on sys.path, which mypy follows (the default editable
	# mode uses an import hook mypy cannot see) and which picks up new modules without a
	# reinstall. Downstream projects use editable_mode=strict instead (see the README).
	$(PY) -m pip install --quiet -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

# bubblewrap is the real sandbox of the bash tool; Chromium shows the web inbox's page in the
# browser tests (Playwright drives Debian's chromium, never a browser download of its own);
# Node.js runs the official TypeScript ACP client in the interop tests; PostgreSQL's server
# binaries let the tests start a throwaway cluster where no server answers
# (tests/postgres_server.py); FUSE 3 (fusermount3, and libfuse3's headers that pyfuse3 builds
# against) mounts the power-cut filesystem of tests/powercut. Install them once when missing.
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing bubblewrap (Debian package) ..."; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap; }
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing nodejs and npm (Debian packages) ..."; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs npm; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package; the inbox's browser tests drive it headless) ..."; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  echo "installing postgresql (Debian package; the tests start a throwaway cluster) ..."; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq postgresql; }
	@{ command -v fusermount3 && pkg-config --exists fuse3 && command -v cc; } >/dev/null 2>&1 || { \
	  echo "installing fuse3, libfuse3-dev, pkg-config, gcc (Debian packages; the power-cut filesystem) ..."; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq fuse3 libfuse3-dev pkg-config gcc; }

# The official TypeScript ACP SDK, pinned by tests/interop/ts/package-lock.json.
$(TS_SDK): tests/interop/ts/package-lock.json | system-deps
	npm ci --prefix tests/interop/ts --no-audit --no-fund --loglevel=error

# Claude Code (@anthropic-ai/claude-code) and Codex (@openai/codex): each a native binary in an
# npm optional dependency, so nothing is fetched from outside the npm registry.
tests/agents/%/node_modules/.package-lock.json: tests/agents/%/package-lock.json | system-deps
	npm ci --prefix tests/agents/$* --no-audit --no-fund --loglevel=error

demo: $(STAMP) system-deps
	$(VENV)/bin/broker demo --answer allow

test: $(STAMP) system-deps $(TS_SDK) $(AGENTS)
	$(PY) -W error -m pytest

lint: $(STAMP)
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/flake8-async $(ASYNC_LIB) $$(git ls-files 'broker/*.py')
	$(VENV)/bin/flake8-async $(ASYNC_TESTS) $$(git ls-files 'tests/*.py' 'bench/*.py')

# The public packages (each one's __all__ is its reference page).
DOC_MODULES := broker broker.rules broker.store broker.tools broker.acp broker.mcp broker.hooks \
  broker.inbox broker.agent broker.serve broker.stats broker.telemetry broker.testing broker_hook

# The API reference from the docstrings, into build/docs (open build/docs/index.html). Warnings
# are errors: an annotation the reference cannot resolve, a broken docstring, fail the build.
docs: $(STAMP)
	rm -rf build/docs
	$(PY) -W error -m pdoc --output-directory build/docs $(DOC_MODULES)

# The suite (python -m bench) prints a table, writes bench/results/{results.json,plot.svg} and
# rewrites the figures table of bench/README.md (not with --quick);
# the durable-store bench, the crash loop and the PostgreSQL benches (store throughput and
# resume; answers from another process) run on their own. The PostgreSQL ones use the server
# at $BROKER_BENCH_POSTGRES (default: the local one) and say they skipped when none answers.
bench: $(STAMP) system-deps
	$(PY) -W error -m bench
	$(PY) -W error -m bench.store
	$(PY) -W error -m bench.crash
	$(PY) -W error -m bench.powercut
	$(PY) -W error -m bench.pgstore
	$(PY) -W error -m bench.remote
	$(PY) -W error -m bench.mcp_gate

bench-quick: $(STAMP) system-deps
	$(PY) -W error -m bench --quick
	$(PY) -W error -m bench.store --quick
	$(PY) -W error -m bench.crash --quick
	$(PY) -W error -m bench.pgstore --quick
	$(PY) -W error -m bench.remote --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
