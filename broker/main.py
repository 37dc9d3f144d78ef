"""Running a broker: the root nursery of ``conclave run``.

One root nursery holds the store owner, every feature's owner task, the wire
server, the orphan reaper and the supervisor.  The run ends when every agent
has exited, or on SIGINT/SIGTERM (agents are terminated first), or on the
operator's ``broker.stop``.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Callable, ContextManager, Sequence, final

import attrs
import trio

from broker import paths as paths_mod
from broker.core import BrokerCore, Feature, open_core
from broker.identity import make_child_subreaper, parent_pid
from broker.paths import BrokerAlreadyRunning, StatePaths
from broker.sandbox import sweep
from broker.sandbox.machine import Machine
from broker.server import bind, serve
from broker.supervisor import AgentOutcome, Supervisor
from broker.team import Team
from store import events

log = logging.getLogger("conclave.broker")


@final
@attrs.frozen
class RunSummary:
    started_at: str
    ended_at: str
    outcomes: tuple[AgentOutcome, ...]
    stopped_by: str | None  # "SIGINT", "SIGTERM", "operator", or None when the team finished


def broker_lock(paths: StatePaths) -> ContextManager[None]:
    """Hold ``broker.pid`` locked for the run: one broker per state directory."""
    return paths_mod.state_lock(paths, record_pid=True)


async def run_broker(
    paths: StatePaths,
    team: Team,
    *,
    features: Sequence[Feature],
    machine: Machine,
    grace: float = 5.0,
    on_ready: Callable[[BrokerCore], None] | None = None,
) -> RunSummary:
    """Run a broker for ``team`` until every agent exits or it is stopped."""
    with broker_lock(paths):
        if not make_child_subreaper():
            # Without it an agent's orphan would be adopted by init and pass for the operator.
            raise BrokerAlreadyRunning("could not become a child subreaper (prctl PR_SET_CHILD_SUBREAPER); refusing to run")
        socket_path = paths_mod.choose_socket_path(paths)
        stopped_by: list[str] = []
        async with open_core(paths, team=team, live=True, features=features) as core:
            await core.record("broker.start", actor=events.BROKER_ACTOR, payload={"pid": os.getpid(), "agents": [a.name for a in team.agents]})
            listener = await bind(socket_path)
            paths.socket_pointer.write_text(str(socket_path))
            supervisor = Supervisor(core, socket_path=socket_path, machine=machine, grace=grace)
            core.supervisor = supervisor
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(serve, core, listener)
                    nursery.start_soon(_reap_orphans, supervisor)
                    run_scope = trio.CancelScope()

                    def stop(reason: str = "operator") -> None:
                        stopped_by.append(reason)
                        run_scope.cancel()

                    core.extensions["stop"] = stop
                    nursery.start_soon(_watch_signals, stop)
                    if on_ready is not None:
                        on_ready(core)
                    with run_scope:
                        await supervisor.run(team)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    _kill_orphans()
                    _remove_socket(paths, socket_path)
                    await core.record(
                        "broker.stop",
                        actor=events.BROKER_ACTOR,
                        payload={"stopped_by": stopped_by[0] if stopped_by else None},
                    )
        return RunSummary(
            started_at=core.started_at,
            ended_at=events.now(),
            outcomes=tuple(supervisor.outcomes),
            stopped_by=stopped_by[0] if stopped_by else None,
        )


async def _watch_signals(stop: Callable[[str], None]) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for signum in received:
            stop(signal.Signals(signum).name)


async def _reap_orphans(supervisor: Supervisor) -> None:
    """Reap zombies of orphaned agent descendants re-parented to us (subreaper).

    trio reaps the agents themselves; their pids are left alone.
    """
    me = os.getpid()
    seen: set[int] = set()
    while True:
        await trio.sleep(0.5)
        # A zombie must be seen twice, so a process trio has just spawned (and
        # not yet registered) is never reaped out from under it.
        zombies = {pid for pid in _children_of(me) if _is_zombie(pid) and pid not in supervisor.known_pids}
        for pid in zombies & seen:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        seen = zombies


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent_pid(int(entry)) == pid:
            out.append(int(entry))
    return out


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] == b"Z"


def _kill_orphans() -> None:
    """At shutdown nothing an agent started may outlive the broker: freeze, kill, reap, until none is left."""
    sweep.sweep(os.getpid(), ())
    for pid in _children_of(os.getpid()):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _remove_socket(paths: StatePaths, socket_path: Path) -> None:
    for p in (socket_path, paths.socket_pointer):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
    if socket_path.parent != paths.state:
        try:
            socket_path.parent.rmdir()
        except OSError:
            pass
