"""The supervisor: spawns every agent in its box, watches it, and cleans up after it.

Each agent runs inside its sandbox (``broker.sandbox``): the process
registered here is the agent's launcher, which builds the box, runs the
agent beneath it (in a PID namespace of its own where the machine allows),
stays as its keeper, and ends with the agent's exact status.  Its stdout
and stderr are read by the broker through pipes and written, capped, to
``<state>/logs/<agent>-<session>.log`` (``broker.capture``: the agent holds
no descriptor into the logs).  An agent that runs past its time, sits idle
or crosses a budget (``broker.limits``) is stopped the way the broker's
shutdown stops every agent.  Every launcher holds the read end of the
broker's *lifeline*, a pipe only this process writes to: when the broker
dies, however, the launchers see end of file and end their agents
(``broker/sandbox/keeper.py``).  Each launcher also has a report pipe back:
it says when its agent reaches its share of processes
(``broker/sandbox/share.py``) and how many leftovers it killed.

When an agent's launcher exits -- after ending everything the agent left --
the supervisor kills whatever is left of its group, its cgroup where one is
delegated and, last, sweeps the orphans the broker was left (what an
unboxed agent may have escaped with), revokes its principal (the ticket
stops working, its connections close), records the exit with how many
leftovers were killed, and tells the other owners (locks, mail) so they
release what it held.  Cancelling the supervisor -- a signal to the broker --
terminates every agent (SIGTERM, then after a grace period the launcher is
told to end it now, then SIGKILL) before it returns.  Every live launcher is
written in the state directory's ledger (``broker/sandbox/leftovers.py``)
so that a broker killed outright leaves a record the next one acts on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Final, final

import attrs
import trio

from broker.errors import ConclaveError, ErrorCode
from broker.client import ENV_BROKER_PROCESS
from broker.identity import Principal, pidfs_identity
from broker.paths import ENV_REPO, ENV_SOCKET, ENV_STATE_DIR, ENV_TICKET
from broker.registry import LiveAgent
from broker.sandbox import box as sandbox
from broker.sandbox import share as shares
from broker.sandbox import sweep
from broker.sandbox.gitviews import GitViews
from broker.sandbox.keeper import END_NOW
from broker.sandbox.leftovers import Ledger
from broker.sandbox.machine import LAUNCHER, Machine
from broker.capture import Capture, LogReport, OutputLog
from broker.limits import DEFAULT_LOG_CAP, Limits, Meter, Usage, words
from broker.runlog import log_name
from broker.spec import AgentSpec, OutputDecoder, SandboxNeeds, SpecError, validate_name
from broker.team import Team
from store import events

if TYPE_CHECKING:
    from broker.core import BrokerCore
    from broker.output import RunView

log = logging.getLogger("conclave.supervisor")

DEFAULT_GRACE: Final = 5.0
#: Seconds between two ``agent.usage`` events of one principal while its usage grows.
USAGE_EVERY: Final = 10.0
RESTART_BACKOFF: Final = 0.5
#: Seconds a launcher told to end its agent now (SIGUSR1) has before it is killed itself.
END_NOW_GRACE: Final = 2.0
#: Exit code recorded when the command could not be started at all.
SPAWN_FAILED: Final = 127


@final
@attrs.frozen
class AgentOutcome:
    """How one principal's process ended; the run summary is a list of these.

    ``status`` says it in words ("exit 0", "killed by SIGKILL", "exit 127:
    command not found"); ``failed`` is whether it counts against the run (a
    nonzero exit, a kill, a start that failed -- unless the broker stopped
    it at shutdown or the restart policy tries again); ``attempt`` of
    ``attempts`` numbers the restarts.
    """

    agent: str
    session: str
    parent: str | None
    pid: int | None
    exit_code: int | None
    started_at: str
    ended_at: str
    log: str
    error: str | None = None
    sandbox: str | None = None
    #: Processes it left behind that were killed at its exit (cgroup and sweep).
    leftovers: int = 0
    status: str = ""
    failed: bool = False
    attempt: int = 1
    attempts: int = 1
    restarting: bool = False
    #: Who ended it, when not the process itself: "broker" (shutdown), "operator" (revoked),
    #: or the limit that stopped it: "timeout", "idle", "budget".
    ended_by: str | None = None
    #: What its binary reported it used (``broker.limits.Usage.as_dict``), when it reports any.
    usage: dict[str, Any] | None = None
    #: Its output: bytes written to its log, dropped past the cap, lost to refused writes.
    output: dict[str, int] | None = None

    def describe(self) -> str:
        """One line for the terminal and the journal: the status, then what happens next."""
        if self.restarting:
            return f"{self.status}; restarting (attempt {self.attempt + 1} of {self.attempts} next)"
        if self.attempts > 1 and self.failed and self.attempt == self.attempts:
            return f"{self.status} (attempt {self.attempt} of {self.attempts}, gave up)"
        return self.status


def exit_words(code: int | None) -> str:
    """An exit status as a person reads it: ``exit 0``, ``killed by SIGKILL``, ``exit 127: command not found``."""
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {_signal_name(-code)}"
    if code == 126:
        return "exit 126: command not executable"
    if code == 127:
        return "exit 127: command not found"
    if 128 < code < 128 + 65:
        return f"exit {code} (128+{code - 128}: something it ran died of {_signal_name(code - 128)})"
    return f"exit {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@final
class Supervisor:
    """Spawns and watches agent processes.  One per running broker."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        socket_path: Path,
        machine: Machine,
        grace: float = DEFAULT_GRACE,
        view: RunView | None = None,
        run_limits: Limits = Limits(),
        ledger: Ledger | None = None,
        agent_nofile: int | None = None,
    ) -> None:
        self.core = core
        self.view = view
        self.socket_path = socket_path
        self.machine = machine
        self.grace = grace
        self.ledger = ledger
        #: The soft descriptor limit agents get (the broker raised its own for its connections).
        self.agent_nofile = agent_nofile
        self.outcomes: list[AgentOutcome] = []
        # The lifeline: launchers get the read end; the write end never leaves this process
        # (close-on-exec), so end of file on it means the broker is gone, however it died.
        self._lifeline, self._lifeline_w = os.pipe2(os.O_CLOEXEC)
        self._shares = shares.ProcessShares(limit=None, in_use=0, slots=1)
        self._broker_process = pidfs_identity(os.getpid())
        self._nursery: trio.Nursery | None = None
        self._pids: set[int] = set()
        # Held from a spawn until its pid is in `_pids`, and through an exit's sweep: a process
        # trio has forked but not yet handed back is a child no live agent accounts for.
        self._registering = trio.Lock()
        #: Agents' cgroups not yet killed: an exit's sweep leaves what is in them to their own agents' exits.
        self._cgroups: set[Path] = set()
        self._revoked: set[str] = set()
        #: Usage reported by each principal's binary, by agent and for the run; the run's budgets.
        self.meter = Meter(run_limits)
        #: A live principal's stop switch, and why it was pulled (a limit ran out).
        self._stops: dict[str, trio.CancelScope] = {}
        self._stopped_for: dict[str, tuple[str, str]] = {}
        #: Called when the run's own budget is crossed (run_broker: stop the run).
        self.on_run_budget: Callable[[str], None] | None = None
        #: When each principal's usage was last recorded as an event, and what it was.
        self._usage_recorded: dict[str, tuple[float, Usage | None]] = {}

    @property
    def known_pids(self) -> frozenset[int]:
        """Pids of agent processes trio still has to reap (the reaper leaves them alone)."""
        return frozenset(self._pids)

    async def run(self, team: Team, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> list[AgentOutcome]:
        """Spawn the team and return once every agent (and child) has exited."""
        self._shares = await trio.to_thread.run_sync(shares.measure, sum(1 + a.may_spawn for a in team.agents))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for spec in team.agents:
                await self._start(spec, parent=None, name=spec.name, attempt=0)
            task_status.started()
        self._nursery = None
        return self.outcomes

    def close(self) -> None:
        """Drop the lifeline (every agent has exited)."""
        for fd in (self._lifeline, self._lifeline_w):
            try:
                os.close(fd)
            except OSError:
                pass

    async def spawn_child(self, parent: Principal, name: str, command: list[str]) -> Principal:
        """Spawn a child for ``parent`` as the broker's own child process.

        The child's agent name is ``<parent>/<name>`` and it joins the
        parent's trust domain, so it can never vouch for its family.

        Raises:
            ConclaveError: ``quota`` past the team file's ``may_spawn``,
                ``invalid_args`` for a bad name or an empty command.
        """
        if self._nursery is None:
            raise ConclaveError(ErrorCode.UNAVAILABLE, "the broker is shutting down; no new agents")
        try:
            validate_name(name, "spawn")
        except SpecError as exc:
            raise ConclaveError(ErrorCode.INVALID_ARGS, str(exc)) from None
        if not command:
            raise ConclaveError(ErrorCode.INVALID_ARGS, "spawn needs a command: conclave spawn --name NAME -- CMD...")
        parent_live = self.core.registry.get(parent.key)
        if parent_live is None:
            raise ConclaveError(ErrorCode.REVOKED, f"{parent.key} is no longer live")
        team = self.core.team
        root = team.spec(parent.domain) if team is not None else None
        quota = root.may_spawn if root is not None else 0
        population = self.core.registry.domain_population(parent.domain)
        if population >= quota:
            raise ConclaveError(
                ErrorCode.QUOTA,
                f"agent {parent.domain} may have {quota} spawned process(es) alive at once (may_spawn in the team file); "
                f"{population} already run",
            )
        child_name = f"{parent.agent}/{name}"
        if any(a.principal.agent == child_name for a in self.core.registry.live()):
            raise ConclaveError(ErrorCode.CONFLICT, f"a child named {child_name} is already running")
        spec = attrs.evolve(parent_live.spec, name=child_name, command=tuple(command), restart="never")
        return await self._start(spec, parent=parent, name=child_name, attempt=0)

    async def revoke(self, principal: Principal) -> bool:
        """End a live principal for cause (the operator revoked it): close its
        connections, terminate its process group, and never restart it.

        Returns True if a running process was signalled.
        """
        self._revoked.add(principal.key)
        live = self.core.registry.end(principal)
        if live is None or live.pid is None or live.pid not in self._pids:
            return False
        _signal(live.pid, signal.SIGTERM)  # the launcher passes it on to the agent's group
        if self._nursery is not None:
            self._nursery.start_soon(self._kill_after_grace, live.pid)
        return True

    def stop_agent(self, principal: str, why: str, reason: str) -> bool:
        """Stop one live principal the way the broker's shutdown stops every agent (SIGTERM to its
        group, SIGKILL after the grace period); ``why`` -- "timeout", "idle", "budget" -- and
        ``reason`` go into its exit.  It is not restarted.  False if it is not running."""
        scope = self._stops.get(principal)
        if scope is None or principal in self._stopped_for:
            return False
        self._stopped_for[principal] = (why, reason)
        scope.cancel()
        return True

    async def _kill_after_grace(self, pid: int) -> None:
        for sig, wait in ((END_NOW, self.grace), (signal.SIGKILL, END_NOW_GRACE)):
            with trio.move_on_after(wait):
                while pid in self._pids:
                    await trio.sleep(0.05)
            if pid not in self._pids:
                return
            _signal(pid, sig)
            if sig == signal.SIGKILL:
                _signal_group(pid, sig)

    # -- one agent's life -------------------------------------------------------

    async def _start(self, spec: AgentSpec, *, parent: Principal | None, name: str, attempt: int) -> Principal:
        assert self._nursery is not None
        live, ticket = self.core.registry.issue(spec, parent=parent, agent_name=name)
        principal = live.principal
        try:
            log_path = self.core.paths.logs / log_name(name, principal.session)
            env = self._environment(spec, ticket.secret)
            cwd = self.core.paths.repo / (spec.cwd or ".")
            command = list(spec.command)
            needs = SandboxNeeds()
            decoder: OutputDecoder | None = None
            if spec.preset is not None and parent is None:
                # The preset runs `conclave agent-launch` as the agent, which execs its binary.
                assert self.core.team is not None
                preset = self.core.team.presets[spec.preset]
                command = preset.command(spec, self.core.paths, principal)
                needs = preset.sandbox_needs(spec)
                decoder = preset.decoder(spec)
            agent_dir = self.core.paths.agent_dir(principal.agent, principal.session)
            agent_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            level = spec.sandbox or self.machine.strongest
            box = sandbox.build(
                level,
                command,
                machine=self.machine,
                repo=self.core.paths.repo,
                state=self.core.paths.state,
                agent_dir=agent_dir,
                socket_path=self.socket_path,
                session=principal.session,
                read=spec.allow_read,
                write=spec.allow_write,
                preset_read=needs.read,
                preset_write=needs.write,
                git=self._git_box(level, principal),
            )
            env.update(box.env)
            share = self._shares.share(spec.max_processes)
            report_r, report_w = os.pipe2(os.O_CLOEXEC)
            options = ["--watch", str(self._lifeline), "--report", str(report_w)]
            if self.agent_nofile is not None:
                options += ["--nofile", str(self.agent_nofile)]
            if box.level == "strict" and os.geteuid() != 0:  # uid 0 is exempt from RLIMIT_NPROC: no promise to make
                options += ["--max-processes", str(share)]
            if box.cgroup is not None:
                shares.limit_cgroup(box.cgroup, share)
            box = box.with_options(*options)
        except BaseException:
            self.core.registry.end(principal)  # its ticket dies with the spawn that never happened
            self._retire_git_now(principal)
            raise
        started = events.now()
        capture = self._capture(principal, spec, log_path, decoder)
        missing = _missing_program(command, env, cwd)
        try:
            if missing is not None:
                raise missing
            async with self._registering:
                # Pipes, never a descriptor into the logs: the broker writes those (broker.capture).
                process = await trio.lowlevel.open_process(
                    list(box.argv),
                    cwd=str(cwd),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if decoder is not None else subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(self._lifeline, report_w),
                )
                self._pids.add(process.pid)
                if box.cgroup is not None:
                    self._cgroups.add(box.cgroup)
        except OSError as exc:
            os.close(report_r)
            capture.write(f"conclave: could not start {command}: {exc}\n".encode())
            await capture.finish()
            self.core.registry.end(principal)
            box.release()
            self._retire_git_now(principal)
            error = f"could not start {command[0]!r}: {exc.strerror or exc}"
            await self._persist_start(live, None, started, attempt, command, box.level)
            await self._persist_end(principal, None, SPAWN_FAILED, error, 0)
            self._report(AgentOutcome(
                principal.agent, principal.session, principal.parent, None, SPAWN_FAILED, started, events.now(), str(log_path), error, box.level,
                status=error, failed=True, attempt=attempt + 1, attempts=_attempts(spec, child=parent is not None),
            ))  # fmt: skip
            return principal
        finally:
            os.close(report_w)
        # Spawned: from here to its watch nothing may be cancelled away.  A stop (SIGTERM, Ctrl-C) landing while
        # the spawn is recorded used to leave this agent unwatched: never sent SIGTERM, its output read for
        # ever, the broker's stop waiting on it until a second signal.  Shielded, the watch starts, sees the
        # stop and ends the agent as any other (the record waits on the store at most STOP_PATIENCE once stopping).
        with trio.CancelScope(shield=True):
            if self.ledger is not None:
                self.ledger.agent_started(principal.key, process.pid, box.cgroup, str(LAUNCHER))
            capture.start(self._nursery, process.stdout, process.stderr)
            self.core.registry.started(principal, process.pid, started)
            await self._persist_start(live, process.pid, started, attempt, command, box.level)
            if self.view is not None:
                self.view.spawned(
                    principal.key, process.pid, log_path, attempt=attempt + 1, attempts=_attempts(spec, child=parent is not None), sandbox=box.level
                )
            reports = LauncherReports(report_r)
            self._stops[principal.key] = trio.CancelScope()
            self._nursery.start_soon(self._hear, reports, principal, box)
            self._nursery.start_soon(self._watch, live, process, attempt, str(log_path), box, reports, capture)
            if spec.limits.timeout is not None or spec.limits.idle_timeout is not None:
                self._nursery.start_soon(self._watch_time, principal, spec.limits)
        return principal

    async def _hear(self, reports: LauncherReports, principal: Principal, box: sandbox.Box) -> None:
        """Read what the agent's launcher reports until it exits; say when the agent reaches its share.

        Shielded: it ends when the launcher does (end of file), which shutdown itself brings about,
        so the count of leftovers the launcher sends last is never lost to a cancellation."""
        refused = 0
        try:
            with trio.CancelScope(shield=True):
                async with trio.lowlevel.FdStream(reports.fd) as stream:
                    pending = b""
                    while True:
                        with trio.move_on_after(1.0 if box.cgroup is not None else float("inf")):
                            chunk = await stream.receive_some(4096)
                            if not chunk:
                                break
                            pending += chunk
                            *lines, pending = pending.split(b"\n")
                            for line in lines:
                                reached = reports.heard(line)
                                if reached is not None:
                                    await self._share_reached(principal, box, reached)
                        if box.cgroup is not None and shares.cgroup_refusals(box.cgroup) > refused:
                            refused = shares.cgroup_refusals(box.cgroup)
                            await self._share_reached(principal, box, {"refused": refused, "limit": _read_int(box.cgroup / "pids.max")})
        finally:
            reports.closed.set()

    async def _share_reached(self, principal: Principal, box: sandbox.Box, detail: dict[str, object]) -> None:
        limit = detail.get("limit")
        if self.view is not None:
            self.view.share_reached(principal.key, limit if isinstance(limit, int) else None)
        try:
            await self.core.record("agent.share_reached", actor=events.BROKER_ACTOR, subject=principal.key, payload={"sandbox": box.level, **detail})
        except Exception:  # the store refusing an event must not end the watch on an agent
            log.exception("could not record that %s reached its share", principal.key)

    async def _watch(
        self, live: LiveAgent, process: trio.Process, attempt: int, log_path: str, box: sandbox.Box, reports: LauncherReports,
        capture: Capture,
    ) -> None:
        principal = live.principal
        cancelled = False
        try:
            with self._stops[principal.key]:  # a limit that runs out pulls this: the same path as shutdown
                await process.wait()
        except trio.Cancelled:
            cancelled = True
            raise
        finally:
            with trio.CancelScope(shield=True):
                del self._stops[principal.key]
                in_group = await self._terminate(process)
                self._pids.discard(process.pid)
                with trio.move_on_after(2.0):  # the launcher has exited: its report is complete
                    await reports.closed.wait()
                # One process may be seen twice (in the group, then in the cgroup after a setsid): count pids.
                async with self._registering:  # never while a spawn is between fork and `_pids`
                    leftovers = reports.leftovers + len(in_group | await trio.to_thread.run_sync(self._contain, box))
                    self._cgroups.discard(box.cgroup)  # type: ignore[arg-type]  # killed: no one else's sweep need spare it now
                if self.ledger is not None:
                    self.ledger.agent_ended(principal.key)
                output = await capture.finish()  # its last lines come before its exit
                await self._record_usage(principal)
                code = process.returncode
                stopped = self._stopped_for.pop(principal.key, None)
                usage = self.meter.by_principal.get(principal.key)
                self.core.registry.end(principal)
                error = "stopped by the broker" if cancelled else stopped[1] if stopped else None
                extra = {"output": output, **({"stopped": stopped[0]} if stopped else {}), **({"usage": usage.as_dict()} if usage else {})}
                await self._persist_end(principal, process.pid, code, error, leftovers, extra)
                await self.core.principal_ended(principal)
                git = self._git()
                note = await git.retire(principal.session, principal.key) if git is not None else None
                if note is not None:
                    await self.core.record("git.left", actor=events.BROKER_ACTOR, subject=principal.key, payload=note.detail)
                spec = live.spec
                revoked = principal.key in self._revoked
                restart = spec.restart == "on-failure" and code != 0 and principal.parent is None and attempt < spec.max_restarts and not revoked
                restart = restart and stopped is None  # a limit that ran out would run out again
                self._report(_outcome(
                    live, process.pid, code, log_path, box.level, leftovers, attempt=attempt, cancelled=cancelled, revoked=revoked, restart=restart,
                    stopped=stopped, usage=usage, output=output,
                ))  # fmt: skip
        if restart:
            await trio.sleep(RESTART_BACKOFF * (attempt + 1))
            await self._start(spec, parent=None, name=spec.name, attempt=attempt + 1)

    # -- git -------------------------------------------------------------------------

    def _git(self) -> GitViews | None:
        git = self.core.extensions.get("git")
        return git if isinstance(git, GitViews) else None

    def _git_box(self, level: str, principal: Principal) -> sandbox.GitBox | None:
        """The box's git: its own git directory in a strict box (made now), the protected paths at every level."""
        git = self._git()
        if git is None or level == "off":
            return None
        layout = git.layout
        agent_git_dir = git.create(principal.session).path if level == "strict" else None
        return sandbox.GitBox(layout.repo, layout.git_dir, agent_git_dir, layout.protected)

    def _retire_git_now(self, principal: Principal) -> None:
        """A spawn that never started: its git directory holds nothing of its own."""
        git = self._git()
        view = git.dirs.pop(principal.session, None) if git is not None else None
        if view is not None:
            view.remove()

    def _capture(self, principal: Principal, spec: AgentSpec, log_path: Path, decoder: OutputDecoder | None) -> Capture:
        key = principal.key

        async def report(r: LogReport) -> None:
            if self.view is not None:
                self.view.note(f"output_{r.kind}", r.text, principal=key, failed=r.kind == "disk_full")
            await self.core.record(f"agent.output_{r.kind}", actor=events.BROKER_ACTOR, subject=key, payload=r.payload)

        async def on_usage(usage: Usage) -> None:
            now = trio.current_time()
            self.core.activity.touch(principal.domain, now)
            self.meter.report(key, principal.agent, usage)
            if now - self._usage_recorded.get(key, (-USAGE_EVERY, None))[0] >= USAGE_EVERY:
                await self._record_usage(principal)
            crossed = self.meter.crossed(principal.agent, spec.limits)
            if crossed is None:
                return
            scope, reason = crossed
            if scope == "run" and self.on_run_budget is not None:
                self.on_run_budget(reason)
            elif self.stop_agent(key, "budget", reason) and self.view is not None:
                self.view.note("limit", f"{reason}; stopping it", principal=key, failed=True)

        log = OutputLog(log_path.parent, log_path.name, cap=spec.log_cap or DEFAULT_LOG_CAP)
        return Capture(
            key, log, view=self.view, decoder=decoder, report=report, on_usage=on_usage,
            on_output=lambda now: self.core.activity.touch(principal.domain, now),
        )  # fmt: skip

    async def _record_usage(self, principal: Principal) -> None:
        """``agent.usage``: what the principal's binary has reported so far (at most every
        :data:`USAGE_EVERY` seconds while it runs, and once more at its end if it changed)."""
        usage = self.meter.by_principal.get(principal.key)
        if usage is None or self._usage_recorded.get(principal.key, (0.0, None))[1] == usage:
            return
        self._usage_recorded[principal.key] = (trio.current_time(), usage)
        try:
            await self.core.record("agent.usage", actor=events.BROKER_ACTOR, subject=principal.key, payload=usage.as_dict())
        except Exception:  # noqa: BLE001 -- usage is also in agent.exit; a store that refuses must not stop the agent's output
            log.exception("could not record usage for %s", principal.key)

    async def _watch_time(self, principal: Principal, limits: Limits) -> None:
        """Stop ``principal`` when its ``timeout`` runs out, or when its family has been idle for ``idle_timeout``."""
        start = trio.current_time()
        activity = self.core.activity
        activity.touch(principal.domain, start)
        while principal.key in self._stops:
            now = trio.current_time()
            if limits.timeout is not None and now - start >= limits.timeout:
                reason = f"timed out: timeout = {words(limits.timeout)} ran out"
                if self.stop_agent(principal.key, "timeout", reason) and self.view is not None:
                    self.view.note("limit", f"{reason}; stopping it", principal=principal.key, failed=True)
                return
            quiet = activity.idle_since(principal.domain, start)
            if limits.idle_timeout is not None and quiet is not None and now - quiet >= limits.idle_timeout:
                reason = f"idle: no output and no broker call for idle_timeout = {words(limits.idle_timeout)}"
                if self.stop_agent(principal.key, "idle", reason) and self.view is not None:
                    self.view.note("limit", f"{reason}; stopping it", principal=principal.key, failed=True)
                return
            await trio.sleep(min(1.0, limits.idle_timeout or 1.0, limits.timeout or 1.0) / 4)

    def _report(self, outcome: AgentOutcome) -> None:
        self.outcomes.append(outcome)
        if self.view is not None:
            self.view.exited(outcome)

    async def _terminate(self, process: trio.Process) -> set[int]:
        """SIGTERM to the launcher (it passes it on to the agent's group); after the grace period, tell
        it to end the agent now; SIGKILL it if it does not.  Return the pids left in its group."""
        if process.returncode is None:
            for sig, wait in ((signal.SIGTERM, self.grace), (END_NOW, END_NOW_GRACE)):
                _signal(process.pid, sig)
                with trio.move_on_after(wait):
                    await process.wait()
                if process.returncode is not None:
                    break
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        # Whatever else is left in the group (background jobs of a shell) dies with it, counted.
        left = sweep.group_members(process.pid)
        _signal_group(process.pid, signal.SIGKILL)
        return left

    def _contain(self, box: sandbox.Box) -> set[int]:
        """Kill what the exited agent left behind; the pids of those processes."""
        leftovers = box.release()
        live = frozenset(self._cgroups)
        spare = (lambda pid: sweep.in_cgroup(pid, live)) if box.cgroup is not None else (lambda pid: False)
        return leftovers | sweep.sweep(os.getpid(), self._pids, spare)

    def _environment(self, spec: AgentSpec, secret: str) -> dict[str, str]:
        env = agent_environment(spec)
        env[ENV_SOCKET] = str(self.socket_path)
        env[ENV_TICKET] = secret
        env[ENV_STATE_DIR] = str(self.core.paths.state)
        env[ENV_REPO] = str(self.core.paths.repo)
        if self._broker_process is not None:
            env[ENV_BROKER_PROCESS] = self._broker_process
        return env

    # -- the database copy --------------------------------------------------------

    async def _persist_start(self, live: LiveAgent, pid: int | None, started: str, attempt: int, argv: list[str], level: str) -> None:
        p = live.principal
        command = json.dumps(argv)

        def write(conn):  # type: ignore[no-untyped-def]
            conn.execute(
                "INSERT INTO principals(agent, session, role, domain, parent, pid, command, started_at) VALUES (?,?,?,?,?,?,?,?)",
                (p.agent, p.session, p.role.value, p.domain, p.parent, pid, command, started),
            )
            events.append(
                conn,
                "agent.spawn",
                actor=p.parent or events.BROKER_ACTOR,
                subject=p.key,
                payload={"pid": pid, "domain": p.domain, "command": argv, "attempt": attempt, "sandbox": level, "started_at": started},
            )

        await self.core.store.persist(write, what=f"the spawn of {p.key}")

    async def _persist_end(
        self, principal: Principal, pid: int | None, code: int | None, error: str | None, leftovers: int, extra: dict[str, Any] | None = None
    ) -> None:
        def write(conn):  # type: ignore[no-untyped-def]
            at = events.now()
            conn.execute(
                "UPDATE principals SET ended_at = ?, exit_code = ? WHERE agent = ? AND session = ?",
                (at, code, principal.agent, principal.session),
            )
            events.append(
                conn,
                "agent.exit",
                actor=events.BROKER_ACTOR,
                subject=principal.key,
                payload={"pid": pid, "exit_code": code, "error": error, "leftovers_killed": leftovers, **(extra or {})},
                at=at,
            )

        await self.core.store.persist(write, what=f"the exit of {principal.key}")


def agent_environment(spec: AgentSpec) -> dict[str, str]:
    """The environment an agent starts with, before the broker adds its socket and ticket (and
    before its box adds what the box needs): the broker's, less the deputies' variables and
    conclave's own, plus the team file's ``env``.  Preflight checks credentials in it."""
    env = sandbox.clean_environment(os.environ)
    for key in [k for k in env if k.startswith("CONCLAVE_")]:
        del env[key]
    env.update(spec.env)
    # Agents call `conclave`; the broker's own interpreter directory has it.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def _missing_program(command: list[str], env: dict[str, str], cwd: Path) -> OSError | None:
    """The error exec would give if the agent's program cannot be found (the launcher would only say so later)."""
    program = command[0] if command else ""
    if os.sep in program:
        target = program if os.path.isabs(program) else str(cwd / program)
        found = target if os.path.isfile(target) and os.access(target, os.X_OK) else None
    else:
        found = shutil.which(program, path=env.get("PATH"))
    return None if found else FileNotFoundError(2, "No such file or directory", program)


def _attempts(spec: AgentSpec, *, child: bool) -> int:
    """How many times the restart policy may start this agent (children are never restarted)."""
    return 1 + spec.max_restarts if spec.restart == "on-failure" and not child else 1


def _outcome(
    live: LiveAgent, pid: int, code: int | None, log: str, sandbox_level: str | None, leftovers: int,
    *, attempt: int, cancelled: bool, revoked: bool, restart: bool,
    stopped: tuple[str, str] | None = None, usage: Usage | None = None, output: dict[str, int] | None = None,
) -> AgentOutcome:  # fmt: skip
    p = live.principal
    status = exit_words(code)
    if stopped is not None:
        ended_by: str | None = stopped[0]
        status = f"{stopped[1]}; {status}"
    elif cancelled:
        ended_by = "broker"
        status += " (stopped by the broker at shutdown)" if code != 0 else ""
    elif revoked:
        ended_by = "operator"
        status = f"revoked by the operator; {status}"
    else:
        ended_by = None
    if output and (output["dropped_bytes"] or output["lost_bytes"]):
        status += f" (output: {output['dropped_bytes']} bytes dropped past its log_cap, {output['lost_bytes']} lost to a full disk)"
    failed = stopped is not None or (not cancelled and not restart and (code != 0 or revoked))
    return AgentOutcome(
        p.agent, p.session, p.parent, pid, code, live.started_at, events.now(), log, None, sandbox_level, leftovers,
        status=status, failed=failed, attempt=attempt + 1, attempts=_attempts(live.spec, child=p.parent is not None),
        restarting=restart, ended_by=ended_by, usage=usage.as_dict() if usage else None, output=output,
    )  # fmt: skip


@final
class LauncherReports:
    """What one agent's launcher said on its report pipe (``broker/sandbox/launcher.py``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.leftovers = 0
        self.closed = trio.Event()

    def heard(self, line: bytes) -> dict[str, object] | None:
        """Take one line in; the share detail when it says the agent reached its share."""
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        if isinstance(message.get("leftovers"), int):
            self.leftovers = message["leftovers"]
        reached = message.get("share")
        return reached if isinstance(reached, dict) else None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
