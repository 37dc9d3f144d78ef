"""How conclave runs itself where someone else's files are.

Git hooks, Claude Code hooks, MCP server entries and the agent launcher all
start ``conclave`` with the work tree as the current directory, often on
behalf of someone else: a person committing, another agent's client.  With
``python -m broker.cli`` the current directory comes first on ``sys.path``,
so a ``broker/`` package an agent wrote into the tree would run instead of
conclave -- as that person, or with that agent's ticket.  Every command
conclave builds is therefore the absolute interpreter in isolated mode
(``-I``: no current directory or script directory on ``sys.path``, no
``PYTHON*`` variables, no user site-packages).
"""

from __future__ import annotations

import sys


def python_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """``[python, "-I", "-m", module, *args]`` with the absolute interpreter running conclave now."""
    return [python or sys.executable, "-I", "-m", module, *args]


def conclave_argv(*args: str, python: str | None = None) -> list[str]:
    """The ``conclave`` command line for ``args``, safe to run inside any work tree."""
    return python_argv("broker.cli", *args, python=python)
