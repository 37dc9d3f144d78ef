"""One broker per test module where tests do not interfere, and helpers for waits.

A puppet carries out one command at a time, so a test that makes an agent
*wait* runs that call on a thread (:func:`later`) and then acts as the others.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from agents.harness import Run
from broker.errors import ConclaveError

SLOTS = """
[[slot]]
name = "pair"
capacity = 2

[[slot]]
name = "paced"
capacity = 5
min_interval_ms = 600
"""

_pool = concurrent.futures.ThreadPoolExecutor(max_workers=16)


def later(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
    """Run a blocking call (an agent's wait) on a thread; ``.result(timeout)`` collects it."""
    return _pool.submit(fn, *args, **kwargs)


def refusal(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ConclaveError:
    """The ConclaveError a call raises (the test fails if it succeeds)."""
    with pytest.raises(ConclaveError) as info:
        fn(*args, **kwargs)
    return info.value


def waiting(run: Run, *keys: str, timeout: float = 10) -> None:
    """Block until each principal has a request in the wait line."""

    def queued() -> bool:
        line = {w["waiter"] for w in run.op("lock.list")["waiting"]}
        return all(k in line for k in keys)

    run.wait_until(queued, timeout=timeout, what=f"{keys} to be waiting")


def held(run: Run) -> dict[str, list[str]]:
    """resource -> holders, from the operator's view."""
    out: dict[str, list[str]] = {}
    for h in run.op("lock.list")["holdings"]:
        out.setdefault(h["resource"], []).append(h["holder"])
    return out


@contextlib.contextmanager
def module_run(factory: pytest.TempPathFactory, name: str, agents: list[dict[str, Any]], **kwargs: Any) -> Iterator[Run]:
    """A broker shared by one test module (tests that do not interfere)."""
    run = Run(factory.mktemp(name), agents, **kwargs)
    run.start()
    try:
        yield run
    finally:
        run.close()


def release_everything(run: Run) -> None:
    """Leave the table empty for the next test: nothing queued, nothing held."""
    snap = run.op("lock.list")
    assert not snap["waiting"], f"a test left waiters behind: {snap['waiting']}"
    for key in {h["resource"] for h in snap["holdings"]}:
        run.op("lock.force_release", resource=key, reason="test cleanup")


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    agents = [{"name": "alice", "may_spawn": 2}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}]
    with module_run(tmp_path_factory, "locks", agents, files={"README.md": "scratch\n", "src/app.py": "x = 1\n"}, extra_toml=SLOTS) as run:
        yield run


@pytest.fixture
def run(shared_run: Run) -> Iterator[Run]:
    """The module's broker, left with nothing held or queued for the next test."""
    yield shared_run
    release_everything(shared_run)


def events_of(run: Run, kind: str) -> list[dict[str, Any]]:
    return [e for e in run.op("lock.log", limit=10_000) if e["kind"] == kind]


def repo_file(run: Run, name: str, text: str = "x\n") -> Path:
    path = run.repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
