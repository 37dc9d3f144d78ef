# Two commands for a fresh machine: `make demo` and `make test`.
# Each builds .venv (and reinstalls when pyproject.toml or this file changes) before it runs.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test bench fuzz fuzz-proof agent-binaries clean-venv tools

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "conclave needs Python 3.11 or newer; set PYTHON=python3.11")'
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	@# The editable install's import hook (setuptools' finder, imported by every interpreter's site step: about
	@# 25 ms of CPU each) is replaced by a plain path entry for this checkout, as a venv of a source tree has.
	@$(VENV)/bin/python -c 'import sys, sysconfig, pathlib; [pth.write_text(sys.argv[1] + "\n") for pth in pathlib.Path(sysconfig.get_paths()["purelib"]).glob("__editable__.conclave-*.pth")]' '$(CURDIR)'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/conclave demo

# System programs some tests drive: tmux (the dashboard in a real terminal), Graphviz's
# dot (memory graph --format svg) and strace (what a broker opens, tests/test_session_home.py).  As root with apt-get -- a fresh CI
# machine -- they are installed; elsewhere this says what to install, and the
# tests that need them fail naming it (they never skip).
tools:
	@missing=""; for tool in tmux dot strace; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "make: installing tmux, graphviz and strace (missing:$$missing)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux graphviz strace >/dev/null; \
	else \
		echo "make: missing$$missing; install tmux, graphviz and strace (sudo apt-get install tmux graphviz strace) or the tests that drive them fail" >&2; \
	fi

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
# One worker more than the cores this process may use, at most 5 (pytest-xdist): many tests wait on their
# brokers and agents, so a worker per core left a third of the CPU idle (2 cores: 3 workers ran the suite in
# 3 min 50 s against 5 min 18 s; 4 workers 3 min 38 s at a higher load, docs/BENCHMARKS.md).  Each test file whole on one worker (module-scoped
# brokers and the order within a file hold), in the order tests/conftest.py gives them (the longest first; xdist's
# default would reorder files by their number of tests, the one-test files of a minute each last);
# `.venv/bin/python -m pytest` alone runs serially.
WORKERS := $(shell $(PYTHON) -c 'import os; print(min(len(os.sched_getaffinity(0)) + 1, 5))' 2>/dev/null || echo 2)

test: $(STAMP) tools
	@$(VENV)/bin/python -m pytest -q --numprocesses $(WORKERS) --dist loadfile --no-loadscope-reorder; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

# The pinned Claude Code and Codex CLI the real-agent tests drive, fetched (no npm needed) from the npm registry into a
# cache outside the repository ($$CONCLAVE_AGENT_BINARIES, else $$XDG_CACHE_HOME/conclave/agent-binaries).
# `make test` installs them itself when they are missing; this is the same step on its own.
agent-binaries: $(STAMP)
	$(VENV)/bin/python -m tests.agents.realbin

# The foundation benchmark; the others are listed in docs/BENCHMARKS.md.
bench: $(STAMP)
	$(VENV)/bin/python bench/broker_bench.py

# The invariant fuzzer (docs/FUZZING.md).  `make test` runs it on a short budget; this runs random seeds
# for FUZZ_SECONDS (default 600) on FUZZ_BACKEND (sqlite, or postgresql: two brokers on one database)
# and saves each finding, shrunk to a scenario file, under FUZZ_OUT (default fuzz-findings/).
FUZZ_SECONDS ?= 600
FUZZ_BACKEND ?= sqlite
FUZZ_OUT ?= fuzz-findings
fuzz: $(STAMP)
	$(VENV)/bin/python -m tests.fuzz.campaign --seconds $(FUZZ_SECONDS) --backend $(FUZZ_BACKEND) --out $(FUZZ_OUT) --keep-going

# Each trust, identity, exposure, lock and mail defence switched off in turn (scenarios/_defences.toml),
# the fuzzer run against each for FUZZ_PROOF_SECONDS (default 180); last line `fuzz proof: N/M defences caught`.
fuzz-proof: $(STAMP)
	$(VENV)/bin/python -m tests.fuzz.proof

clean-venv:
	rm -rf $(VENV)
