"""Shared fixtures: every broker, store, socket and repository lives under a
directory the test made (pytest's tmp_path); nothing is resolved from the
running process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from agents.harness import Run
from tests import session_home
from tests.session_home import SessionHome


#: The test that reruns the privilege-dependent tests as uid 65534 (tests/ordinary_user.py RERUN).
AS_USER = "tests/broker/test_as_user.py::"

#: The files that take longest (docs/BENCHMARKS.md, "The test suite's time"), started first: with each file whole on
#: one worker (``--dist loadfile``), a long file begun last keeps one core busy after the other has finished.
#: `make test` passes ``--no-loadscope-reorder``: xdist otherwise reorders files by their number of tests.
LONGEST_FIRST = [
    "tests/broker/test_as_user.py",
    "tests/scenarios/test_runner.py",
    "tests/fuzz/test_finds.py",
    "tests/broker/test_run_view.py",
    "tests/dashboard/test_dashboard_app.py",
    "tests/multihost/test_two_brokers.py",
    "tests/broker/test_demo.py",
    "tests/agents/test_mcp_server.py",
    "tests/broker/test_cli_setup.py",
    "tests/fuzz/test_postgresql.py",
    "tests/agents/test_real_long_runs.py",
    "tests/containment/test_lifetime.py",
    "tests/fuzz/test_sqlite.py",
    "tests/memory/test_verify_apart.py",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "uid_independent(why): the ordinary-uid rerun (tests/broker/test_as_user.py) proves all this test proves as root; "
        "in a session that runs that rerun, the test runs only there",
    )


@pytest.hookimpl(trylast=True)  # after -k and -m: a test they leave out does not count as rerun
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``uid_independent`` checks nothing root would check differently (no delegated cgroup, no
    RLIMIT_NPROC exemption, no capabilities to drop on its path): where the session also runs the ordinary-uid
    rerun, that rerun is its run, and the copy in this process is left out (as an ordinary user it is the same run twice).
    And the longest files are put first (``LONGEST_FIRST``)."""
    from tests.ordinary_user import RERUN

    # The longest files first (a stable sort: every other file, and the tests within each, keep their order).
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    rerun = [item for item in items if item.get_closest_marker("uid_independent") is not None]
    if stray := [item.nodeid for item in rerun if not item.nodeid.startswith(RERUN)]:
        raise pytest.UsageError(f"marked uid_independent but not rerun as an ordinary uid (tests/ordinary_user.py RERUN): {stray}")
    if rerun and any(item.nodeid.startswith(AS_USER) for item in items):
        config.hook.pytest_deselected(items=rerun)
        items[:] = [item for item in items if item.get_closest_marker("uid_independent") is None]


@pytest.fixture(autouse=True, scope="session")
def no_real_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionHome]:
    """HOME and the XDG base directories (state, config, cache, data) -- where a command run without
    --state-dir resolves its state, where git finds its identity -- point at a directory the session
    made, for this process and every subprocess (tests/session_home.py)."""
    with session_home.enter(tmp_path_factory.mktemp("session-home"), allowed=[str(tmp_path_factory.getbasetemp())]) as home:
        yield home


@pytest.fixture(autouse=True, scope="session")
def brokers_from_a_warm_interpreter(no_real_state_home: SessionHome) -> Iterator[None]:
    """Every test's ``conclave run`` is a fork of one interpreter that has imported the broker already
    (scenarios/zygote.py; about 0.75 s of CPU saved per broker).  Each broker is still its own process running
    ``broker.cli.main`` with its own arguments, environment and streams; a Run on another interpreter or
    under a wrapper, and one that names its own ``launch``, is started as it says.  The operator's commands
    (``Run.cli``) are forks of the same interpreter too (about 0.3 s of CPU each saved); the commands agents
    run inside their boxes, and those a test starts itself, are exec'd."""
    from agents import harness
    from scenarios.zygote import Zygote

    with Zygote() as zygote:
        harness.LAUNCH, harness.COMMAND = zygote.popen, zygote.run
        try:
            yield
        finally:
            harness.LAUNCH = harness.COMMAND = None


@pytest.fixture(autouse=True, scope="session")
def no_terminal_size_from_the_runner() -> Iterator[None]:
    """What the tests read is what a pipe gets: COLUMNS and LINES from whatever runs pytest
    (a terminal, pytest-xdist's workers) must not rewrap the output they check."""
    import os

    saved = {name: os.environ.pop(name) for name in ("COLUMNS", "LINES") if name in os.environ}
    yield
    os.environ.update(saved)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """One real PostgreSQL server for the whole session, started on first use (tests/pgtools.py).

    Never skipped: with no binaries at all it fails, saying how to install them.
    """
    from tests.pgtools import Cluster

    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def start_run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Start a real broker with puppet agents: ``start_run([{"name": "alice"}, ...])``."""
    runs: list[Run] = []

    def start(agents: Sequence[dict[str, Any]], **kwargs: Any) -> Run:
        wait_for = kwargs.pop("wait_for", None)
        run = Run(tmp_path / f"run{len(runs)}", agents, **kwargs)
        runs.append(run)
        return run.start(wait_for=wait_for)

    yield start
    for run in runs:
        run.close()
