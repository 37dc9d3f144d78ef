"""Catching the process ``verify`` walks the store in (``memory.walk_child``) from outside, as the tests that hold it do.

The walk's child is found among its broker's children in ``/proc`` (it lives
for at least its interpreter's start) and frozen with SIGSTOP, so a test can
look at it, kill it or let it go; a walk missed that way is tried again.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from memory import walk

WALKER = [sys.executable, "-I", "-m", walk.ENTRY]
ATTEMPTS = 5


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return found


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode() for part in f.read().split(b"\0") if part]
    except (FileNotFoundError, ProcessLookupError):
        return []


def state_of(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(b")") + 2 :].split()[0].decode()


def find_walker(parent: int, *, timeout: float = 30, freeze: bool = True) -> int | None:
    """The walk process ``parent`` starts next (frozen with SIGSTOP if ``freeze``), or None if it came and went unseen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children(parent):
            if cmdline(pid) == WALKER:
                if not freeze:
                    return pid
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    return None
                for _ in range(200):  # the stop is delivered asynchronously
                    state = state_of(pid)
                    if state in ("T", "t"):
                        return pid
                    if state in (None, "Z", "X"):
                        return None  # it had finished: too late
                    time.sleep(0.005)
                return None
        time.sleep(0.001)
    raise AssertionError(f"no `{' '.join(WALKER)}` child of process {parent} within {timeout} s")


@contextmanager
def caught(parent: int, start: Callable[[], Any]) -> Iterator[tuple[int, Future[Any]]]:
    """Start something that walks (``start`` runs in a thread); yield (the frozen walker, its pending result),
    and let the walker go on at the end.  A walk that finished before it was seen is waited for and started again."""
    with ThreadPoolExecutor(1) as pool:
        for _ in range(ATTEMPTS):
            pending = pool.submit(start)
            child = find_walker(parent)
            if child is not None:
                break
            pending.result(timeout=120)
        else:
            raise AssertionError(f"every one of {ATTEMPTS} walks finished before it could be caught")
        try:
            yield child, pending
        finally:
            _let_go(child)


def _let_go(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def gone(pid: int) -> bool:
    return state_of(pid) in (None, "Z", "X")
