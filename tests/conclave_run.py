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

from agents.harness import operator_command, operator_env
from broker.entry import conclave_argv

__all__ = ["conclave", "conclave_run", "operator_env"]


def conclave(*args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``conclave ARGS`` to its end (in ``cwd``), as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    return operator_command(conclave_argv(*args), env=env or operator_env(), timeout=timeout, cwd=cwd)


def conclave_run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``conclave run ARGS``."""
    return conclave("run", *args, env=env, timeout=timeout)
