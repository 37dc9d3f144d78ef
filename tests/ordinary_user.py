"""Running conclave as an ordinary uid, from a test that may itself be root.

Root reads any file, holds every capability and is exempt from RLIMIT_NPROC,
so a property that depends on privilege is shown again as uid 65534, with
the system's ``python3`` (an interpreter under root's home is not readable
by other uids) and this checkout's packages.  Run as an ordinary user
already, the commands run as that user, unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import source_venv

ROOT = Path(__file__).resolve().parents[1]
UID = GID = 65534
#: What tests/broker/test_as_user.py reruns as that uid: every privilege-dependent test.
RERUN = ("tests/containment", "tests/broker/test_identity.py", "tests/store/test_full_disk.py")


def as_user(argv: list[str]) -> list[str]:
    """``argv`` as uid 65534 when this process is root (setpriv), else as it is."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to run the privilege tests as an ordinary uid; install util-linux")
    return [setpriv, f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--inh-caps=-all", *argv]


def user_uid() -> int:
    """The uid ``as_user`` runs commands as."""
    return UID if os.geteuid() == 0 else os.geteuid()


def user_python(base: Path) -> tuple[Path, Path]:
    """A venv under ``base`` (which the uid can read) of the system's python3 that imports this
    checkout and its dependencies; (its python, the source tree it imports)."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.fail("no system python3 in /usr/bin: the tests as an ordinary uid need an interpreter it may read")
    version = subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.fail(f"the system python3 is {version}, this venv's is {sys.version_info[:2]}: compiled dependencies would not load")
    packages = Path(sysconfig.get_paths()["purelib"])
    source = ROOT
    probe = as_user([system, "-c", f"import os; assert os.access({str(packages)!r}, os.R_OK) and os.access({str(ROOT / 'broker')!r}, os.R_OK)"])
    if subprocess.run(probe, capture_output=True).returncode != 0:
        # This checkout or its venv is not readable by that uid (under a private home): copy them.
        packages = Path(shutil.copytree(packages, base / "site-packages", symlinks=True))
        source = base / "source"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__"), symlinks=True)
    return source_venv(base, source, python=system, packages=packages), source


@contextmanager
def scratch(prefix: str) -> Iterator[tuple[Path, Path]]:
    """(base, home): a directory the uid can read, removed afterwards, and a home in it the uid owns."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    try:
        home = base / "home"
        home.mkdir()
        if os.geteuid() == 0:
            os.chown(home, UID, GID)
        yield base, home
    finally:
        shutil.rmtree(base, ignore_errors=True)
