"""Running a broker: the root nursery of ``conclave run``.

One root nursery holds the store owner, every feature's owner task, the wire
server, the orphan reaper and the supervisor.  The run ends when every agent
has exited, or on the operator's ``broker.stop``, or when the run's own
timeout, idle timeout or budget runs out (``conclave run --timeout``,
``[run]``), or on a signal: SIGINT (Ctrl-C), SIGTERM (``kill``), SIGHUP (the
terminal closed) and SIGQUIT.  Each stops it the same way -- every agent
terminated, the summary written to the run journal (and shown, if the
terminal is still there), the guard hooks removed -- and each has its own
exit code (:data:`EXIT_SIGNALLED`, :data:`EXIT_RUN_LIMIT`).

A broker killed outright (SIGKILL, the OOM killer) runs none of that.  Its
agents' launchers see their lifeline end and end their agents; and the
ledger (``broker/sandbox/leftovers.py``) lets the next broker on this state
directory end whatever still outlived it, and say so in one line.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, ContextManager, Final, Sequence, final

import attrs
import trio

from broker import paths as paths_mod
from broker.core import BrokerCore, Feature, open_core
from broker.identity import make_child_subreaper
from broker.limits import Limits, words
from broker.operator_probe import OperatorProbe, ProbeTaken, box_probe_in_force
from broker.output import EXTENSION as VIEW, RunView, Terminal
from broker.paths import BrokerAlreadyRunning, StatePaths
from broker.sandbox import guardhook, sweep
from broker.sandbox.gitlayout import Layout
from broker.sandbox.gitviews import GitNote, GitViews
from broker.sandbox.leftovers import Ledger
from broker.sandbox.machine import Machine
from broker.server import bind, raise_descriptor_limit, serve
from broker.supervisor import AgentOutcome, Supervisor
from broker.team import Team
from store import events

log = logging.getLogger("conclave.broker")


#: ``conclave run``'s exit codes (docs/CLI.md).  Usage errors (a bad team
#: file, not a git repository) exit 2, as every command's do.
EXIT_OK: Final = 0
EXIT_AGENT_FAILED: Final = 1
EXIT_NOT_STARTED: Final = 4
EXIT_STOPPED_BY_OPERATOR: Final = 5
#: The run's own timeout, idle timeout or budget stopped it.
EXIT_RUN_LIMIT: Final = 6
RUN_LIMITS: Final = ("timeout", "idle", "budget")
#: The signals that stop a run, and its exit code for each (128 + the signal's number, as a shell reports it).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
EXIT_SIGNALLED: Final = {sig.name: 128 + sig for sig in STOP_SIGNALS}


@final
@attrs.frozen
class RunSummary:
    started_at: str
    ended_at: str
    outcomes: tuple[AgentOutcome, ...]
    stopped_by: str | None  # "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "operator", "timeout", "idle", "budget", or None when the team finished
    run: int = 0  # the run's number on this state directory (run-N.jsonl, conclave agents --run N)
    #: What git saw that the person should know: refused bring-ins, commits agents left behind.
    git: tuple[GitNote, ...] = ()
    #: What the agents' binaries reported using, all together (None when none reports usage).
    usage: dict[str, Any] | None = None

    @property
    def failed(self) -> tuple[AgentOutcome, ...]:
        """The principals that count against the run (see AgentOutcome.failed)."""
        return tuple(o for o in self.outcomes if o.failed)

    @property
    def exit_code(self) -> int:
        """0 when the team finished and no agent failed; 1 when one failed; 128 + the signal's
        number when a signal stopped the run (129 SIGHUP, 130 SIGINT, 131 SIGQUIT, 143 SIGTERM);
        5 when the operator did; 6 when the run's own timeout, idle timeout or budget did.  A
        stopped run's code wins: it did not finish, whatever its agents did."""
        if self.stopped_by in EXIT_SIGNALLED:
            return EXIT_SIGNALLED[self.stopped_by]
        if self.stopped_by in RUN_LIMITS:
            return EXIT_RUN_LIMIT
        if self.stopped_by is not None:
            return EXIT_STOPPED_BY_OPERATOR
        return EXIT_AGENT_FAILED if self.failed else EXIT_OK


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
    terminal: int | None = None,
    colour: bool = False,
    layout: Layout | None = None,
    unboxed: bool = False,
    limits: Limits = Limits(),
) -> RunSummary:
    """Run a broker for ``team`` until every agent exits or it is stopped.

    ``terminal`` is the file descriptor the run is shown on (agents' output
    and the run's events, see :mod:`broker.output`), or None to show nothing
    (``--quiet``, ``--json``); the run journal is written either way.
    ``layout`` is the repository's (``broker.sandbox.gitlayout.check``): with it the broker keeps
    every boxed agent's git directory (:class:`GitViews`), and, when ``unboxed`` agents run,
    puts the guard in the person's hooks directory for the run.
    ``limits`` are the run's own (``--timeout``, ``[run]``).
    """
    with broker_lock(paths):
        if not make_child_subreaper():
            # Without it an agent's orphan would be adopted by init and pass for the operator.
            raise BrokerAlreadyRunning("could not become a child subreaper (prctl PR_SET_CHILD_SUBREAPER); refusing to run")
        paths_mod.register_state_dir(paths.state)  # every box any broker builds from now on is kept out of it
        probe = OperatorProbe.bind(paths.operator_key()) if box_probe_in_force() else None
        socket_path = paths_mod.choose_socket_path(paths)
        nofile, _ = raise_descriptor_limit()
        stopped_by: list[str] = []
        ledger = Ledger(paths.state / "processes", cgroup_base=machine.cgroup)
        left = await trio.to_thread.run_sync(ledger.begin)
        try:
            async with open_core(paths, team=team, live=True, features=features) as core:
                run_number = await core.store.call(_next_run_number)
                await core.record(
                    "broker.start", actor=events.BROKER_ACTOR, payload={"pid": os.getpid(), "agents": [a.name for a in team.agents], "run": run_number}
                )
                core.operator_probe = probe
                listener = await bind(socket_path)
                paths.socket_pointer.write_text(str(socket_path))
                view = RunView(paths.logs, run_number, terminal=None if terminal is None else Terminal(terminal), colour=colour)
                core.extensions[VIEW] = view
                if left is not None:
                    await core.record("broker.leftovers_ended", actor=events.BROKER_ACTOR, payload=left.payload())
                    view.note("leftovers", left.line())
                    if terminal is None:
                        _say_on_stderr(f"conclave: {left.line()}")
                supervisor = Supervisor(
                    core, socket_path=socket_path, machine=machine, grace=grace, view=view, run_limits=limits, ledger=ledger, agent_nofile=nofile
                )
                core.supervisor = supervisor
                git: GitViews | None = None
                guard: guardhook.InstalledGuard | None = None
                try:
                    if layout is not None:
                        git = core.extensions["git"] = _git_views(paths, team, layout, view)
                        if unboxed:
                            guard = _install_guard(paths, layout, socket_path)
                    async with trio.open_nursery() as nursery:
                        if probe is not None:
                            await nursery.start(probe.serve)
                        await nursery.start(serve, core, listener)
                        nursery.start_soon(_reap_orphans, supervisor)
                        await nursery.start(view.run, core)
                        if git is not None:
                            await nursery.start(git.run)
                            nursery.start_soon(_quarantine_nested, core, git)
                        view.started(paths.repo, [a.name for a in team.agents])
                        run_scope = trio.CancelScope()

                        def stop(reason: str = "operator", why: str | None = None) -> None:
                            stopped_by.append(reason)
                            core.store.hurry(STOP_PATIENCE)  # the agents' exits are recorded if the store takes them soon, else counted lost
                            view.stopping(why or reason, len(supervisor.known_pids), grace)
                            run_scope.cancel()

                        core.extensions["stop"] = stop
                        supervisor.on_run_budget = lambda why: stop("budget", f"the run is {why}")
                        nursery.start_soon(_watch_signals, stop)
                        if limits.timeout is not None or limits.idle_timeout is not None:
                            nursery.start_soon(_watch_run_time, core, limits, stop)
                        if on_ready is not None:
                            on_ready(core)
                        with run_scope:
                            await supervisor.run(team)
                        if git is not None:  # every agent has exited: nothing it made is left live for the person's git
                            await _record_quarantined(core, await git.quarantine_new(final=True))
                        summary = _summary(core, supervisor, stopped_by, run_number, git)
                        await view.finish(summary.stopped_by, exit_code=summary.exit_code)
                        nursery.cancel_scope.cancel()
                finally:
                    with trio.CancelScope(shield=True):
                        view.close()
                        if git is not None:
                            git.close()  # its reader is the broker's own child: gone before the sweep waits for every child
                        if probe is not None:
                            probe.close()
                        _kill_orphans()
                        supervisor.close()
                        if guard is not None:
                            guardhook.uninstall(guard)
                        _remove_socket(paths, socket_path)
                        stopped = {"stopped_by": stopped_by[0] if stopped_by else None}
                        # A store that cannot take it (a full disk, files swapped) must not turn a clean stop into a crash.
                        await core.store.persist(lambda conn: events.append(conn, "broker.stop", actor=events.BROKER_ACTOR, payload=stopped),
                                                 what="the broker's stop", patience=STOP_PATIENCE)
        finally:
            ledger.close()  # a clean stop, or one that never started agents: nothing left to answer for
        return _summary(core, supervisor, stopped_by, run_number, git)


def _summary(core: BrokerCore, supervisor: Supervisor, stopped_by: list[str], run_number: int, git: GitViews | None) -> RunSummary:
    return RunSummary(
        started_at=core.started_at,
        ended_at=events.now(),
        outcomes=tuple(supervisor.outcomes),
        stopped_by=stopped_by[0] if stopped_by else None,
        run=run_number,
        git=tuple(git.notes) if git is not None else (),
        usage=supervisor.meter.run().as_dict() if supervisor.meter.by_principal else None,
    )


def _say_on_stderr(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass  # no terminal left: the run journal and the event log have it


def _git_views(paths: StatePaths, team: Team, layout: Layout, view: RunView) -> GitViews:
    """The owner of the agents' git directories; its notes go to the run view as they happen."""
    team_file = None
    if team.source is not None:
        source = Path(os.path.realpath(team.source))
        if source.is_relative_to(os.path.realpath(paths.repo)):
            team_file = str(source.relative_to(os.path.realpath(paths.repo)))
    git = GitViews(layout, paths.state, python=sys.executable, team_file=team_file)
    git.on_note = lambda note: view.git(note.kind, note.text, principal=note.principal if ":" in note.principal else None)
    return git


def _install_guard(paths: StatePaths, layout: Layout, socket_path: Path) -> guardhook.InstalledGuard | None:
    """The guard in the person's hooks directory, for unboxed agents (they use the person's .git)."""
    try:
        return guardhook.install(layout, python=sys.executable, state=str(paths.state), socket_path=str(socket_path), key_file=str(paths.operator_key_file))
    except guardhook.GuardError as exc:
        raise BrokerAlreadyRunning(f"the git guard for unboxed agents cannot be installed: {exc}") from None


#: Seconds between two looks for repositories made in the work tree during a run (see _quarantine_nested).
NESTED_SWEEP: Final = 1.0

#: How long a stopping broker waits for a store that cannot take its last event.
STOP_PATIENCE: Final = 5.0


def _next_run_number(conn) -> int:  # type: ignore[no-untyped-def]
    """This run's number: one more than the broker starts recorded on this state directory."""
    (count,) = conn.execute("SELECT count(*) FROM events WHERE kind = 'broker.start'").fetchone()
    return int(count) + 1


async def _watch_signals(stop: Callable[[str], None]) -> None:
    with trio.open_signal_receiver(*STOP_SIGNALS) as received:
        async for signum in received:
            stop(signal.Signals(signum).name)


async def _watch_run_time(core: BrokerCore, limits: Limits, stop: Callable[[str, str], None]) -> None:
    """Stop the run when its ``timeout`` runs out, or when every agent has been idle for ``idle_timeout``."""
    start = trio.current_time()
    while True:
        now = trio.current_time()
        if limits.timeout is not None and now - start >= limits.timeout:
            stop("timeout", f"the run timed out (timeout = {words(limits.timeout)})")
            return
        quiet = core.activity.quiet_since(start)
        if limits.idle_timeout is not None and quiet is not None and now - quiet >= limits.idle_timeout:
            stop("idle", f"the run was idle: no agent printed or called the broker for idle_timeout = {words(limits.idle_timeout)}")
            return
        await trio.sleep(min(1.0, limits.idle_timeout or 1.0, limits.timeout or 1.0) / 4)


async def _quarantine_nested(core: BrokerCore, git: GitViews) -> None:
    """While the run lasts, make inert every repository an agent makes in the work tree (GitViews.quarantine_new),
    every :data:`NESTED_SWEEP` seconds -- or, on a tree so large that the walk is slow, at most a twentieth of the time."""
    interval = NESTED_SWEEP
    while True:
        await trio.sleep(interval)
        began = trio.current_time()
        notes = await git.quarantine_new()
        interval = max(NESTED_SWEEP, 20 * (trio.current_time() - began))
        await _record_quarantined(core, notes)


async def _record_quarantined(core: BrokerCore, notes: list[GitNote]) -> None:
    for note in notes:
        await core.record("git.quarantined", actor=events.BROKER_ACTOR, subject=note.detail["found"], payload={"renamed": note.detail["renamed"]})


async def _reap_orphans(supervisor: Supervisor) -> None:
    """Reap zombies of orphaned agent descendants re-parented to us (subreaper).

    trio reaps the agents themselves; their pids are left alone.
    """
    me = os.getpid()
    seen: set[int] = set()
    while True:
        await trio.sleep(0.5)
        # A zombie must be seen twice, so a process trio has just spawned (and
        # not yet registered) is never reaped out from under it.  Most passes
        # find none: one waitid says so, instead of reading every process's
        # /proc entry twice a second for as long as the broker lives.
        zombies = {pid for pid in _children_of(me, zombies_only=True) if pid not in supervisor.known_pids} if _has_zombie_child() else set()
        for pid in zombies & seen:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        seen = zombies


def _has_zombie_child() -> bool:
    """Whether any child of this process (a child of any of its threads) has exited and is not reaped yet.

    ``WNOWAIT`` leaves it waitable: trio still reaps its own children, and the caller decides about the rest.
    """
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False  # no child at all


def _children_of(pid: int, *, zombies_only: bool = False) -> list[int]:
    return [child for child, (ppid, _, state) in sweep.process_table().items() if ppid == pid and (state == "Z" or not zombies_only)]


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
