"""One agent's box: the launcher command line the supervisor runs, and what it cleans up after.

:func:`build` turns a level (``strict``, ``landlock``, ``off``) into the
launcher's options for one agent:

* **read**: the system, toolchains (``/opt``, ``/nix``, ...), conclave's own
  installation, ``$HOME`` -- less the state directory, ``~/.ssh`` (keys for
  ``ssh localhost``), ``~/.gnupg`` and ``/run/user/<uid>``;
* **write**: its work tree, its own temporary space (a private ``/tmp`` in
  ``strict``; a 0700 directory named in ``TMPDIR`` in ``landlock``), its own
  per-agent directory, and what its preset declares (``SandboxNeeds``);
* **strict** also hides deputies (private ``/tmp``, ``/dev/shm``,
  ``/run/user/<uid>``; ``~/.ssh``, ``~/.gnupg``, ``~/.screen`` and container
  sockets emptied) and binds the agent's own git directory over
  ``<repo>/.git``, the person's objects read-only inside it
  (:mod:`broker.sandbox.gitdir`): the person's git directory is out of
  sight, so nothing an agent writes there runs later as the person;
* **landlock** leaves ``.git`` out of the write grants (git is read-only:
  ``status``, ``diff``, ``log`` work, commits do not; no new entry can be
  made at the top of the tree);
* at both levels, paths inside the tree that the person's git trusts
  (``core.hooksPath``, included config, a filter's script, a submodule's
  ``.git``: :mod:`broker.sandbox.gitlayout`) are read-only (:func:`git_options`);
* every level strips the deputies' variables (:data:`DEPUTY_VARIABLES`), and
  the launcher stays as the agent's keeper and child subreaper (a PID
  namespace of its own in ``strict`` where the kernel allows one); a root
  broker's agents lose every capability.

Never does a box name a secret on a command line: ``/proc/<pid>/cmdline``
is readable to every process of the uid.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Final, Iterable, Mapping, final

import attrs

from broker.sandbox.machine import Machine, launcher_argv

#: Variables that point at a same-uid deputy: a process the person runs that would act for
#: the agent outside its box (a multiplexer opening a window, the session bus starting a
#: unit, ssh-agent signing, an editor server running a command, a display taking keystrokes).
DEPUTY_VARIABLES: Final = frozenset({
    "TMUX", "TMUX_PANE", "TMUX_TMPDIR", "STY", "SCREENDIR", "ZELLIJ", "ZELLIJ_SESSION_NAME",
    "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO",
    "VSCODE_IPC_HOOK", "VSCODE_IPC_HOOK_CLI", "VSCODE_GIT_IPC_HANDLE", "VSCODE_GIT_ASKPASS_NODE",
    "NVIM", "NVIM_LISTEN_ADDRESS", "EMACS_SOCKET_NAME", "KITTY_LISTEN_ON", "KITTY_WINDOW_ID",
    "WEZTERM_UNIX_SOCKET", "WEZTERM_PANE", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
    "DOCKER_HOST", "CONTAINER_HOST", "PODMAN_HOST", "GIT_ASKPASS", "SSH_ASKPASS",
})  # fmt: skip
#: Variables that point git at another repository, index, object store or configuration than the
#: one the box gives it (a strict agent's own git directory bound over ``<repo>/.git``).
GIT_LOCATIONS: Final = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS", "GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS",
})  # fmt: skip
SYSTEM_READ: Final = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/srv",
    "/var/lib", "/var/cache", "/nix", "/snap", "/gnu", "/proc", "/sys", "/run",
)  # fmt: skip
#: The only device nodes an agent may open (not all of /dev: the person's terminals are there).
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: Terminals: in a strict box a devpts of its own (it cannot open the person's terminal, where
#: TIOCSTI would type into their shell); a Landlock-only box gets none (no pseudo-terminals there).
PTYS: Final = ("/dev/pts", "/dev/ptmx")
#: Deputies' sockets and keys outside /tmp and /run/user, emptied in a strict box.
HIDDEN: Final = ("~/.ssh", "~/.gnupg", "~/.screen", "/run/screen", "/var/run/screen", "/run/docker.sock", "/var/run/docker.sock", "/run/podman")
SECRETS_IN_HOME: Final = ("~/.ssh", "~/.gnupg")
DESCRIPTIONS: Final = {
    "strict": "Landlock + namespaces (private /tmp, deputies hidden, commits in a git directory of its own, brought in by the broker)",
    "landlock": "Landlock only (a deputy's named socket can still be reached; git is read-only: no commits, no new top-level entries)",
    "off": "NO SANDBOX: this agent can read the operator key and the database as you",
}


@final
@attrs.frozen
class GitBox:
    """What a box does about git: the agent's own git directory (strict), the person's, and the
    paths in the tree the person's git trusts (read-only at every level)."""

    repo: Path
    git_dir: Path
    agent_git_dir: Path | None = None
    protected: tuple[Path, ...] = ()


@final
@attrs.frozen
class Box:
    """What the supervisor runs for one agent, and what to undo when it exits."""

    level: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    temp: Path | None = None
    cgroup: Path | None = None

    def with_options(self, *options: str) -> Box:
        """The same box with more launcher options (the supervisor's per-spawn descriptors and share)."""
        cut = self.argv.index("--")
        return attrs.evolve(self, argv=(*self.argv[:cut], *options, *self.argv[cut:]))

    def release(self) -> set[int]:
        """Kill what is left in the agent's cgroup, remove it and the temp directory; return the pids killed."""
        killed = kill_cgroup(self.cgroup) if self.cgroup is not None else set()
        if self.temp is not None:
            shutil.rmtree(self.temp, ignore_errors=True)
        return killed


def check_allowances(name: str, paths: Iterable[str], state: Path) -> None:
    """Refuse an ``allow_read``/``allow_write`` path that would open the state directory to an agent.

    Raises:
        ValueError: naming the agent and the path.
    """
    real_state = state.resolve()
    for path in paths:
        real = Path(path).resolve()
        if real.is_relative_to(real_state) or real_state.is_relative_to(real):
            raise ValueError(f"agent {name!r}: {path} would let it reach the state directory {state}; allow something else")


def levels(agents: Iterable[tuple[str, str | None]], machine: Machine, *, state_in_work_tree: bool) -> dict[str, str]:
    """Each agent's level: what its team entry asks, else the strongest this machine offers.

    Raises:
        ValueError: an agent asks for a level this machine cannot honour, or the
            state directory is inside the work tree while any agent is boxed (a
            box that may write the tree could read the state beneath it).
    """
    chosen = {name: asked or machine.strongest for name, asked in agents}
    for name, level in chosen.items():
        why = machine.offers(level)
        if why is not None:
            raise ValueError(f"agent {name!r} asks for sandbox {level!r}, but {why}; `conclave doctor` says what this machine offers")
    boxed = [n for n, level in chosen.items() if level != "off"]
    if state_in_work_tree and boxed:
        raise ValueError(
            f"the state directory is inside the work tree, which {', '.join(boxed)} may write: no sandbox can hide it there. "
            "Leave --state-dir out (the default is outside the tree) or choose one outside it"
        )
    return chosen


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the deputies' variables and those that point git elsewhere (at every level, ``off`` included)."""
    return {k: v for k, v in env.items() if k not in DEPUTY_VARIABLES and k not in GIT_LOCATIONS and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}


def build(
    level: str,
    command: Iterable[str],
    *,
    machine: Machine,
    repo: Path,
    state: Path,
    agent_dir: Path,
    socket_path: Path,
    session: str,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    home: str | None = None,
    git: GitBox | None = None,
) -> Box:
    """The box for one agent.

    Raises:
        ValueError: ``level`` is not one this machine offers (the message says why).
    """
    why = machine.offers(level)
    if why is not None:
        raise ValueError(f"sandbox {level!r} is not available: {why}")
    home = home if home is not None else os.environ.get("HOME")
    expand = lambda p: p.replace("~", home, 1) if home and p.startswith("~") else p  # noqa: E731
    cgroup = _new_cgroup(machine.cgroup, session) if machine.cgroup is not None else None
    options: list[str] = ["--cgroup", str(cgroup)] if cgroup else []
    env: dict[str, str] = {}
    temp: Path | None = None
    if level != "off":
        writable = [str(repo), str(agent_dir), *(expand(p) for p in write)]
        if level == "strict":
            options += ["--ns", "--pidns"] if machine.pid_namespaces else ["--ns"]
            for path in HIDDEN:
                options += ["--hide", expand(path)]
            writable += ["/tmp", "/dev/shm"]
            env["TMPDIR"] = "/tmp"
        else:
            temp = Path(tempfile.mkdtemp(prefix=f"conclave-{session}-"))
            writable.append(str(temp))
            env["TMPDIR"] = str(temp)
        readable = [*SYSTEM_READ, *_installation(), *(expand(p) for p in read)]
        if home:
            readable.append(home)
        denied = [str(state), f"/run/user/{machine.uid}", *(expand(p) for p in SECRETS_IN_HOME)]
        if level == "strict":
            # What lives under the private mounts (a work tree in /tmp, the socket) is bound back in;
            # what is denied there is simply not in the box.
            private = ("/tmp", "/dev/shm", f"/run/user/{machine.uid}")
            kept = [p for p in (*readable, *writable, str(socket_path)) if _under(Path(p), private) and os.path.lexists(p)]
            for path in dict.fromkeys(kept):
                options += ["--keep", path]
            denied = [p for p in denied if not _under(Path(p), private) and p != f"/run/user/{machine.uid}"]
        options.append("--landlock")
        devices = (*DEVICES, *PTYS) if level == "strict" else DEVICES
        for flag, paths in (("--ro", readable), ("--rw", writable), ("--dev", devices), ("--deny", denied), ("--connect", [str(socket_path)])):
            for path in dict.fromkeys(paths):
                options += [flag, path]
        if git is not None:
            options += git_options(level, git)
        if os.geteuid() == 0:
            options.append("--drop-caps")
    return Box(level=level, argv=(*launcher_argv(), *options, "--", *command), env=env, temp=temp, cgroup=cgroup)


def _under(path: Path, bases: Iterable[str]) -> bool:
    return any(str(path).startswith(base.rstrip("/") + "/") for base in bases)


def _installation() -> list[str]:
    """conclave's own interpreter and packages (wherever an editable install keeps them): agents run `conclave`."""
    found = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    found.update(p for p in sys.path if p and os.path.isdir(p))
    for name in ("store", "broker", "memory", "locks", "agents", "scenarios"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            found.add(os.path.dirname(os.path.dirname(os.path.realpath(module.__file__))))
    return sorted(found)


def git_options(level: str, git: GitBox) -> list[str]:
    """The launcher options for git in a box.

    strict: the agent's git directory over ``<repo>/.git`` and the person's objects read-only at
    ``shared-objects`` inside it; each protected path bound read-only over itself, and each
    directory on its way pinned (a mount point cannot be renamed aside for a writable copy).
    landlock: ``.git`` and each protected path kept read-only inside the tree's write grant.

    Raises:
        ValueError: a strict box without the agent's git directory (it would see the person's).
    """
    options: list[str] = []
    if level == "strict":
        if git.agent_git_dir is None:
            raise ValueError("a strict box needs the agent's own git directory")
        from broker.sandbox.gitdir import SHARED_OBJECTS, SUBMODULES

        target = git.repo / ".git"
        options += ["--bind", str(git.agent_git_dir), str(target), "--bind-ro", str(git.git_dir / "objects"), str(target / SHARED_OBJECTS)]
        if os.path.isdir(git.agent_git_dir / SUBMODULES):  # made only where the person has submodules' git directories
            options += ["--bind-ro", str(git.git_dir / SUBMODULES), str(target / SUBMODULES)]
        pinned: set[Path] = set()
        for path in git.protected:
            for parent in reversed(path.relative_to(git.repo).parents[:-1]):
                if git.repo / parent not in pinned:
                    pinned.add(git.repo / parent)
                    options += ["--pin", str(git.repo / parent)]
            options += ["--read-only", str(path)]
    elif level == "landlock":
        for path in (git.repo / ".git", *git.protected):
            options += ["--ro-hole", str(path)]
    return options


def _new_cgroup(parent: Path, session: str) -> Path | None:
    path = parent / f"conclave-{os.getpid()}" / f"agent-{session}"
    try:
        path.mkdir(parents=True)
    except OSError:
        return None
    return path


def kill_cgroup(path: Path) -> set[int]:
    """Kill every process in an agent's cgroup, wait until it is empty, and remove it; return their pids."""
    try:
        members = {int(pid) for pid in (path / "cgroup.procs").read_text().split()}
        (path / "cgroup.kill").write_text("1")
    except OSError:
        return set()
    for _ in range(2000):
        try:
            if "populated 0" in (path / "cgroup.events").read_text():
                break
        except OSError:
            break
        time.sleep(0.001)
    try:
        path.rmdir()
        path.parent.rmdir()  # the broker's own directory, once its last agent is gone
    except OSError:
        pass
    return members
