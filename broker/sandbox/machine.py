"""What this machine offers an agent's sandbox, and the strongest level it allows.

Levels (the team file's ``sandbox = ...``):

``strict``
    Landlock plus a user and mount namespace: a private ``/tmp``,
    ``/dev/shm``, ``/run/user/<uid>`` and home (only the granted paths bound
    back), deputies' sockets hidden, ``.git/hooks`` and ``.git/config``
    read-only; and, where the kernel allows one, a PID namespace whose death
    takes everything in it, and a share of the uid's processes
    (``RLIMIT_NPROC`` in the agent's own user namespace).
``landlock``
    Landlock only (where unprivileged user namespaces are refused).
``off``
    Nothing but a clean environment: no protection against T2 at all.
    Loud, and documented as such.

What ends an agent's leftovers -- when it exits, and when the broker dies --
is, from strongest to weakest: its PID namespace (the kernel kills the
namespace with its init), a delegated cgroup v2 (``cgroup.kill``), and
only then the launcher's own sweep of what is re-parented to it (it is the
agent's child subreaper), which :meth:`Machine.leftovers` calls weaker.

``probe()`` asks the kernel, not a list of versions: the Landlock ABI from
the syscall, user and PID namespaces by starting the launcher with ``--ns``
(and ``--pidns``) once, cgroup delegation by trying to make a cgroup.

A cgroup delegated by systemd (``systemd-run --user --scope -p Delegate=yes
conclave run ...``) is found like any other: the broker looks at its own
cgroup.  conclave does not start a systemd scope per agent itself: it would
cost a D-Bus round trip to the user's manager on every spawn (a same-uid
deputy the box otherwise hides) and adds nothing a PID namespace does not
already give where user namespaces exist (docs/THREAT_MODEL.md).
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
#: What ``sandbox = "off"`` means, said the same way by `conclave run`, `conclave doctor` and docs/THREAT_MODEL.md.
OFF_WORDS: Final = (
    "NO protection against T2: an unboxed agent can ptrace your shell and make it run `conclave memory promote`, "
    "and read the operator key and the database as you; the lineage check is no defence at this level"
)
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
    #: A PID namespace inside the user namespace (its own /proc mounted): strict boxes get one.
    pid_namespaces: bool = False
    pid_namespaces_error: str | None = None

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

    def leftovers(self, level: str) -> str:
        """What ends the processes an agent at ``level`` leaves behind (when it exits, and when
        the broker dies), in words; see :meth:`weaker`."""
        if level == "off":
            how = f"its cgroup under {self.cgroup} and " if self.cgroup is not None else ""
            return (
                f"{how}its launcher's sweep, which an unboxed agent can evade (it may kill its launcher, leave its cgroup "
                "or ask a deputy to start a process outside its tree)"
            )
        if level == "strict" and self.pid_namespaces:
            return "a PID namespace of its own: when the agent exits, or the broker dies, the kernel kills everything it started"
        if self.cgroup is not None:
            return f"a cgroup of its own under {self.cgroup}: cgroup.kill ends everything it started, when it exits or the broker dies"
        return (
            "WEAKER: no PID namespace or delegated cgroup for this level here, so its launcher sweeps what it leaves "
            "(its child subreaper kills what is re-parented to it, pass after pass); a process that escapes its tree "
            "through a deputy is not caught"
        )

    def weaker(self, level: str) -> bool:
        """Does only the launcher's sweep stand between an agent at ``level`` and its leftovers outliving it?"""
        return not (level == "strict" and self.pid_namespaces) and self.cgroup is None

    def process_share(self, level: str) -> str:
        """Whether an agent at ``level`` is held to a share of the uid's processes, in words."""
        if self.uid == 0:
            return "none: uid 0 is exempt from RLIMIT_NPROC (run conclave as a user)" + (
                f"; cgroup pids.max under {self.cgroup} where its pids controller is enabled" if self.cgroup else ""
            )
        if level == "strict":
            return "max_processes (RLIMIT_NPROC in its own user namespace, counted per namespace since Linux 5.14)"
        if self.cgroup is not None:
            return f"max_processes as pids.max, where the pids controller is enabled under {self.cgroup}"
        return "none: one agent can take every process the uid may have (only strict or a delegated cgroup give a share)"

    def threats(self) -> dict[str, str]:
        """What each level means on this machine, per threat tier (for `conclave doctor`)."""
        scopes = "signals and abstract sockets scoped" if self.landlock_abi >= 6 else "signals and abstract sockets NOT scoped (Landlock ABI < 6)"
        return {
            "T1 (the model)": "defended at every level: identity from the runtime, the prefilter and the trust policy",
            "T2 (a process), strict": (
                f"files: only the work tree, its own temp and directory are writable; every conclave state dir, your credentials and other "
                f"agents are unreadable (home is an allow-list); "
                f"{scopes}; private /tmp and /run/user hide multiplexers, D-Bus, ssh-agent, editor servers; .git/hooks and .git/config read-only"
                if self.strongest == "strict"
                else "not available here"
            ),
            "T2 (a process), landlock": (
                f"files as strict (home closed but for toolchains); {scopes}; a deputy's named socket (tmux in /tmp, the D-Bus bus) can still be reached; "
                ".git/hooks and .git/config are writable"
                if self.landlock_abi >= 1
                else "not available here"
            ),
            "T2 (a process), off": OFF_WORDS,
            "T3 (the filesystem)": "outside any sandbox: detected by `conclave memory verify` (keyed chain, anchored head)",
            **{f"leftover processes, {level}": self.leftovers(level) for level in LEVELS if level == "off" or self.offers(level) is None},
            **{f"process share, {level}": self.process_share(level) for level in LEVELS if level == "off" or self.offers(level) is None},
        }


@functools.lru_cache(maxsize=1)
def probe() -> Machine:
    """Ask the kernel once per process."""
    from broker.sandbox import landlock

    from broker.identity import pidfs_names_processes

    abi = landlock.abi_version()
    if pidfs_names_processes():
        pidns, pid_error = _try_launcher("--ns", "--pidns")
    else:
        # Inside a PID namespace an agent sees its broker's pid as 0: only a pidfd that names the
        # process (pidfs) lets it tell its broker from an impostor serving the socket path.
        pidns, pid_error = False, "this kernel's pidfds do not name processes (pidfs, Linux 6.9+), so an agent in one could not recognise its broker"
    userns, error = (True, None) if pidns else _try_launcher("--ns")
    return Machine(
        landlock_abi=abi, user_namespaces=userns, user_namespaces_error=error, cgroup=_cgroup(), uid=os.getuid(),
        pid_namespaces=pidns, pid_namespaces_error=pid_error,
    )  # fmt: skip


def _try_launcher(*options: str) -> tuple[bool, str | None]:
    """Does the launcher set up ``options`` here?  (True, None), or (False, why not)."""
    try:
        # From "/": a working directory under the private /tmp would not be there to return to.
        done = subprocess.run([*launcher_argv(), *options, "--", "/bin/true"], capture_output=True, text=True, timeout=30, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0:
        return True, None
    return False, done.stderr.strip().removeprefix("conclave-sandbox: ") or f"the launcher exited with {done.returncode}"


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
