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
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import source_venv

ROOT = Path(__file__).resolve().parents[2]
UID = GID = 65534
SUITES = ["tests/containment", "tests/broker/test_identity.py", "tests/store/test_full_disk.py"]


def _as_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to run the privilege tests as an ordinary uid; install util-linux")
    return [setpriv, f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--inh-caps=-all", *argv]


@pytest.fixture(scope="module")
def user_python() -> Iterator[tuple[Path, Path]]:
    """A venv of the system's python3 that sees this checkout and its dependencies, readable by the uid."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.fail("no system python3 in /usr/bin: the tests as an ordinary uid need an interpreter it may read")
    version = subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.fail(f"the system python3 is {version}, this venv's is {sys.version_info[:2]}: compiled dependencies would not load")
    base = Path(tempfile.mkdtemp(prefix="conclave-as-user-"))
    base.chmod(0o755)
    try:
        packages = Path(sysconfig.get_paths()["purelib"])
        source = ROOT
        probe = _as_user([system, "-c", f"import os; assert os.access({str(packages)!r}, os.R_OK) and os.access({str(ROOT / 'broker')!r}, os.R_OK)"])
        if subprocess.run(probe, capture_output=True).returncode != 0:
            # This checkout or its venv is not readable by that uid (under a private home): copy them.
            packages = Path(shutil.copytree(packages, base / "site-packages", symlinks=True))
            source = base / "source"
            shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__"), symlinks=True)
        source_venv(base, source, python=system, packages=packages)
        home = base / "home"
        home.mkdir()
        if os.geteuid() == 0:
            os.chown(home, UID, GID)
        yield base, source
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_privilege_dependent_tests_pass_as_an_ordinary_uid(user_python: tuple[Path, Path]) -> None:
    base, source = user_python
    env = {
        "PATH": f"{base / 'venv' / 'bin'}:/usr/bin:/bin",
        "HOME": str(base / "home"),
        "LANG": "C.UTF-8",
        "XDG_STATE_HOME": str(base / "home" / "state"),
    }
    argv = _as_user([str(base / "venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUITES])
    done = subprocess.run(argv, cwd=source, env=env, capture_output=True, text=True, timeout=600)
    report = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"as uid {UID if os.geteuid() == 0 else os.geteuid()}:\n{report}"
    passed = int(done.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 20, report  # every containment attack and identity test ran
    # And the inner run really was the ordinary uid, without capabilities.
    whoami = subprocess.run(
        _as_user([str(base / "venv" / "bin" / "python"), "-c", "import os; print(os.geteuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])"]),
        env=env, capture_output=True, text=True,
    ).stdout.split()
    assert whoami == [str(UID if os.geteuid() == 0 else os.geteuid()), "0000000000000000"]
