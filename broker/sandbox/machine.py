"""What this machine offers an agent's sandbox, and the strongest level it allows.

Levels (the team file's ``sandbox = ...``):

``strict``
    Landlock plus a user and mount namespace: a private ``/tmp``,
    ``/dev/shm`` and ``/run/user/<uid>``, deputies' sockets and ``~/.ssh``
    hidden, a git directory of its own bound over ``.git`` (its commits are
    brought in by the broker).
``landlock``
    Landlock only (where unprivileged user namespaces are refused): git is
    read-only, and nothing new can be made at the top of the tree.
``off``
    Nothing but a clean environment.  Loud, and documented as such.

``probe()`` asks the kernel, not a list of versions: the Landlock ABI from
the syscall, user namespaces by starting the launcher with ``--ns`` once,
cgroup delegation by trying to make a cgroup.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Final, final

import attrs

from broker.sandbox.sweep import CGROUP_MOUNTS

LEVELS: Final = ("strict", "landlock", "off")
LAUNCHER: Final = Path(__file__).with_name("launcher.py")


def launcher_argv() -> list[str]:
    """The interpreter and flags the launcher runs under: isolated, no site (nothing from the work tree)."""
    return [sys.executable, "-I", "-S", str(LAUNCHER)]


@final
@attrs.frozen
class Machine:
    """What the kernel allows this uid."""

    landlock_abi: int
    user_namespaces: bool
    user_namespaces_error: str | None
    cgroup: Path | None  # a cgroup v2 directory this uid may create children in, if any
    uid: int

    @property
    def strongest(self) -> str:
        if self.landlock_abi >= 1 and self.user_namespaces:
            return "strict"
        if self.landlock_abi >= 1:
            return "landlock"
        return "off"

    def offers(self, level: str) -> str | None:
        """None when ``level`` can be honoured here, else why not."""
        if level == "off":
            return None
        if self.landlock_abi < 1:
            return "this kernel has no Landlock (Linux 5.13+ with landlock in the LSM list)"
        if level == "strict" and not self.user_namespaces:
            return f"unprivileged user namespaces are refused here ({self.user_namespaces_error})"
        return None

    def threats(self) -> dict[str, str]:
        """What each level means on this machine, per threat tier (for `conclave doctor`)."""
        scopes = "signals and abstract sockets scoped" if self.landlock_abi >= 6 else "signals and abstract sockets NOT scoped (Landlock ABI < 6)"
        return {
            "T1 (the model)": "defended at every level: identity from the runtime, the prefilter and the trust policy",
            "T2 (a process), strict": (
                f"files: only the work tree, its own temp and directory are writable; the state, keys and other agents are unreadable; "
                f"{scopes}; private /tmp and /run/user hide multiplexers, D-Bus, ssh-agent, editor servers; "
                "commits in a git directory of its own, brought into yours by the broker (the person's .git is out of sight)"
                if self.strongest == "strict"
                else "not available here"
            ),
            "T2 (a process), landlock": (
                f"files as strict; {scopes}; a deputy's named socket (tmux in /tmp, the D-Bus bus) can still be reached; "
                "git is read-only (status, diff, log; no commits) and nothing new can be made at the top of the tree"
                if self.landlock_abi >= 1
                else "not available here"
            ),
            "T2 (a process), off": "the agent can read the operator key and the database as the user: only lineage checks and the event log remain",
            "T3 (the filesystem)": "outside any sandbox: detected by `conclave memory verify` (keyed chain, anchored head)",
            "leftover processes": (
                f"cgroup v2 kill ({self.cgroup}) and the subreaper sweep" if self.cgroup else "the subreaper sweep (no delegated cgroup v2 here)"
            ),
        }


@functools.lru_cache(maxsize=1)
def probe() -> Machine:
    """Ask the kernel once per process."""
    from broker.sandbox import landlock

    abi = landlock.abi_version()
    try:
        # From "/": a working directory under the private /tmp would not be there to return to.
        done = subprocess.run([*launcher_argv(), "--ns", "--", "/bin/true"], capture_output=True, text=True, timeout=30, cwd="/")
        userns, error = done.returncode == 0, (done.stderr.strip().removeprefix("conclave-sandbox: ") or None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        userns, error = False, str(exc)
    return Machine(landlock_abi=abi, user_namespaces=userns, user_namespaces_error=None if userns else error, cgroup=_cgroup(), uid=os.getuid())


def _cgroup() -> Path | None:
    """Our own cgroup v2 directory if this uid may make children there and they have cgroup.kill."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        return None
    for mount in CGROUP_MOUNTS:
        base = mount / own.lstrip("/")
        if (mount / "cgroup.controllers").exists() and base.is_dir():
            probe_dir = base / f"conclave-probe-{os.getpid()}"
            try:
                probe_dir.mkdir()
            except OSError:
                return None
            try:
                return base if (probe_dir / "cgroup.kill").exists() and os.access(base / "cgroup.procs", os.W_OK) else None
            finally:
                probe_dir.rmdir()
    return None
