"""``conclave run ...`` as a test's own command, started the way the suite starts every broker.

A test about what `conclave run` prints, refuses or leaves behind runs the
real command line in a process of its own; through ``agents.harness.LAUNCH``
(the suite's warm interpreter, tests/conftest.py) that process is a fork that
has imported the broker already, instead of an interpreter paying about
three quarters of a second of CPU to import it again.  Outside the suite, or
on another interpreter, it is ``subprocess.Popen`` as before.
"""

from __future__ import annotations

import os
import subprocess

from agents import harness
from broker.entry import conclave_argv


def operator_env(**extra: str) -> dict[str, str]:
    """This process's environment without conclave's own variables (the person's shell), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}, **extra}


def conclave_run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``conclave run ARGS`` to its end, as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    argv = conclave_argv("run", *args)
    process = (harness.LAUNCH or subprocess.Popen)(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or operator_env())
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)
