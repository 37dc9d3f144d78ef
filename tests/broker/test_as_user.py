"""The privilege-dependent properties, proven again as an ordinary uid.

Root reads any file, holds every capability and may make cgroups, so a
sandbox or a file mode tested only as root proves nothing about a real
user's machine.  This runs the containment attacks (``tests/containment``),
the identity tests (``tests/broker/test_identity.py``: who may connect,
who is the operator, what outlives an agent) and the full disk
(``tests/store/test_full_disk.py``: a tmpfs in a user and mount namespace) in a pytest of their own as
uid 65534, with the system's ``python3`` (an interpreter under root's home
is not readable by other uids) and this checkout's packages.  Run as an
ordinary user already, it runs them as that user.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.ordinary_user import RERUN, UID, as_user, scratch, user_python

SUITES = list(RERUN)


@pytest.fixture(scope="module")
def venv() -> Iterator[tuple[Path, Path]]:
    """(base, source): a venv under base readable by the uid (and its home, base/home), and the tree it imports."""
    with scratch("conclave-as-user-") as (base, _):
        _, source = user_python(base)
        yield base, source


def test_privilege_dependent_tests_pass_as_an_ordinary_uid(venv: tuple[Path, Path]) -> None:
    base, source = venv
    env = {
        "PATH": f"{base / 'venv' / 'bin'}:/usr/bin:/bin",
        "HOME": str(base / "home"),
        "LANG": "C.UTF-8",
        "XDG_STATE_HOME": str(base / "home" / "state"),
    }
    # -v: each test's name is printed as it ends, so a run cut short by the timeout names every test that
    # finished (the one it was in is not among them); -ra names every failure in the summary.  Two workers,
    # each file whole on one (module-scoped brokers): the rerun waits on its brokers more than it computes
    # (alone, 71 s on one worker and 41 s on two, for the same CPU).
    argv = as_user([str(base / "venv" / "bin" / "python"), "-m", "pytest", "-v", "-p", "no:cacheprovider", "-x", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", *SUITES])
    try:
        done = subprocess.run(argv, cwd=source, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"the run as an ordinary uid took over {exc.timeout:.0f} s; it was in the last test named here:\n{partial[-6000:]}")
    report = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"as uid {UID if os.geteuid() == 0 else os.geteuid()}:\n{report}"
    passed = int(done.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 20, report  # every containment attack and identity test ran
    # And the inner run really was the ordinary uid, without capabilities.
    whoami = subprocess.run(
        as_user([str(base / "venv" / "bin" / "python"), "-c", "import os; print(os.geteuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])"]),
        env=env, capture_output=True, text=True,
    ).stdout.split()
    assert whoami == [str(UID if os.geteuid() == 0 else os.geteuid()), "0000000000000000"]
