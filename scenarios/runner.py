"""Replaying a scenario against the real system.

Each scenario gets its own temporary directory, a scratch git repository, a
real ``conclave run`` broker and real puppet agents (``agents.puppet``) with
broker-issued identities.  Steps are carried out in order as the named agent
(through its own puppet process), as the operator (from the runner, with the
operator key, outside every agent's tree), or as an outside attacker with the database file
(``edit-db``).  The first step or check whose outcome differs from what the
scenario expects fails the scenario, with what was expected and what happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Final, final

import attrs

from broker.client import BlockingClient
from broker.entry import python_argv
from agents.harness import Puppet, Run, puppet_command, toml_value
from broker.errors import ConclaveError
from scenarios.format import OPERATOR, Check, Scenario, Step, interpolate

PASSED: Final = "passed"
FAILED: Final = "failed"
INVALID: Final = "invalid"


class Interrupted(RuntimeError):
    """The whole run is being stopped (``run_all``'s ``stopping``): this scenario ends where it is, without a verdict of its own."""


class StepFailed(AssertionError):
    def __init__(self, where: str, expected: str, got: str) -> None:
        super().__init__(f"{where}: expected {expected}; got {got}")
        self.where, self.expected, self.got = where, expected, got


@final
@attrs.frozen
class Outcome:
    name: str
    path: str
    tier: str
    verdict: str
    seconds: float
    detail: str | None = None
    expected: str | None = None
    got: str | None = None
    steps: int = 0


def _reply(call) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    try:
        return {"ok": True, "result": call()}
    except ConclaveError as exc:
        return {"ok": False, "error": exc.to_wire()}


def subset_mismatch(expected: Any, got: Any, path: str = "result") -> str | None:
    """Where ``got`` fails to contain ``expected`` (dicts by key, lists item-wise), or None."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{path} is {json.dumps(got)[:200]}, not an object"
        for key, value in expected.items():
            if key not in got:
                return f"{path}.{key} is missing"
            problem = subset_mismatch(value, got[key], f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{path} has {len(got)} items, expected {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            problem = subset_mismatch(e, g, f"{path}[{i}]")
            if problem:
                return problem
        return None
    return None if expected == got else f"{path} is {json.dumps(got)[:200]}, expected {json.dumps(expected)[:200]}"


def team_tables(scenario: Scenario, policy: dict[str, Any] | None = None) -> str:
    """The team file's tables beyond the agents: ``[policy]`` (``policy`` when a restart changed it), ``[memory]``, slots."""
    extra = ""
    for table, values in (("policy", scenario.policy if policy is None else policy), ("memory", scenario.memory)):
        if values:
            extra += f"\n[{table}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items())
    for slot in scenario.slots:
        extra += "\n[[slot]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in slot.items())
    return extra


class ScenarioRun:
    """The state of one scenario while it runs."""

    def __init__(self, scenario: Scenario, root: Path, launch: Callable[..., Any] | None = None, stopping: threading.Event | None = None) -> None:
        self.scenario = scenario
        #: Set when the whole run is stopping: a ``sleep`` step ends at once, and no further step starts.
        self.stopping = stopping or threading.Event()
        self.root = root
        self.policy = dict(scenario.policy)
        #: What starts each broker (``subprocess.Popen`` unless given: the zygote's fork, see scenarios/zygote.py).
        self.launch = launch
        self.run = Run(root, [dict(a) for a in scenario.agents], files=scenario.files or None, extra_toml=team_tables(scenario), grace=2.0, launch=launch)
        self.bindings: dict[str, Any] = {}
        self.tickets: dict[str, str] = {}

    # -- acting ---------------------------------------------------------------

    def puppet(self, name: str) -> Puppet:
        return self.run.puppet(name)

    def start(self) -> None:
        self.run.start()
        self.bindings.update(state=str(self.run.state), repo=str(self.run.repo), pid={})
        for agent in self.scenario.agents:
            self._remember_ticket(agent["name"])
            self.bindings["pid"][agent["name"]] = self.puppet(agent["name"]).pid

    def _remember_ticket(self, name: str) -> None:
        # What a thief would read from /proc/<pid>/environ.
        pid = self.puppet(name).pid
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for item in environ:
            if item.startswith(b"CONCLAVE_TICKET="):
                self.tickets[name] = item.split(b"=", 1)[1].decode()

    def operator_call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        with self.run.operator() as client:
            return _reply(lambda: client.call(op, args))

    def act(self, step: Step) -> Any:
        raw = interpolate(step.raw, self.bindings)
        args = raw.get("args", {})
        actor = step.actor
        if step.op is not None:
            if actor == OPERATOR:
                return self.operator_call(step.op, args)
            return self.puppet(actor).try_call(step.op, **args)
        action = step.action
        if action == "spawn":
            child = f"{actor}/{raw['name']}"
            reply = self.puppet(actor).try_call("spawn", name=raw["name"], command=puppet_command(self.run.control))
            if reply["ok"]:
                self.run.puppet(child)
                self._remember_ticket(child)
                reply["result"] = self.run.puppet(child).identity
            return reply
        if action == "exit":
            self._end(actor, lambda p: p.exit(int(raw.get("code", 0))))
            return {"ok": True, "result": {}}
        if action == "kill":
            self._end(actor, lambda p: os.kill(p.pid, signal.SIGKILL))
            return {"ok": True, "result": {}}
        if action == "restart":
            old = self.puppet(actor).identity["session"]
            self._end(actor, lambda p: p.exit(int(raw.get("code", 1))))
            identity = self.run.wait_until(lambda: self._new_session(actor, old), timeout=20, what=f"{actor} to restart")
            self._remember_ticket(actor)
            return {"ok": True, "result": identity}
        if action in ("steal-ticket", "replay-ticket"):
            ticket = self.tickets[raw["from"]]
            probe = python_argv("agents.probe", raw.get("op", "whoami"), json.dumps(raw.get("args", {})))
            if actor == OPERATOR:
                return _reply(lambda: self._outsider_with(ticket, raw.get("op", "whoami"), raw.get("args", {})))
            out = self.puppet(actor).sh("env", f"CONCLAVE_TICKET={ticket}", *probe)
            return json.loads(out.stdout)
        if action == "drop-ticket":
            out = self.puppet(actor).sh(
                "env", "-u", "CONCLAVE_TICKET",
                *python_argv("agents.probe", raw.get("op", "whoami"), json.dumps(raw.get("args", {})), "--operator"),
            )
            return json.loads(out.stdout)
        if action == "raw":
            line = raw["line"] if raw["line"].endswith("\n") else raw["line"] + "\n"
            if actor == OPERATOR:
                with self.run.operator() as client:
                    return client.send_raw(line.encode())
            return self.puppet(actor).raw(line)
        if action in ("sh", "cli"):
            argv = [str(a) for a in raw.get("argv", [])]
            if action == "cli":
                out = self.run.cli(*argv) if actor == OPERATOR else self.puppet(actor).conclave(*argv)
            else:
                out = self.puppet(actor).sh(*argv)
            result: Any = out.stdout
            if "--json" in argv and out.stdout.strip():
                try:
                    result = json.loads(out.stdout)
                except json.JSONDecodeError:
                    pass
            return {"ok": out.returncode == 0, "exit": out.returncode, "result": result, "stdout": out.stdout, "stderr": out.stderr}
        if action == "edit-db":
            from store.database import connect

            conn = connect(self.run.state / "conclave.db")
            try:
                # The attacker has tools: sha256(text) in its SQL, to rehash or extend the chain
                # the way an unkeyed chain would be extended.  The key is not given to it.
                conn.create_scalar_function("sha256", lambda text: hashlib.sha256(str(text).encode()).hexdigest(), 1, deterministic=True)
                # The attacker with the file drops the append-only triggers first.
                conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
                conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
                conn.execute(raw["sql"])
            finally:
                conn.close()
            return {"ok": True, "result": {}}
        if action == "broker-restart":
            self._restart_broker(kill=bool(raw.get("kill", False)), policy=raw.get("policy"))
            return {"ok": True, "result": {}}
        if action == "kill-during":
            # The call leaves, and its caller dies before the answer: whether it happened is for the checks.
            puppet = self.puppet(actor)
            pid = next(a["pid"] for a in self.run.op("agents", live_only=True) if a["agent"] == actor)
            puppet.send_nowait({"call": step.op, "args": args})
            os.kill(pid, signal.SIGKILL)
            self.run.forget(actor)
            self.run.wait_until(lambda: not self._live(actor), timeout=20, what=f"{actor} to exit")
            return {"ok": True, "result": {}}
        if action == "sync":
            return {"ok": True, "result": {}}
        if action == "sleep":
            if self.stopping.wait(float(raw.get("seconds", 0.5))):
                raise Interrupted("the run is stopping")
            return {"ok": True, "result": {}}
        if action == "wait-exit":
            self.run.wait_until(lambda: not self._live(actor), timeout=20, what=f"{actor} to exit")
            return {"ok": True, "result": {}}
        raise AssertionError(f"unhandled action {action}")

    def _restart_broker(self, *, kill: bool, policy: dict[str, Any] | None) -> None:
        """Stop the broker (SIGTERM, or SIGKILL with ``kill``) and start a new one on the same state directory,
        with the trust policy changed when ``policy`` is given; every agent comes back as a new session."""
        if kill:
            self.run.kill()
        self.run.close()
        scenario = self.scenario
        self.policy = {**self.policy, **(policy or {})}
        self.run = Run(self.root, [dict(a) for a in scenario.agents], reuse=True, extra_toml=team_tables(scenario, self.policy), grace=2.0, launch=self.launch)
        self.run.start()
        for agent in scenario.agents:
            self._remember_ticket(agent["name"])
            self.bindings["pid"][agent["name"]] = self.puppet(agent["name"]).pid

    def _outsider_with(self, ticket: str, op: str, args: dict[str, Any]) -> Any:
        with BlockingClient(self.run.socket_path(), ticket=ticket) as client:
            return client.call(op, args)

    def _live(self, name: str) -> bool:
        return any(a["live"] for a in self.run.op("agents") if a["agent"] == name)

    def _end(self, name: str, how) -> None:  # type: ignore[no-untyped-def]
        puppet = self.puppet(name)
        how(puppet)
        self.run.forget(name)
        self.run.wait_until(lambda: not self._live(name), timeout=20, what=f"{name} to exit")

    def _new_session(self, name: str, old: str) -> dict[str, Any] | None:
        try:
            identity = self.run.puppet(name, fresh=True, timeout=0.5).identity
        except (TimeoutError, ConnectionError, OSError):
            return None
        return identity if identity["session"] != old else None

    # -- judging ----------------------------------------------------------------

    def judge_step(self, step: Step, reply: dict[str, Any]) -> None:
        raw = step.raw
        where = step.label
        if "expect_exit" in raw:
            if reply.get("exit") != raw["expect_exit"]:
                raise StepFailed(where, f"exit code {raw['expect_exit']}", f"exit {reply.get('exit')}: {reply.get('stderr', '').strip()[:300]}")
        elif "expect_error" in raw:
            code = (reply.get("error") or {}).get("code")
            if reply.get("ok") or code != raw["expect_error"]:
                raise StepFailed(where, f"error {raw['expect_error']}", _describe(reply))
        elif raw.get("expect") == "error":
            if reply.get("ok"):
                raise StepFailed(where, "an error", _describe(reply))
        elif not reply.get("ok"):
            raise StepFailed(where, "success", _describe(reply))
        if "expect_output" in raw:
            text = reply.get("stdout", "") + reply.get("stderr", "")
            if raw["expect_output"] not in text:
                raise StepFailed(where, f"output containing {raw['expect_output']!r}", text.strip()[:300] or "no output")
        if "expect_result" in raw:
            problem = subset_mismatch(interpolate(raw["expect_result"], self.bindings), reply.get("result"))
            if problem:
                raise StepFailed(where, f"result {json.dumps(raw['expect_result'])}", problem)
        if "bind" in raw and reply.get("ok"):
            self.bindings[raw["bind"]] = reply.get("result")

    def judge_check(self, check: Check) -> None:
        raw = interpolate(check.raw, self.bindings)
        where = check.label
        actor = raw.get("actor", OPERATOR)

        def call(op: str, args: dict[str, Any]) -> dict[str, Any]:
            return self.operator_call(op, args) if actor == OPERATOR else self.puppet(actor).try_call(op, **args)

        if "claim" in raw:
            reply = self.operator_call("memory.show", {"id": raw["claim"]})
            if not reply["ok"]:
                raise StepFailed(where, f"claim {raw['claim']} to exist", _describe(reply))
            claim = reply["result"].get("claim", reply["result"])
            if "tier" in raw and claim.get("tier") != raw["tier"]:
                raise StepFailed(where, f"tier {raw['tier']}", f"tier {claim.get('tier')}")
            counted = [c for c in claim.get("corroborations", []) if c.get("counted")]
            if "counted" in raw and len(counted) != raw["counted"]:
                raise StepFailed(where, f"{raw['counted']} counted witness(es)", f"{len(counted)}: {[c.get('principal') for c in counted]}")
            if "witnesses" in raw:
                names = sorted(c["principal"].rsplit(":", 1)[0] for c in counted)
                if names != sorted(raw["witnesses"]):
                    raise StepFailed(where, f"counted witnesses {sorted(raw['witnesses'])}", str(names))
            return
        if "context" in raw or "recall" in raw or "inbox" in raw:
            if "context" in raw:
                reply = call("memory.context", {"query": raw["context"], **raw.get("args", {})})
            elif "recall" in raw:
                reply = call("memory.recall", {"query": raw["recall"], **raw.get("args", {})})
            else:
                reply = call("msg.inbox", dict(raw.get("args", {})))
            if not reply["ok"]:
                raise StepFailed(where, "an answer", _describe(reply))
            text = json.dumps(reply["result"])
            for needle in raw.get("contains", []):
                if needle not in text:
                    raise StepFailed(where, f"{needle!r} in the answer", text[:400])
            for needle in raw.get("excludes", []):
                if needle in text:
                    raise StepFailed(where, f"{needle!r} absent from the answer", text[:400])
            return
        if "verify" in raw:
            reply = self.operator_call("memory.verify", {})
            result = reply.get("result") or {}
            ok = bool(reply["ok"] and result.get("ok", False))
            want_ok = raw["verify"] == "ok"
            if ok != want_ok:
                raise StepFailed(where, f"verify {raw['verify']}", _describe(reply))
            return
        if "event" in raw:
            args: dict[str, Any] = {"kind": raw["event"]}
            reply = self.operator_call("memory.log", args)
            if not reply["ok"]:
                raise StepFailed(where, "the event log", _describe(reply))
            found = [e for e in reply["result"] if raw.get("subject") is None or e.get("subject") == raw["subject"]]
            if "count" in raw and len(found) != raw["count"]:
                raise StepFailed(where, f"{raw['count']} {raw['event']} event(s)", f"{len(found)}")
            if "count" not in raw and not found:
                raise StepFailed(where, f"a {raw['event']} event", "none")
            return
        if "locks" in raw:
            reply = self.operator_call("lock.list", {})
            if not reply["ok"]:
                raise StepFailed(where, "the lock table", _describe(reply))
            holder = raw.get("holder")
            held = sorted(
                entry["resource"]
                for entry in _lock_entries(reply["result"])
                if holder is None or entry.get("holder", "").split(":")[0] == holder
            )
            if sorted(raw.get("resources", [])) != held:
                raise StepFailed(where, f"{holder or 'anyone'} holding {sorted(raw.get('resources', []))}", str(held))
            return
        if "op" in raw:
            reply = call(raw["op"], raw.get("args", {}))
            if "expect_error" in raw:
                if reply["ok"] or reply["error"]["code"] != raw["expect_error"]:
                    raise StepFailed(where, f"error {raw['expect_error']}", _describe(reply))
            elif not reply["ok"]:
                raise StepFailed(where, "success", _describe(reply))
            if "expect_result" in raw:
                problem = subset_mismatch(raw["expect_result"], reply.get("result"))
                if problem:
                    raise StepFailed(where, json.dumps(raw["expect_result"]), problem)
            return
        raise AssertionError(f"{where}: unhandled check")


def _lock_entries(result: Any) -> list[dict[str, Any]]:
    if isinstance(result, dict):
        result = result.get("holdings", [])
    return [e for e in result if isinstance(e, dict)]


def _describe(reply: dict[str, Any]) -> str:
    if reply.get("ok"):
        return "success: " + json.dumps(reply.get("result"))[:300]
    error = reply.get("error") or {}
    if "exit" in reply:
        return f"exit {reply['exit']}: {reply.get('stderr', '').strip()[:300]}"
    return f"error {error.get('code')}: {error.get('message')}"


def run_scenario(scenario: Scenario, *, workdir: Path | None = None, keep: bool = False, launch: Callable[..., Any] | None = None,
                 stopping: threading.Event | None = None) -> Outcome:
    """Replay ``scenario`` on a fresh broker (started by ``launch``, default ``subprocess.Popen``) and real agents.

    ``stopping`` set (the whole run is interrupted): the scenario stops before its next step, or in a ``sleep``,
    and fails as interrupted; its broker is stopped as at any end."""
    root = Path(tempfile.mkdtemp(prefix="cvs-", dir=workdir))
    started = time.monotonic()
    state = ScenarioRun(scenario, root, launch, stopping)
    done = 0
    # A background step runs on its own thread; its actor's next step (and the
    # checks) first wait for it and judge it.  An agent does one thing at a time.
    pending: dict[str, tuple[Future[Any], Step]] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(scenario.agents) * 2))

    def settle(actor: str) -> None:
        if actor in pending:
            future, earlier = pending.pop(actor)
            state.judge_step(earlier, future.result(timeout=120))

    outcome: Outcome | None = None
    try:
        state.start()
        for step in scenario.steps:
            if state.stopping.is_set():
                raise Interrupted("the run is stopping")
            settle(step.actor)
            if step.action == "sync":
                for name in list(pending):
                    settle(name)
            if step.action in ("exit", "kill", "restart"):
                for name in [n for n in pending if n.startswith(step.actor + "/")]:
                    settle(name)
            if step.raw.get("background"):
                pending[step.actor] = (pool.submit(state.act, step), step)
            else:
                state.judge_step(step, state.act(step))
            done += 1
        for actor in list(pending):
            settle(actor)
        for check in scenario.checks:
            state.judge_check(check)
        outcome = Outcome(scenario.name, str(scenario.path), scenario.tier, PASSED, time.monotonic() - started, steps=done)
    except StepFailed as exc:
        outcome = Outcome(scenario.name, str(scenario.path), scenario.tier, FAILED, time.monotonic() - started, exc.where, exc.expected, exc.got, done)
    except Exception as exc:  # an unexpected fault is a failure with its cause, never a pass
        where = scenario.steps[done].label if done < len(scenario.steps) else "checks"
        outcome = Outcome(scenario.name, str(scenario.path), scenario.tier, FAILED, time.monotonic() - started, where, "no fault", f"{type(exc).__name__}: {exc}", done)
    finally:
        try:
            state.run.close()
        except Exception as exc:  # a broker that would not stop fails this scenario, named, not the whole batch
            keep = True  # its log, which the failure names
            outcome = Outcome(scenario.name, str(scenario.path), scenario.tier, FAILED, time.monotonic() - started, "the broker's stop", "the broker to stop", f"{type(exc).__name__}: {exc}", done)
        pool.shutdown(wait=False, cancel_futures=True)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    assert outcome is not None
    return outcome
