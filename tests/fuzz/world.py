"""The real system the fuzzer drives: brokers (``conclave run``), puppet agents, the operator.

One :class:`World` lives for a whole fuzzing run: starting a broker and its
agents takes seconds here, a step tens of milliseconds, so examples follow
one another on the same brokers (each starts from a normalised world: every
team agent live, no children, no locks, the run's policy) instead of paying
a start each.  A broker is stopped or SIGKILLed and started again on the same
state directory when a step asks for it.

With SQLite there is one host (``local``).  With PostgreSQL there are two,
``alpha`` and ``beta``: two ``conclave run`` brokers on two clones of one
repository sharing one database (tests/multihost shows the set-up), so
principals are ``HOST/agent:session`` and the team file of each host names
its own agents (one name on both hosts: the same trust domain).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Final

from agents.harness import Puppet, Run, make_repo, puppet_command
from broker.client import BlockingClient

#: Files in the scratch repository: every path the lock rules use exists or not, as chosen.
FILES = {"README.md": "scratch\n", "src/a.py": "a = 1\n", "src/b.py": "b = 1\n", "src/sub/c.py": "c = 1\n", "docs/x.md": "x\n"}

#: dave runs unboxed, as a person may run a script: a box keeps the operator key out of reach (its state
#: directory is denied), so only an unboxed agent that drops its ticket can present the key, and only then is
#: the broker's own check -- the process's ancestry, not the key -- what refuses it (the drop-ticket rule).
UNBOXED: Final = {"dave": {"sandbox": "off"}}
#: What the broker's team file says beyond the agents: budgets no fuzz run reaches (the model has no mail budget).
#: Words only (embedder = "none"): the model has no notion of meaning, so no rediscovery and no refusal by meaning;
#: a witness's evidence matches when it repeats the claim's words (docs/MEMORY.md), which texts.evidence_for does.
MEMORY = {"embedder": "none"}
SETTINGS = ("\n[mail]\ndeliveries_per_minute = 1000000\nbytes_per_minute = 1000000000\n"
            "\n[memory]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in MEMORY.items()))


class StepTimeout(AssertionError):
    """Something the model said would happen did not happen in time."""


class Agent(Puppet):
    """A puppet handle whose replies may be read later (``send_nowait``, ``receive``); a silent reply times out as a step."""

    def receive(self, timeout: float) -> dict[str, Any]:
        try:
            return super().receive(timeout)
        except TimeoutError as exc:
            raise StepTimeout(str(exc)) from None


@dataclass
class HostSpec:
    name: str
    agents: tuple[str, ...]
    url: str | None = None  # the PostgreSQL role's URL, None for SQLite


class Host:
    """One broker and its agents' puppets."""

    def __init__(self, root: Path, spec: HostSpec, *, repo: Path | None, may_spawn: int, max_restarts: int) -> None:
        self.root = root
        self.spec = spec
        self.name = spec.name
        self.repo = repo
        self.may_spawn = may_spawn
        self.max_restarts = max_restarts
        self.run: Run | None = None
        #: What starts the broker (``subprocess.Popen`` unless :meth:`World.forking` says otherwise).
        self.launch: Callable[..., Any] | None = None
        self.agents: dict[str, Agent] = {}
        self._operator: BlockingClient | None = None
        self.last_ops: list[tuple[str, dict[str, Any], str]] = []
        self.starts = 0

    def team(self) -> list[dict[str, Any]]:
        return [
            {"name": n, "may_spawn": self.may_spawn, "restart": "on-failure", "max_restarts": self.max_restarts, **UNBOXED.get(n, {})}
            for n in self.spec.agents
        ]

    def extra_toml(self, policy: dict[str, Any]) -> str:
        text = SETTINGS + "\n[policy]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in policy.items())
        if self.spec.url is not None:
            text += f'\n[store]\nurl = "{self.spec.url}"\n'
        return text

    def start(self, policy: dict[str, Any], *, timeout: float = 120) -> None:
        reuse = self.starts > 0
        self.run = Run(self.root, self.team(), files=FILES, reuse=reuse, repo=self.repo, extra_toml=self.extra_toml(policy), grace=1.0, launch=self.launch)
        self.run.start(timeout=timeout)
        self.starts += 1
        self.agents = {}

    # -- reaching things ------------------------------------------------------

    def agent(self, name: str, *, timeout: float = 30) -> Agent:
        if name not in self.agents:
            assert self.run is not None
            address = self.run._wait_for_control(name, time.monotonic() + timeout)
            self.agents[name] = Agent(address)
        return self.agents[name]

    def forget(self, name: str) -> None:
        agent = self.agents.pop(name, None)
        if agent is not None:
            try:
                agent.close()
            except OSError:
                pass

    def operator(self) -> BlockingClient:
        if self._operator is None:
            assert self.run is not None
            self._operator = self.run.operator()
        return self._operator

    def op(self, op: str, **args: Any) -> dict[str, Any]:
        """The operator's call, as a raw reply (``ok``, ``result`` or ``error``)."""
        from broker.errors import ConclaveError

        try:
            reply = {"ok": True, "result": self.operator().call(op, args)}
        except ConclaveError as exc:
            reply = {"ok": False, "error": exc.to_wire()}
        except OSError as exc:
            last = self.last_ops[-3:]
            self._operator = None
            raise ConnectionError(f"the operator's connection to {self.name}'s broker broke at {op} ({exc}); the calls before: {last}") from exc
        self.last_ops = [*self.last_ops[-9:], (op, args, str(reply)[:200])]
        return reply

    def spawn_command(self) -> list[str]:
        assert self.run is not None
        return puppet_command(self.run.control)

    def live_pids(self) -> dict[str, int]:
        reply = self.op("agents", live_only=True)
        return {a["principal"]: a["pid"] for a in reply.get("result", []) if a.get("pid")}

    def live_keys(self) -> set[str]:
        return set(self.live_pids())

    # -- stopping ------------------------------------------------------------

    def _drop_clients(self) -> None:
        for name in list(self.agents):
            self.forget(name)
        if self._operator is not None:
            try:
                self._operator.close()
            except OSError:
                pass
            self._operator = None

    def stop(self) -> None:
        """SIGTERM: the broker ends every agent and exits cleanly."""
        self._drop_clients()
        if self.run is not None:
            self.run.close()

    def kill(self) -> None:
        """SIGKILL the broker (and end the agents it leaves behind: :meth:`agents.harness.Run.kill`)."""
        assert self.run is not None
        self._drop_clients()
        self.run.kill()
        self.run.close()

    def stolen_ticket_probe(self, thief: str, victim_pid: int, op: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """``thief``'s process attempts ``op`` with its own ticket (the control), then with the one it
        read from ``victim_pid``'s environment."""
        return self._probe(thief, [], [{"ticket": None}, {"ticket": ticket_of(victim_pid)}], op, args)

    def outsider_with(self, ticket: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """A process outside every agent's tree presents ``ticket`` (one kept from an exited agent)."""
        from broker.errors import ConclaveError

        assert self.run is not None
        try:
            with BlockingClient(self.run.socket_path(), ticket=ticket) as client:
                return {"ok": True, "result": client.call(op, args)}
        except ConclaveError as exc:
            return {"ok": False, "error": exc.to_wire()}

    def dropped_ticket_probe(self, agent: str, op: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """``agent``'s process attempts ``op`` with its ticket (the control), then with none, as the
        operator's terminal does: the operator key if it can read it, no proof at all if it cannot."""
        return self._probe(agent, [], [{"ticket": None}, {"operator": True}], op, args)

    def _probe(self, agent: str, env: list[str], attempts: list[dict[str, Any]], op: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """Connections from a process in ``agent``'s tree, one per attempt (see PROBE)."""
        out = self.agent(agent).sh(*env, sys.executable, "-I", "-S", "-c", PROBE, json.dumps(attempts), op, json.dumps(args))
        if not out.stdout.strip():
            return [{"ok": False, "error": {"code": "probe", "message": out.stderr[-500:]}}] * len(attempts)
        return json.loads(out.stdout)


#: ``agents.probe`` without its imports (a process start costs a tenth): for each attempt, connect to
#: the broker, prove identity with a ticket (its own, from the environment, when none is given) or as
#: the operator (the key if this process can read it, no proof at all if it cannot), then try one op.
PROBE = """
import json, os, socket, sys
attempts, op, args = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
def hello_of(attempt):
    if "ticket" in attempt:
        return {"ticket": attempt["ticket"] or os.environ["CONCLAVE_TICKET"]}
    try:
        return {"operator_key": open(os.path.join(os.environ["CONCLAVE_STATE_DIR"], "operator.key")).read().strip()}
    except (KeyError, OSError):
        return {}
def attempt(hello):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["CONCLAVE_SOCKET"])
    f = s.makefile("rwb")
    def call(i, name, a):
        f.write(json.dumps({"id": i, "op": name, "args": a}).encode() + b"\\n")
        f.flush()
        line = f.readline()
        return json.loads(line) if line else {"ok": False, "error": {"code": "unavailable", "message": "hung up"}}
    reply = call(1, "hello", hello)
    if reply.get("ok"):
        reply = call(2, op, args)
    s.close()
    return {k: reply[k] for k in ("ok", "result", "error") if k in reply}
print(json.dumps([attempt(hello_of(a)) for a in attempts]))
"""


def ticket_of(pid: int) -> str:
    """What a thief reads from ``/proc/PID/environ``."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"CONCLAVE_TICKET="):
            return item.split(b"=", 1)[1].decode()
    raise LookupError(f"process {pid} has no ticket in its environment")


class World:
    """Every host of one fuzzing run, started once and kept between examples."""

    def __init__(self, root: Path, specs: list[HostSpec], *, may_spawn: int = 2, max_restarts: int = 100) -> None:
        self.root = root
        self.specs = specs
        repos: list[Path | None] = [None] * len(specs)
        if len(specs) > 1:
            origin = make_repo(root / "origin", FILES)
            repos = []
            for spec in specs:
                clone = root / spec.name / "repo"
                subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
                repos.append(clone)
        self.hosts = {
            spec.name: Host(root / spec.name, spec, repo=repo, may_spawn=may_spawn, max_restarts=max_restarts)
            for spec, repo in zip(specs, repos)
        }
        self.may_spawn, self.max_restarts = may_spawn, max_restarts
        self.on_first_start: Callable[[Host], None] | None = None

    def forking(self, launch: Callable[..., Any]) -> World:
        """Start every broker of this world with ``launch`` (a zygote's ``popen``: scenarios/zygote.py); returns the world."""
        for host in self.hosts.values():
            host.launch = launch
        return self

    def start(self, policy: dict[str, Any]) -> None:
        first = True
        for host in self.hosts.values():
            host.start(policy)
            if first and self.on_first_start is not None:
                self.on_first_start(host)
            first = False

    def diagnose(self) -> str:
        """What a person debugging a finding wants first: is each broker alive, and the end of its log."""
        out = []
        for host in self.hosts.values():
            run = host.run
            if run is None:
                out.append(f"{host.name}: not started")
                continue
            alive = run.process is not None and run.process.poll() is None
            out.append(f"{host.name}: broker {'running' if alive else f'exited ({run.process.returncode if run.process else None})'}")
            if run.process is not None and not alive:
                _, err = run.process.communicate()
                out.append(f"{host.name}: broker stderr:\n{err[-4000:]}")
            log = run.state / "logs" / "broker.log"
            if log.exists():
                out.append(f"{host.name}: broker.log (end):\n" + "\n".join(log.read_text().splitlines()[-40:]))
        return "\n".join(out)

    def close(self) -> None:
        for host in self.hosts.values():
            try:
                host.stop()
            except Exception:  # noqa: BLE001 -- closing must reach every host
                pass
        shutil.rmtree(self.root, ignore_errors=True)
