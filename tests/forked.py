"""``conclave run`` as a test's one-shot command, forked from the session's warm interpreter.

A test that runs ``conclave run`` to see it refuse (a bad team file, a missing chain key, a
failed preflight) pays three quarters of a second of CPU for the broker's imports before the
few milliseconds it is about.  The session's zygote (tests/conftest.py, scenarios/zygote.py)
forks it instead: ``broker.cli.main`` with the same arguments, environment, working
directory and streams, in its own process, as it does for every ``Run``'s broker.
"""

from __future__ import annotations

import subprocess
from typing import Mapping

from agents import harness
from broker.entry import conclave_argv


def conclave_run(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(conclave_argv("run", *args), capture_output=True, text=True, env=env, timeout=timeout)``."""
    argv = conclave_argv("run", *args)
    launch = harness.LAUNCH or subprocess.Popen
    process = launch(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=None if env is None else dict(env))
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)
