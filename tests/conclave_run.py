"""The operator's ``conclave ...`` as a test's own command, started the way the suite starts every broker.

A test about what `conclave run` or `conclave doctor` prints, refuses or
leaves behind runs the real command line in a process of its own; through
``agents.harness.COMMAND`` (the suite's warm interpreter, tests/conftest.py)
that process is a fork that has imported conclave already, instead of an
interpreter paying up to three quarters of a second of CPU to import it
again.  Outside the suite it is ``subprocess.run`` as before.
"""

from __future__ import annotations

import os
import subprocess

from agents import harness
from broker.entry import conclave_argv


def operator_env(**extra: str) -> dict[str, str]:
    """This process's environment without conclave's own variables (the person's shell), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}, **extra}


def conclave(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``conclave ARGS`` to its end, as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    argv, env = conclave_argv(*args), env or operator_env()
    if harness.COMMAND is not None:
        return harness.COMMAND(argv, env=env, timeout=timeout)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def conclave_run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``conclave run ARGS``."""
    return conclave("run", *args, env=env, timeout=timeout)
