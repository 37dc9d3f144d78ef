# Two commands for a fresh machine: `make demo` and `make test`.
# Each builds .venv (and reinstalls when pyproject.toml changes) before it runs.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test bench agent-binaries clean-venv

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "conclave needs Python 3.11 or newer; set PYTHON=python3.11")'
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/conclave demo

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
test: $(STAMP)
	@$(VENV)/bin/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

# The pinned Claude Code and Codex CLI the real-agent tests drive, from the npm registry into a
# cache outside the repository ($$CONCLAVE_AGENT_BINARIES, else $$XDG_CACHE_HOME/conclave/agent-binaries).
# `make test` installs them itself when they are missing; this is the same step on its own.
agent-binaries: $(STAMP)
	$(VENV)/bin/python -m tests.agents.realbin

# The foundation benchmark; the others are listed in docs/BENCHMARKS.md.
bench: $(STAMP)
	$(VENV)/bin/python bench/broker_bench.py

clean-venv:
	rm -rf $(VENV)
