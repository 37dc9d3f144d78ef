"""One agent's box: the launcher command line the supervisor runs, and what it cleans up after.

:func:`build` turns a level (``strict``, ``landlock``, ``off``) into the
launcher's options for one agent, from the one table of grants
(:mod:`broker.sandbox.grants`: what a box may read, write, open and connect
to, and why each is safe there):

* **read**: the system, toolchains (``/opt``, ``/nix``, and of ``$HOME`` only
  the toolchain paths the table names), conclave's own installation, what
  its preset declares and the team file's ``allow_read``;
* **write**: its work tree, its own temporary space (a private ``/tmp`` and
  home in ``strict``; a 0700 directory named in ``TMPDIR`` in ``landlock``),
  its own per-agent directory, and what its preset declares or the team
  file's ``allow_write`` -- never conclave's installation, which stays
  read-only inside any of them (a read-only bind in ``strict``, a hole in the
  write grant in ``landlock``);
* **denied**: every conclave state directory of this user and every
  credential of ``grants.HOME_SECRETS``, even inside a broader grant;
* **strict** also hides deputies (private ``/tmp``, ``/dev/shm``,
  ``/run/user/<uid>`` and home; container sockets emptied) and binds the
  agent's own git directory over ``<repo>/.git``, the person's objects
  read-only inside it (:mod:`broker.sandbox.gitdir`): the person's git
  directory is out of sight, so nothing an agent writes there runs later as
  the person;
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

from broker import paths as paths_mod
from broker.sandbox import grants, landlock
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
#: The broker's own credentials, as libpq reads them from the environment it was started with
#: (docs/DEPLOYMENT.md): never an agent's.  A team file's ``env`` may still give an agent its own.
BROKER_CREDENTIAL_VARIABLES: Final = frozenset({"PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT", "PGSSLROOTCERT"})
#: Deputies' sockets outside /tmp and /run/user, emptied in a strict box (those under $HOME are
#: not in its private home at all).
HIDDEN: Final = ("/run/screen", "/var/run/screen", "/run/docker.sock", "/var/run/docker.sock", "/run/podman")
DESCRIPTIONS: Final = {
    "strict": "Landlock + namespaces (private /tmp and home, deputies hidden, commits in a git directory of its own, brought in by the broker)",
    "landlock": "Landlock only (home closed but for toolchains; a deputy's named socket can still be reached; git is read-only: no commits, no new top-level entries)",
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


def check_grants(
    name: str, *, repo: Path, state: Path, allow_read: Iterable[str] = (), allow_write: Iterable[str] = (), home: str | None = None
) -> None:
    """Refuse, before anything runs, a boxed agent whose grants would hold something trusted:
    a write grant holding a state directory, your home, a credential or conclave's own
    installation (or conclave's installation holding the write grant, where no box can keep it
    read-only), an ``allow_write`` holding or inside what your own tools run from home
    (:func:`broker.sandbox.grants.run_from_home`), and a read grant reaching into a state directory.

    Raises:
        ValueError: naming the agent, the path, what it holds and what to do.
    """
    home = home if home is not None else os.environ.get("HOME")
    # This run's state and the state roots, made or not (a broker makes its own); registered ones that exist.
    roots = [str(root) for root in paths_mod.state_roots()]
    others = [p for p in paths_mod.known_state_dirs() if os.path.lexists(p)]  # a stale entry names nothing
    state_dirs = list(dict.fromkeys(landlock.resolved(p) for p in (str(state), *roots, *others)))
    secrets = [os.path.realpath(p) for p in grants.secrets(home)] if home and home != "/" else []
    conclave = installation()
    this = os.path.realpath(state)
    for path in allow_read:
        # Reading into a state directory is refused; one a read grant holds is carved out at spawn
        # (the state roots exist by then: the broker makes them), this run's own refused for clarity.
        real = os.path.realpath(_expand_user(path, home))
        for known in state_dirs:
            if grants.inside(real, known) or (known == this and grants.inside(known, real)):
                raise ValueError(f"agent {name!r}: allow_read {path} would let it reach the state directory {known}; allow something else")
    for key, path in [("the work tree", str(repo)), *(("allow_write", p) for p in allow_write)]:
        real = os.path.realpath(_expand_user(path, home))
        where = f"agent {name!r}: {key} {path}" if key == "allow_write" else f"agent {name!r}'s work tree {path}"
        if home and home != "/" and grants.inside(os.path.realpath(home), real):
            raise ValueError(f"{where} holds your home directory {home} (your credentials, your shell's start-up files): allow something narrower")
        for known in state_dirs:
            if grants.inside(real, known) or grants.inside(known, real):
                raise ValueError(f"{where} would let it write the state directory {known}; allow something else")
        for secret in secrets:
            if grants.inside(secret, real) or grants.inside(real, secret):
                raise ValueError(f"{where} would let it write {secret}, which holds credentials: allow something else")
        if key == "allow_write":
            entry = grants.run_from_home(real, home) if home and home != "/" else None
            if entry is not None:
                raise ValueError(
                    f"{where} would let it write {entry}, which your own shell and tools run or trust outside every box "
                    "(start-up files, programs, plugins, caches): a file it put there would run as you. Allow a "
                    "directory of its own, and point the tool there in the agent's env (e.g. PIP_CACHE_DIR, npm_config_cache)"
                )
        for part in conclave:
            # Beneath a write grant it is kept read-only (a read-only bind, or a hole in the grant);
            # a grant that is conclave, or lies inside it, cannot be.
            if grants.inside(real, part):
                raise ValueError(
                    f"{where} is or lies inside conclave's own installation ({part}): an agent could change the conclave you "
                    "run next, and no box can keep it read-only there. Install conclave outside the work tree (pipx, or a "
                    "virtual environment elsewhere) and run that one, or allow something else"
                )


def check_repointable(repo: Path, allow_write: Mapping[str, Iterable[str]], allow_read: Mapping[str, Iterable[str]] = {}) -> None:
    """Refuse a write grant a box could point elsewhere: an ``allow_write`` (of boxed agents, by
    name) lying beneath the work tree or another agent's ``allow_write`` -- a box that writes the
    place around it can put a symbolic link there, and the next box built from the same grant (its
    restart, a child it spawns) would get write access wherever the link leads, ``~/.bashrc``'s
    directory included -- or holding the work tree, which it could move aside for such a link.
    An ``allow_read`` there likewise (read access to what home holds beyond the listed secrets).

    Raises:
        ValueError: naming the agent, the path, what holds it and what to do.
    """
    tree = os.path.realpath(repo)
    places = [("the work tree", tree)] + [(f"agent {n!r}'s allow_write", os.path.realpath(p)) for n, ps in allow_write.items() for p in ps]
    for name, paths in allow_write.items():
        for path in paths:
            real = os.path.realpath(path)
            if real != tree and grants.inside(tree, real):
                raise ValueError(
                    f"agent {name!r}: allow_write {path} holds the work tree {repo}: the agent could move the tree aside and put a "
                    "symbolic link in its place for the next box. Allow something narrower"
                )
            _refuse_repointable(name, "allow_write", path, places)
    for name, paths in allow_read.items():
        for path in paths:
            _refuse_repointable(name, "allow_read", path, places)


def _refuse_repointable(name: str, key: str, path: str, places: list[tuple[str, str]]) -> None:
    real = os.path.realpath(path)
    for where, place in places:
        if real != place and grants.inside(real, place):
            raise ValueError(
                f"agent {name!r}: {key} {path} lies inside {where} ({place}), where a boxed agent can replace it with a "
                f"symbolic link and so give the next box built from it (a restart, a child) access wherever the link leads. "
                "Leave it out, or grant the enclosing directory itself, or one outside both"
            )


def safe_search_path(search_path: str, writable: Iterable[str], keep: Iterable[str] = ()) -> tuple[str, list[str]]:
    """``search_path`` (a ``PATH``) without the entries a box could fill: a relative one (``.``, ``bin``,
    the empty entry), or one beneath ``writable`` (the work tree, a boxed agent's ``allow_write``) unless
    it lies in ``keep`` (conclave's installation, read-only in every box).  Returns the path and what
    was dropped.  A program an agent put there would otherwise run as the broker -- every ``git`` it
    runs -- and in every other agent's box as that agent."""
    writable = [os.path.realpath(w) for w in writable]
    keep = [os.path.realpath(k) for k in keep]
    kept: list[str] = []
    dropped: list[str] = []
    for entry in search_path.split(os.pathsep) if search_path else []:
        real = os.path.realpath(entry) if os.path.isabs(entry) else None
        if real is None or (any(grants.inside(real, w) for w in writable) and not any(grants.inside(real, k) for k in keep)):
            dropped.append(entry)
        else:
            kept.append(entry)
    return os.pathsep.join(kept), dropped


def check_state_dir(state: Path, home: str | None = None) -> None:
    """Refuse a state directory that lies inside what every box reads (the system, the toolchains
    under home, conclave's installation): a box that started before it existed could read it.

    Raises:
        ValueError: naming the state directory, the grant and what to do.
    """
    home = home if home is not None else os.environ.get("HOME")
    real = os.path.realpath(state)
    context = grants.Context(home=home, uid=os.getuid(), values={"installation": tuple(installation())})
    runtime = f"/run/user/{os.getuid()}"  # denied to every box
    for base in grants.plan("landlock", context).read:
        if grants.inside(real, os.path.realpath(base)) and not grants.inside(real, runtime):
            raise ValueError(
                f"the state directory {state} lies inside {base}, which every agent's box may read (a box started before it "
                "existed is not kept out of it); choose one under your home or in a directory of its own "
                "(the default, $XDG_STATE_HOME/conclave, is fine)"
            )


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
    """``env`` without the deputies' variables, the broker's own credentials and the variables that point git
    elsewhere (at every level, ``off`` included)."""
    return {
        k: v for k, v in env.items()
        if k not in DEPUTY_VARIABLES and k not in BROKER_CREDENTIAL_VARIABLES and k not in GIT_LOCATIONS
        and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }


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
    preset_read: Iterable[str] = (),
    preset_write: Iterable[str] = (),
    home: str | None = None,
    git: GitBox | None = None,
) -> Box:
    """The box for one agent: :data:`broker.sandbox.grants.GRANTS` for ``level``, as launcher options.

    ``read`` and ``write`` are the team file's ``allow_read`` and ``allow_write``;
    ``preset_read`` and ``preset_write`` what its preset declares (``SandboxNeeds``).

    Raises:
        ValueError: ``level`` is not one this machine offers (the message says why).
    """
    why = machine.offers(level)
    if why is not None:
        raise ValueError(f"sandbox {level!r} is not available: {why}")
    home = home if home is not None else os.environ.get("HOME")
    cgroup = _new_cgroup(machine.cgroup, session) if machine.cgroup is not None else None
    options: list[str] = ["--cgroup", str(cgroup)] if cgroup else []
    env: dict[str, str] = {}
    temp: Path | None = None
    if level != "off":
        if level == "landlock":
            temp = Path(tempfile.mkdtemp(prefix=f"conclave-{session}-"))
            env["TMPDIR"] = str(temp)
            env["XDG_CACHE_HOME"] = str(temp / "cache")  # caches under home are not writable here
        else:
            env["TMPDIR"] = "/tmp"
        expand = lambda paths: tuple(_expand_user(p, home) for p in paths)  # noqa: E731
        context = grants.Context(
            home=home,
            uid=machine.uid,
            values={
                "repo": (str(repo),), "agent_dir": (str(agent_dir),), "socket": (str(socket_path),),
                "temp": (str(temp),) if temp else (), "installation": tuple(installation()),
                "preset_read": expand(preset_read), "preset_write": expand(preset_write),
                "allow_read": expand(read), "allow_write": expand(write),
                "state_dirs": tuple(dict.fromkeys([str(state), *paths_mod.known_state_dirs()])),
            },
        )  # fmt: skip
        plan = grants.plan(level, context)
        if level == "strict":
            options += ["--pidns"] if machine.pid_namespaces else []
            options += _strict_options(plan, repo=repo, home=home, socket_path=socket_path)
        else:
            options += _landlock_options(plan)
        options.append("--landlock")
        for flag, paths in (("--ro", plan.read), ("--rw", _landlock_writes(level, plan)), ("--dev", plan.devices), ("--connect", plan.connect)):
            for path in dict.fromkeys(paths):
                options += [flag, path]
        if git is not None:
            options += git_options(level, git)
        if os.geteuid() == 0:
            options.append("--drop-caps")
    return Box(level=level, argv=(*launcher_argv(), *options, "--", *command), env=env, temp=temp, cgroup=cgroup)


def _expand_user(path: str, home: str | None) -> str:
    return path.replace("~", home, 1) if home and (path == "~" or path.startswith("~/")) else path


def _landlock_writes(level: str, plan: grants.Plan) -> list[str]:
    """Landlock's write roots: the write grants, and in strict the private mounts agents may fill
    (``/run/user/<uid>`` stays a private, empty, read-only place)."""
    private = [p for p in plan.private if not p.startswith("/run/user/")] if level == "strict" else []
    return [*plan.write, *private]


def _strict_options(plan: grants.Plan, *, repo: Path, home: str | None, socket_path: Path) -> list[str]:
    """The namespace's mounts: private /tmp, /dev/shm, /run/user/<uid> and home, what is granted
    beneath them bound back (read grants read-only), deputies hidden, the git files read-only."""
    options = ["--ns"]
    private = list(plan.private)
    # Home is private unless a grant names all of it (an allow_read of ~: then its secrets are carved out).
    granted = {os.path.realpath(p) for p in (*plan.read, *plan.write)}
    if home and home in private and os.path.isdir(home) and os.path.realpath(home) not in granted:
        options += ["--private-home", home]
    else:
        private = [p for p in private if p != home]
    # Both spellings: a home (or /tmp) may be a symbolic link, and grants come resolved or not.
    private = list(dict.fromkeys([*private, *(os.path.realpath(p) for p in private)]))
    for path in HIDDEN:
        options += ["--hide", path]
    # What lives under a private mount comes back; the rest of it is simply not in the box.
    under_private = _prefixes(private)
    kept = [p for p in dict.fromkeys((*plan.read, *plan.write, *plan.connect)) if _norm(p).startswith(under_private) and os.path.lexists(p)]
    for path in kept:
        options += ["--keep", path]
    writable = _landlock_writes("strict", plan)
    read_only = [p for p in plan.read if p in kept and p not in plan.write]  # bound back under a writable tmpfs
    writable_real = _reals(writable)
    read_only += [p for p in plan.read_only if _inside_any(p, writable_real)]  # conclave inside a write grant
    real = {p: os.path.realpath(p) for p in read_only}
    # A read-only bind covers what lies beneath it: one per outermost path (the interpreter's
    # directories under ~/.pyenv come back read-only with it).
    outermost = [p for p in read_only if not any(q != p and real[q] != real[p] and grants.inside(real[p], real[q]) for q in read_only)]
    for path in dict.fromkeys(outermost):  # the git directory and the paths git trusts: git_options
        if os.path.lexists(path):
            options += ["--read-only", path]
    # A denied path under a private mount is absent unless a grant brought it back; then it is hidden again.
    # (Every state directory a broker of this user registered is denied: one pass, each base resolved once.)
    kept_real = _reals(kept)
    for path in plan.denied:
        if not _norm(path).startswith(under_private):
            options += ["--deny", path]
        elif os.path.lexists(path) and _inside_any(path, kept_real):
            options += ["--hide", path]
    return options


def _landlock_options(plan: grants.Plan) -> list[str]:
    """Without mounts: conclave's installation inside a write grant is a hole in it, denied paths are carved out."""
    options: list[str] = []
    write_real = _reals(plan.write)
    for path in plan.read_only:
        if _inside_any(path, write_real):
            options += ["--ro-hole", path]
    for path in plan.denied:
        options += ["--deny", path]
    return options


def _reals(bases: Iterable[str]) -> list[str]:
    """``bases`` resolved, once (for :func:`_inside_any`, called for each of many paths)."""
    return [landlock.resolved(base) for base in bases]


def _inside_any(path: str, real_bases: Iterable[str]) -> bool:
    """Is ``path``, resolved, one of ``real_bases`` (resolved by :func:`_reals`) or beneath one?"""
    real = landlock.resolved(path)
    return any(grants.inside(real, base) for base in real_bases)


def _prefixes(bases: Iterable[str]) -> tuple[str, ...]:
    """What a path strictly beneath one of ``bases`` starts with (for ``str.startswith``)."""
    return tuple(base.rstrip("/") + "/" for base in bases)


def _norm(path: str) -> str:
    """``path`` spelled as :class:`pathlib.Path` spells it (no doubled or trailing slash, no ``.``), without making one."""
    plain = "//" not in path and "/./" not in path and not path.endswith(("/", "/."))
    return path if plain else str(Path(path))


def installation() -> list[str]:
    """What conclave runs from: its interpreter (the venv and the base), every directory on
    ``sys.path`` and the directory its packages were imported from (an editable install's
    source tree).  Agents read it to run `conclave`; no box may write it: the person runs it next."""
    found = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    found.update(p for p in sys.path if p and os.path.isdir(p))
    for name in ("store", "broker", "memory", "locks", "agents", "scenarios"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            found.add(os.path.dirname(os.path.dirname(os.path.realpath(module.__file__))))
    return sorted({os.path.realpath(p) for p in found})


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
