"""A home of the session's own, so no test reads or writes the person's.

conclave resolves its default state under ``$XDG_STATE_HOME`` and also reads the
registry under ``~/.local/state/conclave``; its boxes read toolchains and
``~/.gitconfig`` under ``$HOME``; git takes the committer's identity from
``~/.gitconfig``; Claude Code and Codex write ``~/.claude`` and ``~/.codex``.
Left to the runner's environment, every test's broker would read the registry
of every broker the person ever ran, and commits would carry the person's name.

:func:`enter` points ``HOME`` and the four XDG base directories at a directory
the session made (for the test process and, through the environment, every
process it starts), writes the one git identity the tests commit with there,
and passes what the tests legitimately take from outside by an explicit path:
the pinned agent binaries (``CONCLAVE_AGENT_BINARIES``, resolved once from the
runner's own environment, as ``make agent-binaries`` filled it).  The
interpreter and the toolchains are found through ``PATH`` and ``sys.prefix``,
never through ``HOME``.

:class:`Guard` makes the runner's home fail loudly while the session lasts: an
audit hook in the test process raises :class:`RealHomeTouched` (an
``AssertionError``, which code that swallows ``OSError`` -- a registry that
cannot be read -- does not swallow) before any file under it is opened, listed,
made or removed, and the session fails at its end for every one that was,
caught or not.  What the tests take from there on purpose is named: the
interpreter and this checkout (``broker.sandbox.box.installation``), the
directories on ``PATH``, the agent-binaries cache, pytest's temporary root.
Processes the tests start are not in its reach; ``tests/test_session_home.py``
traces a broker and its agent for them.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Iterable, Iterator, NamedTuple

from tests.agents import realbin

#: Where the default base directories lie beneath HOME (the XDG Base Directory specification's defaults).
XDG: Final = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
}
#: The identity every commit made in a test carries (what ``agents.harness.GIT_IDENTITY`` names too).
GITCONFIG: Final = "[user]\n\tname = conclave-test\n\temail = test@example.invalid\n"


class SessionHome(NamedTuple):
    home: Path  #: HOME for the session; the XDG directories lie beneath it at their default places
    runner_home: str | None  #: the HOME pytest was started with: nothing in the session may reach it
    guard: Guard  #: what raises when something in this process does


@contextmanager
def enter(base: Path, *, allowed: Iterable[str] = ()) -> Iterator[SessionHome]:
    """Point HOME, the XDG base directories and the agent-binaries cache at ``base`` (made by the
    caller) for as long as the context lasts, with the runner's home guarded (:class:`Guard`; ``allowed``
    adds to what the tests may read there); then restore what the runner had.

    Raises:
        RealHomeTouched: at the end, naming every path under the runner's home the session reached.
    """
    from broker.sandbox.box import installation

    names = ("HOME", *XDG, "GIT_CONFIG_GLOBAL", realbin.ENV_CACHE)
    saved = {name: os.environ.get(name) for name in names}
    binaries = str(realbin.cache_root())  # before HOME moves: the runner's cache, named explicitly from now on
    # Made now, before the guard: on a fresh machine the first real-agent test fetches the binaries into it,
    # and making its parents (~/.cache/conclave) under the guard would be refused as reaching the runner's home.
    Path(binaries).mkdir(parents=True, exist_ok=True)
    home = base / "home"
    home.mkdir(mode=0o700)
    for relative in XDG.values():
        (home / relative).mkdir(parents=True, mode=0o700, exist_ok=True)
    (home / ".gitconfig").write_text(GITCONFIG)
    os.environ["HOME"] = str(home)
    os.environ.update({name: str(home / relative) for name, relative in XDG.items()})
    # git reads ~/.gitconfig, i.e. the file above; an inherited GIT_CONFIG_GLOBAL would name the runner's.
    os.environ.pop("GIT_CONFIG_GLOBAL", None)
    os.environ[realbin.ENV_CACHE] = binaries
    explicit = [*installation(), *os.environ.get("PATH", "").split(os.pathsep), binaries, str(base), *allowed]
    try:
        with guard(saved["HOME"], explicit) as watch:
            yield SessionHome(home, saved["HOME"], watch)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if watch.touched:
        raise RealHomeTouched("the session reached the runner's home:\n" + "\n".join(dict.fromkeys(watch.touched)))


class RealHomeTouched(AssertionError):
    """A test (or the product code it called in this process) reached the runner's home."""


#: Audit events that open, list, make, change or remove a path, and the arguments that name those paths.
#: A symbolic link's target is only text written into the link (relative to the link, not to the working
#: directory): making the link touches nothing there.
_EVENTS: Final = {
    "open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,),
    "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.utime": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (0, 1), "shutil.move": (0, 1), "os.chdir": (0,),
}  # fmt: skip


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Guard:
    """While :attr:`active`, any path under ``home`` but outside ``allowed`` that this process
    touches raises :class:`RealHomeTouched` before the call, and is recorded in :attr:`touched`."""

    def __init__(self, home: str, allowed: Iterable[str]) -> None:
        self.home = os.path.normpath(home)
        named = {os.path.normpath(p) for p in allowed if p and os.path.isabs(p)}
        # An entry holding the whole home (PATH=~:..., a checkout at ~) would let everything through: it names nothing.
        self.allowed = sorted(p for p in named if not _inside(self.home, p))
        self.touched: list[str] = []
        self.active = False

    def reaches(self, path: str) -> bool:
        return _inside(path, self.home) and not any(_inside(path, root) for root in self.allowed)

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event not in _EVENTS:
            return
        for index in _EVENTS[event]:
            if index >= len(args) or isinstance(args[index], int) or args[index] is None:
                continue
            try:
                path = os.fsdecode(os.fspath(args[index]))
            except TypeError:
                continue
            if not path.startswith("/"):
                try:
                    path = os.path.join(os.getcwd(), path)
                except OSError:  # a working directory removed under the test: nothing to resolve against
                    continue
            path = os.path.normpath(path)
            if self.reaches(path):
                self.touched.append(f"{event} {path}")
                raise RealHomeTouched(
                    f"{event} {path}: that is under the home pytest was started with ({self.home}); tests use the "
                    "session's home (tests/session_home.py) -- pass a path the test made"
                )


@contextmanager
def guard(runner_home: str | None, allowed: Iterable[str]) -> Iterator[Guard]:
    """A :class:`Guard` on ``runner_home`` for the length of the context (none when it is unset or ``/``)."""
    watch = Guard(runner_home if runner_home and runner_home != "/" and os.path.isabs(runner_home) else "/nonexistent/", allowed)
    if not _hooked:
        sys.addaudithook(_dispatch)  # an audit hook cannot be removed: one hook, pointed at the live guard
        _hooked.append(True)
    _live.append(watch)
    watch.active = True
    try:
        yield watch
    finally:
        watch.active = False
        _live.remove(watch)


_hooked: list[bool] = []
_live: list[Guard] = []


def _dispatch(event: str, args: tuple[Any, ...]) -> None:
    for watch in _live:
        watch(event, args)
