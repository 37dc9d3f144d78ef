"""The fuzzer's hands: each operation done on the real broker and, beside it, on the model.

:class:`Fuzz` owns one :class:`~tests.fuzz.world.World` and the model of it
for a whole run.  Every public method is one step a rule of the state
machine (``tests/fuzz/machine.py``) can take: it picks the real actor, asks
the model what must happen, does it, holds the reply to the prediction
(``tests/fuzz/checks.py``), advances the model, and writes the step into the
example's scenario.  Selectors are plain integers taken modulo what exists,
so Hypothesis shrinks them toward the first choice.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tests.fuzz import checks, texts
from tests.fuzz.checks import Violation, judge, short
from tests.fuzz.model import ALL, OPERATOR, Expect, LockTable, Mail, Memory, Overlap, Policy, Principal, Registry
from tests.fuzz.scenario import ScenarioLog
from tests.fuzz.world import MEMORY, Agent, Host, StepTimeout, World, ticket_of

#: The lock universe: every pattern is made of these directories and names (model.Overlap relies on it).
LOCK_DIRS = ("", "src/", "src/sub/", "docs/", "docs/sub/")
LOCK_NAMES = ("a.py", "b.py", "c.py", "x.md", "z.txt", "README.md")
RESOURCES = (
    "src/a.py", "src/b.py", "src/sub/c.py", "docs/x.md", "README.md",
    "src/*.py", "src/**", "docs/**", "**/*.md", "src/**/c.py",
    "git", "name://deploy", "name://release",
)
CHILD_NAMES = ("k1", "k2")
FORGED_FIELDS = ("author", "witness", "sender", "from", "agent", "principal", "source_agent")
WAIT_SECONDS = 300  # a queued acquire waits this long at most; the fuzzer always ends a wait long before
GRANT_TIMEOUT = 30.0
#: A world that grew this many claims is replaced by a fresh one (every check reads the whole memory).
MAX_CLAIMS = 400
RESTARTS_BEFORE_RENEWAL = 3


@dataclass
class Pending:
    """An acquire in line: its puppet is busy until the broker answers."""

    host: str
    agent: str
    key: str
    resources: tuple[str, ...]
    shared: bool
    step: dict[str, Any]


@dataclass
class Coverage:
    rules: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: collections.Counter[str] = field(default_factory=collections.Counter)  # time spent per rule (and in checks)
    invariants: collections.Counter[str] = field(default_factory=collections.Counter)
    steps: int = 0
    examples: int = 0
    broker_starts: int = 0
    worlds: int = 0


class Fuzz:
    """A world, its model, and the steps that keep them side by side."""

    def __init__(self, make_world: Callable[[], World], *, policy: Policy, witness_kinds: bool = True) -> None:
        self.make_world = make_world
        self.base_policy = policy
        self.witness_kinds = witness_kinds
        self.overlap = Overlap(LOCK_DIRS, LOCK_NAMES)
        self.tags = texts.Tags()
        self.coverage = Coverage()
        self.world: World | None = None
        self.dirty = False  # the last example failed: the model no longer follows this world
        self.log: ScenarioLog | None = None
        #: The first failure of the campaign and the example it happened in (kept if a replay does not fail again).
        self.first_failure: tuple[ScenarioLog | None, BaseException] | None = None
        self.diagnosis = ""

    def failed(self, exc: BaseException) -> None:
        self.dirty = True
        if self.first_failure is None:
            self.first_failure = (self.log, exc)
        if self.world is not None:
            self.diagnosis = self.world.diagnose()

    def _reset_model(self, world: World) -> None:
        self.registry = Registry()
        self.memory = Memory(self.base_policy)
        self.memory.witness_kinds = self.witness_kinds
        self.locks = {name: LockTable(self.overlap) for name in world.hosts}
        self.mail = Mail()
        self.pending: dict[str, Pending] = {}
        self.exited_tickets: list[tuple[str, str, str, int]] = []  # (host, key, ticket, the host's broker starts then)
        self.last_token: dict[str, int] = {}
        self.multihost = len(world.hosts) > 1
        for host in world.hosts.values():
            for name in host.spec.agents:
                self.registry.add_team(name, host.name, may_spawn=world.may_spawn, max_restarts=world.max_restarts)

    # == the world's life ==========================================================

    def start(self) -> None:
        """A new world (fresh state, fresh brokers) and a model that knows nothing yet."""
        if self.world is not None:
            self.world.close()
        self.world = self.make_world()
        self._reset_model(self.world)
        self.world.start(self._policy_table(self.base_policy))
        self.coverage.broker_starts += len(self.world.hosts)
        self.coverage.worlds += 1
        for host in self.world.hosts.values():
            self._adopt_team(host)
        self.dirty = False

    def close(self) -> None:
        if self.world is not None:
            self.world.close()
            self.world = None

    def _policy_table(self, policy: Policy) -> dict[str, Any]:
        return {"quorum": policy.quorum, "require_blind": policy.require_blind}

    def _adopt_team(self, host: Host) -> None:
        """A broker (re)started: its team agents are new sessions; register them in the model."""
        for name in host.spec.agents:
            agent = host.agent(name)
            self._issued(self.registry.issue(agent.key, name, host.name, None))

    def _issued(self, p: Principal) -> Principal:
        if hasattr(self, "example_keys"):
            self.example_keys.append(p.key)
            if p.agent not in self.example_names:
                self.example_names.append(p.agent)
        return p

    def begin_example(self) -> ScenarioLog:
        """Normalise the world: the base policy, every team agent live, no children, no locks, nothing in line.

        After a failed example the model and the brokers disagree, so the world is made again from nothing.
        """
        self.coverage.examples += 1
        if self.world is None or self.dirty or len(self.memory.claims) > MAX_CLAIMS:
            self.start()
        # The broker waits longer before each restart of an agent (0.5 s more every time): start it afresh
        # before the waits grow (the restarts left never run out: max_restarts is far above what a run uses).
        need_restart = self.memory.policy != self.base_policy or any(
            self.registry.live_as(name, host.name) is None for host in self.world.hosts.values() for name in host.spec.agents
        ) or any(agent.attempts >= RESTARTS_BEFORE_RENEWAL for agent in self.registry.team.values())
        if need_restart:
            self._restart_all(kill=False, policy=self.base_policy)
        self.end_example_cleanup()
        agents = next(iter(self.world.hosts.values())).team()  # the scenario's agents are the world's, boxes too
        self.log = ScenarioLog(agents, self._policy_table(self.memory.policy), MEMORY)
        # What an example may name is what it made: replayed on a fresh world, it names the same things.
        self.example_keys = [p.key for p in sorted(self.registry.live(), key=lambda p: (p.host, p.agent))]
        self.example_names = sorted({p.agent for p in self.registry.live()})
        self.exited_tickets = []
        self.example_claims: list[int] = []
        for p in sorted(self.registry.live(), key=lambda p: p.agent):
            name = self.log.bind_identity(p.key)
            self.log.step(actor=p.agent, op="whoami", bind=name, _optional=True)
        return self.log

    def finish_example(self) -> None:
        """The example passed its steps: clean up, then hold the whole store to the model."""
        if self.dirty:
            return
        try:
            self.end_example_cleanup()
            self.deep_check("at the end of the example")
        except BaseException as exc:
            self.failed(exc)
            raise

    def end_example_cleanup(self) -> None:
        """Give back every lock, end every wait, end every child: the next example starts clean."""
        for _ in range(50):
            if not self.pending and not any(t.holds for t in self.locks.values()):
                break
            for table_host, table in self.locks.items():
                holders = sorted({h.principal for h in table.holds} - set(self.pending))
                for key in holders:
                    p = self.registry.principals[key]
                    mine = tuple(sorted({h.resource for h in table.holds if h.principal == key}))
                    self._release(p, mine, record=False)
            if self.pending and not any(t.holds for t in self.locks.values()):
                raise Violation("6-locks", f"waits left with nothing held: {sorted(self.pending)}")
        children = sorted((p for p in self.registry.live() if p.parent is not None), key=lambda p: -p.agent.count("/"))
        for child in children:
            if child.live:
                self._end_process(child, how="exit", code=0, record=False)

    def _restart_all(self, *, kill: bool, policy: Policy, inflight: Callable[[], Any] | None = None) -> Any:
        """Stop (or SIGKILL) every broker and start them again on the same state with ``policy``."""
        for key in list(self.pending):
            self.pending.pop(key)
        for host in self.world.hosts.values():
            if kill:
                host.kill()
            else:
                host.stop()
            self.registry.broker_stopped(host.name)
            self.locks[host.name].clear()
        self.memory.set_policy(policy)
        table = self._policy_table(policy)
        for host in self.world.hosts.values():
            host.start(table)
            self.coverage.broker_starts += 1
            self._adopt_team(host)
        return None

    # == choosing ==================================================================

    def actors(self, *, idle: bool = True, team_only: bool = False, children_only: bool = False) -> list[Principal]:
        out = [p for p in self.registry.live() if not (idle and p.key in self.pending)]
        if team_only:
            out = [p for p in out if p.parent is None]
        if children_only:
            out = [p for p in out if p.parent is not None]
        return sorted(out, key=lambda p: (p.host, p.agent))

    def pick(self, sel: int, **kw: Any) -> Principal | None:
        found = self.actors(**kw)
        return found[sel % len(found)] if found else None

    def again(self, sel: int, claim_id: int) -> int:
        """``sel`` turned into the selector of a live principal that already vouched for the claim (``sel`` if none did)."""
        actors = self.actors()
        claim = self.memory.claims.get(claim_id)
        vouched = {w.principal for w in claim.corroborations} if claim is not None else set()
        mine = [i for i, p in enumerate(actors) if p.key in vouched]
        return mine[sel % len(mine)] if mine else sel

    def agent(self, p: Principal) -> Agent:
        return self.world.hosts[p.host].agent(p.agent)

    def actor_name(self, p: Principal) -> str:
        return p.agent if not self.multihost else f"{p.host}/{p.agent}"

    def count(self, rule: str) -> None:
        self.coverage.rules[rule] += 1
        self.coverage.steps += 1

    def _call(self, p: Principal, op: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.agent(p).try_call(op, **args)

    def _operator(self, host: str | None, op: str, **args: Any) -> dict[str, Any]:
        h = self.world.hosts[host] if host else next(iter(self.world.hosts.values()))
        return h.op(op, **args)

    # == memory ====================================================================

    def remember(self, sel: int, kind: int, subject: int, predicate: int, evidence: bool) -> int | None:
        p = self.pick(sel)
        if p is None:
            return None
        self.count("remember")
        word = self.tags()
        text = texts.claim_text(word, subject, predicate)
        args: dict[str, Any] = {"kind": texts.KINDS[kind % len(texts.KINDS)], "text": text}
        if evidence:
            args["evidence"] = f"seen in run {subject * 7 + predicate}"
        reply = self._call(p, "memory.remember", args)
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), op="memory.remember", args=args)
        result = judge("remember", Expect.success(tier="unverified", author=p.key, author_domain=p.domain), reply, "3-identity")
        claim = self.memory.remember(p, result["id"], kind=args["kind"], scope="repo", text=text, tag=word)
        self.example_claims.append(claim.id)
        entry["bind"] = self.log.bind_claim(claim.id)
        self.log.expect(entry, None, {"tier": "unverified"})
        self._claim_check(claim, result, where="remember's reply")
        return claim.id

    def remember_refused(self, sel: int, which: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("remember_refused")
        text, rule = texts.REFUSED[which % len(texts.REFUSED)]
        args = {"kind": "discovery", "text": text}
        reply = self._call(p, "memory.remember", args)
        assert self.log is not None
        self.log.expect(self.log.step(actor=self.actor_name(p), op="memory.remember", args=args), frozenset({"rejected"}))
        judge("remember (refused text)", Expect.error("rejected", why=f"the prefilter's {rule} rule"), reply)
        if rule not in (reply.get("error") or {}).get("message", ""):
            raise Violation("reply", f"the refusal does not name rule {rule}: {short(reply)}")

    def revise(self, sel: int, claim_id: int, subject: int, predicate: int) -> int | None:
        p = self.pick(sel)
        if p is None:
            return None
        self.count("revise")
        old = self.memory.claims.get(claim_id)
        word = old.tag if old else self.tags()
        text = texts.claim_text(word, subject, predicate + 3)
        args = {"id": claim_id, "text": text}
        expect = self.memory.expect_revise(p, claim_id)
        reply = self._call(p, "memory.revise", args)
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), op="memory.revise", args={**args, "id": self.log.claim(claim_id)})
        result = judge(f"revise {claim_id} by {p.key}", expect, reply, "2-context")
        self.log.expect(entry, expect.errors or None, {"tier": "unverified"} if expect.ok else None)
        if result is None:
            return None
        new = self.memory.revise(p, claim_id, result["id"], text=text)
        self.example_claims.append(new.id)
        entry["bind"] = self.log.bind_claim(new.id)
        self._claim_check(new, result, where="revise's reply")
        return new.id

    def witness(self, sel: int, claim_id: int, *, dispute: bool, evidence: int = 0) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("dispute" if dispute else f"corroborate{('', '_evidence', '_other_evidence')[evidence % 3]}")
        claim = self.memory.claims.get(claim_id)
        if dispute:
            op, args = "memory.dispute", {"id": claim_id, "reason": "The numbers in it do not match the CI history."}
            matches = None
        else:
            op, args = "memory.corroborate", {"id": claim_id}
            matches = None
            if evidence % 3 and claim is not None:
                matches = evidence % 3 == 1
                args["evidence"] = texts.evidence_for(claim.text, matches)
        expect = self.memory.expect_witness(p, claim_id, dispute=dispute, evidence_matches=matches)
        reply = self._call(p, op, args)
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), op=op, args={**args, "id": self.log.claim(claim_id)})
        self.log.expect(entry, expect.errors or None, expect.fields)
        own_domain = expect.fields.get("reason_not_counted") == "author_domain"
        result = judge(f"{op} {claim_id} by {p.key}", expect, reply, "3-identity" if own_domain else "1-trust")
        if result is None:
            return
        self.memory.witness(p, claim_id, dispute=dispute, evidence_matches=matches)
        self._claim_check(self.memory.claims[claim_id], result, where=f"{op}'s reply")

    def show(self, sel: int, claim_id: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("show")
        expect = self.memory.expect_show(claim_id)
        reply = self._call(p, "memory.show", {"id": claim_id})
        assert self.log is not None
        self.log.expect(self.log.step(actor=self.actor_name(p), op="memory.show", args={"id": self.log.claim(claim_id)}),
                        expect.errors or None, expect.fields)
        result = judge(f"show {claim_id}", expect, reply)
        if result is not None:
            self._claim_check(self.memory.claims[claim_id], result, where="show")
            self.memory.shown(p, [claim_id])

    def recall(self, sel: int, claim_ids: list[int]) -> None:
        p = self.pick(sel)
        if p is None or not claim_ids:
            return
        self.count("recall")
        words = sorted({self.memory.claims[c].tag for c in claim_ids if c in self.memory.claims})
        query = " ".join(words)
        reply = self._call(p, "memory.recall", {"query": query, "limit": 50})
        assert self.log is not None
        must = set().union(*(self.memory.recall_must_find(w) for w in words))
        entry = self.log.step(actor=self.actor_name(p), op="memory.recall", args={"query": query, "limit": 50})
        result = judge(f"recall {query!r}", Expect.success(), reply)
        found = {c["id"]: c for c in result}
        for cid, got in found.items():
            model = self.memory.claims.get(cid)
            if model is None:
                continue  # a claim the model does not know (an in-flight write resolved elsewhere) is held by the deep check
            if self.memory.tier(cid) not in ("unverified", "trusted", "disputed"):
                raise Violation("2-context", f"recall returned claim {cid}, which is {self.memory.tier(cid)}")
            self._claim_check(model, got, where="recall")
        if must - set(found):
            raise Violation("reply", f"recall {query!r} missed live claim(s) {sorted(must - set(found))} carrying those words; got {sorted(found)}")
        self.memory.shown(p, found)

    def _claim_check(self, model: Any, got: dict[str, Any], *, where: str) -> None:
        """A claim's JSON against the model: its tier (1), a revision's start (2), who wrote and witnessed it and
        what counted (3), blind or informed (exposures)."""
        for invariant in ("1-trust", "3-identity", "exposures") + (("2-context",) if model.edition > 1 else ()):
            self.coverage.invariants[invariant] += 1
        checks.claim(self.memory, model, got, where=where)

    def context(self, sel: int, claim_id: int, include_unverified: bool) -> None:
        p = self.pick(sel)
        if p is None or claim_id not in self.memory.claims:
            return
        self.count("context_wide" if include_unverified else "context")
        word = self.memory.claims[claim_id].tag
        args = {"query": word, "budget": 2000, "include_unverified": include_unverified}
        reply = self._call(p, "memory.context", args)
        assert self.log is not None
        self.log.step(actor=self.actor_name(p), op="memory.context", args=args)
        result = judge(f"context {word!r}", Expect.success(), reply)
        self.coverage.invariants["2-context"] += 1
        got = {c["id"]: c for c in result.get("claims", [])}
        for cid, line in got.items():
            if cid in self.memory.claims and not self.memory.may_push(cid, include_unverified=include_unverified):
                raise Violation("2-context", f"context{' (wide)' if include_unverified else ''} pushed claim {cid}, which is {self.memory.tier(cid)}")
            if cid in self.memory.claims and line.get("tier") != self.memory.tier(cid):
                raise Violation("1-trust", f"context badges claim {cid} {line.get('tier')}; it is {self.memory.tier(cid)}")
        must = {c for c in self.memory.recall_must_find(word) if self.memory.may_push(c, include_unverified=include_unverified)}
        if must - set(got):
            raise Violation("reply", f"context {word!r} left out {sorted(must - set(got))}, which it may push; got {sorted(got)}")
        self.memory.shown(p, got)

    # -- the operator's --------------------------------------------------------------

    def curate(self, what: str, claim_id: int, host_sel: int = 0) -> None:
        self.count(what)
        host = self._host_name(host_sel)
        expect = {"promote": self.memory.expect_promote, "retire": self.memory.expect_retire, "unretire": self.memory.expect_unretire}[what](claim_id)
        args: dict[str, Any] = {"id": claim_id}
        if what != "promote":
            args["reason"] = f"the fuzzer's {what}"
        reply = self._operator(host, f"memory.{what}", **args)
        assert self.log is not None
        self.log.expect(self.log.step(op=f"memory.{what}", args={**args, "id": self.log.claim(claim_id)}), expect.errors or None, expect.fields)
        result = judge(f"{what} {claim_id}", expect, reply, "1-trust")
        if result is None:
            return
        getattr(self.memory, what)(claim_id)
        self._claim_check(self.memory.claims[claim_id], result, where=f"{what}'s reply")

    def revoke(self, sel: int, *, team_agent: bool, host_sel: int = 0) -> None:
        """The operator revokes a principal of this example: an ended one or a live child, or (``team_agent``)
        a live team agent's session -- ended for good, so the next example starts new brokers."""
        if team_agent:
            keys = [k for k in self.example_keys if self._is_live_team(k)]
        else:
            keys = [k for k in self.example_keys if not self._is_live_team(k)]
        if not keys:
            return
        key = keys[sel % len(keys)]
        target = self.registry.principals[key]
        host = self._host_name(host_sel)
        self.count("revoke_team_agent" if team_agent else "revoke_child" if target.live else "revoke_ended")
        expect = self.memory.expect_revoke(self.registry, key, host=host if self.multihost else None)
        reply = self._operator(host, "memory.revoke", target=key, reason="the fuzzer revokes it")
        assert self.log is not None
        self.log.expect(self.log.step(op="memory.revoke", args={"target": self.log.principal(key), "reason": "the fuzzer revokes it"}),
                        expect.errors or None, None)
        result = judge(f"revoke {key}", expect, reply, "1-trust")
        if result is None:
            return
        self.memory.revoke(key)
        target.revoked = True
        if target.live:
            self._after_exit(target, code=-15)

    def _is_live_team(self, key: str) -> bool:
        p = self.registry.principals[key]
        return p.live and p.parent is None

    def change_policy(self, quorum: int, require_blind: bool) -> None:
        self.count("policy_change")
        policy = Policy(quorum=quorum, require_blind=require_blind)
        self._restart_all(kill=False, policy=policy)
        assert self.log is not None
        self.log.step(action="broker-restart", policy=self._policy_table(policy))
        self._rebind_team()
        self.deep_check("after a policy change")

    def kill_broker(self, sel: int, inflight: int) -> None:
        """SIGKILL every broker (with a write in flight, maybe) and start them again on the same state."""
        self.count("broker_kill_inflight" if inflight else "broker_kill")
        sent: tuple[Principal, str, dict[str, Any]] | None = None
        if inflight:
            p = self.pick(sel)
            if p is not None:
                sent = self._send_inflight(p, inflight)
        self._restart_all(kill=True, policy=self.memory.policy)
        assert self.log is not None
        self.log.step(action="broker-restart", kill=True, note="SIGKILL, then a new broker on the same state")
        self._rebind_team()
        if sent is not None:
            self._resolve_inflight(*sent)
        self.deep_check("after a broker SIGKILL")

    def _rebind_team(self) -> None:
        assert self.log is not None
        for p in sorted(self.registry.live(), key=lambda p: p.agent):
            name = self.log.bind_identity(p.key)
            self.log.step(actor=self.actor_name(p), op="whoami", bind=name, _optional=True)

    # -- writes in flight ---------------------------------------------------------------

    def _send_inflight(self, p: Principal, what: int) -> tuple[Principal, str, dict[str, Any]]:
        if what % 2 == 1:
            word = self.tags()
            op, args = "memory.remember", {"kind": "failure", "text": texts.claim_text(word, what, what + 1)}
        else:
            op, args = "msg.send", {"to": OPERATOR, "body": f"in flight {self.tags()}"}
        self.agent(p).send_nowait({"call": op, "args": args})
        return p, op, args

    def _resolve_inflight(self, p: Principal, op: str, args: dict[str, Any]) -> None:
        """A write whose caller died: it is there whole, or not at all -- either way, the model learns which."""
        if op == "memory.remember":
            known = set(self.memory.claims)
            extra = [c for c in self._export_claims() if c["id"] not in known]
            if not extra:
                return
            if len(extra) != 1 or extra[0]["text"] != args["text"] or extra[0]["author"] != p.key:
                raise Violation("5-durability", f"after the kill the store holds claims nobody asked for: {short(extra)}")
            got = extra[0]
            word = args["text"].split("(")[1].split()[0]
            claim = self.memory.remember(p, got["id"], kind=args["kind"], scope="repo", text=args["text"], tag=word)
            self._claim_check(claim, got, where="a claim written as its broker was killed")
        else:
            known_m = set(self.mail.messages)
            extra_m = [m for m in self._export_messages() if m["id"] not in known_m]
            if not extra_m:
                return
            if len(extra_m) != 1 or extra_m[0]["body"] != args["body"] or extra_m[0]["sender"] != p.key:
                raise Violation("5-durability", f"after the kill the store holds mail nobody sent: {short(extra_m)}")
            m = extra_m[0]
            self.mail.send(m["id"], m["thread"], p.key, p.mailbox, m["to"], m["recipients"])
            self._check_deliveries(m)

    # == agents' lives ==============================================================

    def spawn(self, sel: int, child: int) -> None:
        p = self.pick(sel)
        if p is None or p.agent.count("/") >= 2:
            return
        self.count("spawn")
        name = CHILD_NAMES[child % len(CHILD_NAMES)]
        expect = self.registry.spawn(p, name)
        host = self.world.hosts[p.host]
        reply = self._call(p, "spawn", {"name": name, "command": host.spawn_command()})
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), action="spawn", name=name)
        if expect.errors:
            entry["expect_error"] = next(iter(expect.errors))
        result = judge(f"spawn {name} by {p.key}", Expect(errors=expect.errors, fields={"domain": p.domain, "parent": p.key} if expect.ok else {}), reply, "3-identity")
        if result is None:
            return
        agent = host.agent(f"{p.agent}/{name}")
        child_p = self._issued(self.registry.issue(agent.key, f"{p.agent}/{name}", p.host, p.key))
        entry["bind"] = self.log.bind_identity(child_p.key)

    def end(self, sel: int, how: str) -> None:
        """A principal's process ends: ``exit`` (a child, code 0), ``restart`` (a team agent, code 1), ``kill`` (SIGKILL, maybe mid-call)."""
        if how == "exit":
            p = self.pick(sel, children_only=True)
        elif how == "restart":
            p = self.pick(sel, team_only=True)
        else:
            p = self.pick(sel, idle=False)
        if p is None:
            return
        self.count(f"{how}{'_waiting' if p.key in self.pending else ''}{'_child' if how == 'kill' and p.parent else ''}")
        self._end_process(p, how=how, code={"exit": 0, "restart": 1, "kill": -9}[how])

    def kill_during(self, sel: int, what: int) -> None:
        """SIGKILL an agent right after it sent a write, before the answer: the write is whole or absent."""
        p = self.pick(sel)
        if p is None:
            return
        self.count("kill_mid_call")
        sent = self._send_inflight(p, what)
        assert self.log is not None
        self.log.step(actor=self.actor_name(p), action="kill-during", op=sent[1], args=sent[2],
                      note="the write may or may not have reached the broker; it must be whole or absent")
        self._end_process(p, how="kill", code=-9, record=False)
        self._resolve_inflight(*sent)

    def _end_process(self, p: Principal, *, how: str, code: int, record: bool = True) -> None:
        agent = self.agent(p)
        tickets_pid = self.world.hosts[p.host].live_pids().get(p.key)
        if tickets_pid:
            try:
                self.exited_tickets.append((p.host, p.key, ticket_of(tickets_pid), self.world.hosts[p.host].starts))
            except (OSError, LookupError):
                pass
        if how == "kill":
            if tickets_pid is None:
                raise Violation("reply", f"{p.key} is live in the model but the broker lists no process for it")
            os.kill(tickets_pid, signal.SIGKILL)
        else:
            agent.exit(code)
        self.world.hosts[p.host].forget(p.agent)
        if record and self.log is not None:
            self.log.step(actor=self.actor_name(p), action=how, **({"code": code} if how == "exit" else {}))
        self._after_exit(p, code=code)

    def _after_exit(self, p: Principal, *, code: int) -> None:
        """The broker ends ``p``: wait until it says so, release what it held, restart it if the rules say so."""
        host = self.world.hosts[p.host]
        waiting = self.pending.pop(p.key, None)
        others = [q for q in self.registry.live(p.host) if q.key != p.key]
        if not others and (p.parent is not None or p.revoked or code == 0):
            # `conclave run` ends when every agent has exited (DESIGN.md): the broker goes, and the
            # fuzzer starts it again on the same state, as a person would.
            self._broker_ended_by_itself(host)
            return
        deadline = time.monotonic() + 30
        while p.key in host.live_keys():
            if time.monotonic() > deadline:
                raise StepTimeout(f"{p.key} still live 30 s after its process ended")
            time.sleep(0.02)
        restarts = self.registry.ended(p, code=code)
        host.forget(p.agent)
        self.locks[p.host].ended(p.key)
        self._grants(p.host)
        if restarts:
            agent = self._new_session(host, p)
            new = self._issued(self.registry.issue(agent.key, p.agent, p.host, None))
            if self.log is not None:  # the new session, named in case a later step revokes it
                self.log.step(actor=self.actor_name(new), op="whoami", bind=self.log.bind_identity(new.key), _optional=True)

    def _broker_ended_by_itself(self, host: Host) -> None:
        assert host.run is not None and host.run.process is not None
        try:
            host.run.process.wait(timeout=60)
        except Exception as exc:  # noqa: BLE001
            raise Violation("reply", f"{host.name}'s broker kept running with no agent left: {exc}") from None
        host.stop()
        self.registry.broker_stopped(host.name)
        self.locks[host.name].clear()
        self.pending = {k: v for k, v in self.pending.items() if v.host != host.name}
        host.start(self._policy_table(self.memory.policy))
        self.coverage.broker_starts += 1
        self._adopt_team(host)
        self._rebind_team()

    def _new_session(self, host: Host, old: Principal) -> Agent:
        deadline = time.monotonic() + 60
        while True:
            host.forget(old.agent)
            try:
                agent = host.agent(old.agent, timeout=max(0.5, deadline - time.monotonic()))
            except TimeoutError as exc:
                raise StepTimeout(f"{old.agent} did not come back after its restart") from exc
            if agent.key != old.key:
                return agent
            if time.monotonic() > deadline:
                raise StepTimeout(f"{old.agent} did not come back after its restart")
            time.sleep(0.05)

    # == locks =====================================================================

    def acquire(self, sel: int, mask: int, shared: bool, wait: bool) -> None:
        p = self.pick(sel)
        if p is None:
            return
        resources = _subset(RESOURCES, mask)
        if self.multihost:
            # name:// resources are one lock across hosts (locks/shared.py: advisory locks); the model keeps one
            # table per host, so two brokers fuzz paths, globs and git (each host's own) and not named resources.
            resources = tuple(r for r in resources if "://" not in r) or ("git",)
        table = self.locks[p.host]
        expect = table.expect_acquire(p.key, resources, shared=shared, wait=wait)
        self.count(f"acquire_{'wait' if wait else 'fast'}{'_queued' if expect.ok and not expect.fields.get('granted') else ''}")
        args: dict[str, Any] = {"resources": list(resources), "shared": shared}
        if wait:
            args["wait"] = WAIT_SECONDS
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), op="lock.acquire", args=args)
        if expect.ok and not expect.fields["granted"]:
            self.agent(p).send_nowait({"call": "lock.acquire", "args": args})
            entry["background"] = True
            self.pending[p.key] = Pending(p.host, p.agent, p.key, resources, shared, entry)
            table.enqueue(p.key, resources, shared)
            self._until_queued(p)
            return
        reply = self._call(p, "lock.acquire", args)
        self.log.expect(entry, expect.errors or None, None)
        result = judge(f"acquire {list(resources)} by {p.key}", Expect(errors=expect.errors), reply, "6-locks")
        if result is None:
            return
        tokens = self._tokens(p, resources, shared, result)
        table.grant(p.key, resources, shared, tokens)

    def _until_queued(self, p: Principal) -> None:
        """Wait until the broker has the request in line (or answered it): the next step must see the line."""
        host = self.world.hosts[p.host]
        deadline = time.monotonic() + GRANT_TIMEOUT
        while time.monotonic() < deadline:
            listing = host.op("lock.list")
            if any(w.get("waiter") == p.key for w in listing.get("result", {}).get("waiting", [])):
                return
            if self.agent(p).reply_ready():
                reply = self.agent(p).receive(5)
                self.pending.pop(p.key, None)
                raise Violation("6-locks", f"{p.key}'s acquire should wait in line; it was answered at once: {short(reply)}")
            time.sleep(0.01)
        raise StepTimeout(f"{p.key}'s waiting acquire never showed in the line")

    def _tokens(self, p: Principal, resources: tuple[str, ...], shared: bool, result: dict[str, Any]) -> list[int]:
        grants = result.get("grants", [])
        if [g.get("resource") for g in grants] != list(resources):
            raise Violation("6-locks", f"{p.key} asked for {list(resources)}; granted {short(grants)}")
        mode = "shared" if shared else "exclusive"
        tokens = []
        for g in grants:
            if g.get("mode") != mode:
                raise Violation("6-locks", f"{g.get('resource')} granted {g.get('mode')}, asked {mode}")
            # A cross-host resource's tokens come from one sequence of its own; the rest from the host's own block
            # (locks/shared.py): git is a host's own (its checkout, its index), not a cross-host resource.
            sequence = g["resource"] if self.multihost and "://" in g["resource"] else p.host
            token = int(g["token"])
            last = self.last_token.get(sequence, 0)
            if token <= last:
                raise Violation("6-locks", f"fencing token {token} for {g['resource']} is not above the last one issued ({last})")
            self.last_token[sequence] = token
            tokens.append(token)
        return tokens

    def _grants(self, host_name: str) -> None:
        """After anything was given back: the requests the rules grant now get their answers, in order."""
        table = self.locks[host_name]
        for request in table.reconsider():
            pending = self.pending.pop(request.principal)
            p = self.registry.principals[request.principal]
            try:
                reply = self.agent(p).receive(GRANT_TIMEOUT)
            except StepTimeout as exc:
                raise Violation("6-locks", f"{p.key} should have been granted {list(request.resources)} once it was free: {exc}") from None
            result = judge(f"{p.key}'s waiting acquire", Expect.success(), reply, "6-locks")
            tokens = self._tokens(p, request.resources, request.shared, result)
            for hold in table.holds:
                if hold.principal == p.key and hold.token == -1:
                    hold.token = tokens[request.resources.index(hold.resource)]
            assert pending.step is not None

    def stray_grants(self) -> None:
        """No request still in line may have been answered (a grant the rules do not allow yet)."""
        for key, pending in list(self.pending.items()):
            p = self.registry.principals[key]
            if self.agent(p).reply_ready():
                reply = self.agent(p).receive(5)
                self.pending.pop(key)
                raise Violation("6-locks", f"{key}'s acquire of {list(pending.resources)} was answered while the rules keep it in line: {short(reply)}")

    def release(self, sel: int, mask: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        table = self.locks[p.host]
        mine = sorted({h.resource for h in table.holds if h.principal == p.key})
        if mine and mask % 4:
            resources = tuple(r for i, r in enumerate(mine) if (mask >> 2) & (1 << i)) or tuple(mine)
        else:
            resources = _subset(RESOURCES, mask)
        self.count("release" if set(resources) <= set(mine) else "release_not_mine")
        self._release(p, resources, record=True)

    def _release(self, p: Principal, resources: tuple[str, ...], *, record: bool) -> None:
        table = self.locks[p.host]
        expect = table.expect_release(p.key, resources)
        reply = self._call(p, "lock.release", {"resources": list(resources)})
        if record:
            assert self.log is not None
            self.log.expect(self.log.step(actor=self.actor_name(p), op="lock.release", args={"resources": list(resources)}), expect.errors or None, None)
        result = judge(f"release {list(resources)} by {p.key}", Expect(errors=expect.errors), reply, "6-locks")
        if result is None:
            return
        table.release(p.key, resources)
        self._grants(p.host)

    def force_release(self, which: int, host_sel: int = 0) -> None:
        host = self._host_name(host_sel)
        table = self.locks[host]
        held = sorted({h.resource for h in table.holds})
        resource = held[which % len(held)] if held and which % 3 else RESOURCES[which % len(RESOURCES)]
        self.count("force_release")
        expect = table.expect_force_release(resource)
        reply = self._operator(host, "lock.force_release", resource=resource, reason="the fuzzer's operator")
        assert self.log is not None
        self.log.expect(self.log.step(op="lock.force_release", args={"resource": resource, "reason": "the fuzzer's operator"}), expect.errors or None, None)
        if judge(f"force-release {resource}", expect, reply, "6-locks") is None:
            return
        table.force_release(resource)
        self._grants(host)

    # == mail ======================================================================

    def _recipient(self, sel: int, sender: Principal | None) -> str:
        names = [*self.example_names, ALL, OPERATOR, "nobody-here"]
        return names[sel % len(names)]

    def send(self, sel: int, to_sel: int, thread_of: int | None = None) -> int | None:
        p = self.pick(sel)
        if p is None:
            return None
        to = self._recipient(to_sel, p)
        thread = self.mail.messages[thread_of].thread if thread_of in self.mail.messages else None
        self.count("reply" if thread else f"send_{'all' if to == ALL else 'operator' if to == OPERATOR else 'unknown' if to == 'nobody-here' else 'agent'}")
        expect = self.mail.expect_send(self.registry, p, to, host=p.host, thread=thread)
        body = f"note {self.tags()} about the build"
        args: dict[str, Any] = {"to": to, "body": body}
        if thread:
            args["thread"] = thread
        reply = self._call(p, "msg.send", args)
        assert self.log is not None
        entry = self.log.step(actor=self.actor_name(p), op="msg.send",
                              args={**args, **({"thread": self.log.message(thread_of, "thread")} if thread else {})})
        self.log.expect(entry, expect.errors or None, {"recipients": expect.fields.get("recipients")} if expect.ok else None)
        result = judge(f"send to {to} by {p.key}", expect, reply, "7-mail")
        if result is None:
            return None
        if result.get("sender") != p.key:
            raise Violation("7-mail", f"a message sent by {p.key} names {result.get('sender')} as its sender")
        if thread and result.get("thread") != thread:
            raise Violation("7-mail", f"a reply in {thread} went to thread {result.get('thread')}")
        self.mail.send(result["id"], result["thread"], p.key, p.mailbox, to, result["recipients"])
        entry["bind"] = self.log.bind_message(result["id"])
        return result["id"]

    def operator_send(self, to_sel: int, host_sel: int = 0) -> int | None:
        host = self._host_name(host_sel)
        to = self._recipient(to_sel, None)
        self.count("operator_send")
        expect = self.mail.expect_send(self.registry, None, to, host=host, thread=None)
        args = {"to": to, "body": f"operator note {self.tags()}"}
        reply = self._operator(host, "msg.send", **args)
        assert self.log is not None
        entry = self.log.step(op="msg.send", args=args)
        self.log.expect(entry, expect.errors or None, {"recipients": expect.fields.get("recipients")} if expect.ok else None)
        result = judge(f"operator sends to {to}", expect, reply, "7-mail")
        if result is None:
            return None
        operator_key = result.get("sender", "")
        if not operator_key.split("/")[-1].startswith(OPERATOR + ":"):
            raise Violation("7-mail", f"the operator's message names {operator_key} as its sender")
        self.mail.send(result["id"], result["thread"], operator_key, OPERATOR, to, result["recipients"])
        entry["bind"] = self.log.bind_message(result["id"])
        return result["id"]

    def inbox(self, sel: int, ack_some: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("inbox")
        want = self.mail.inbox(p.mailbox)
        reply = self._call(p, "msg.inbox", {})
        assert self.log is not None
        self.log.step(actor=self.actor_name(p), op="msg.inbox", args={})
        result = judge(f"inbox of {p.key}", Expect.success(), reply, "7-mail")
        got = [m["id"] for m in result]
        for m in result:
            model = self.mail.messages.get(m["id"])
            if model is None or p.mailbox not in model.recipients:
                raise Violation("7-mail", f"{p.key}'s inbox shows message {m['id']}, which was not delivered to {p.mailbox}: {short(m)}")
            if m.get("sender") != model.sender:
                raise Violation("7-mail", f"message {m['id']} reads as from {m.get('sender')}; {model.sender} sent it")
            if bool(m.get("read")) != (p.mailbox in model.read):
                raise Violation("7-mail", f"message {m['id']} in {p.mailbox}'s inbox says read={m.get('read')}")
        if got != [m.id for m in want]:
            raise Violation("7-mail", f"{p.mailbox}'s inbox lists {got}; the rules say {[m.id for m in want]} (unacknowledged, oldest first)")
        self.mail.mark_read(p.mailbox, got)
        if ack_some and got:
            self.ack(p, [i for n, i in enumerate(got) if (ack_some >> (n % 8)) & 1] or got[:1])

    def ack_foreign(self, sel: int, message_id: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("ack_any")
        self.ack(p, [message_id])

    def ack(self, p: Principal, ids: list[int]) -> None:
        expect = self.mail.expect_ack(p.mailbox, ids)
        reply = self._call(p, "msg.ack", {"ids": ids})
        assert self.log is not None
        self.log.expect(self.log.step(actor=self.actor_name(p), op="msg.ack", args={"ids": [self.log.message(i) for i in ids]}), expect.errors or None, None)
        result = judge(f"ack {ids} by {p.key}", expect, reply, "7-mail")
        if result is not None:
            self.mail.ack(p.mailbox, ids)

    def read_thread(self, sel: int, message_id: int) -> None:
        p = self.pick(sel)
        message = self.mail.messages.get(message_id)
        if p is None or message is None:
            return
        self.count("thread")
        expect = self.mail.expect_thread(p.mailbox, message.thread)
        reply = self._call(p, "msg.thread", {"thread": message.thread})
        assert self.log is not None
        self.log.expect(self.log.step(actor=self.actor_name(p), op="msg.thread", args={"thread": self.log.message(message_id, "thread")}),
                        expect.errors or None, None)
        result = judge(f"thread {message.thread} read by {p.key}", Expect(errors=expect.errors), reply, "7-mail")
        if result is None:
            return
        ids = [m["id"] for m in result]
        if ids != expect.fields["ids"]:
            raise Violation("7-mail", f"{p.mailbox} reads thread {message.thread} as {ids}; it may see exactly {expect.fields['ids']}")

    # == attacks on identity ===========================================================

    def forge(self, sel: int, op: int, name: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("forged_field")
        victim = self.example_keys[name % len(self.example_keys)]
        field_name = FORGED_FIELDS[name % len(FORGED_FIELDS)]
        ops = [
            ("memory.remember", {"kind": "discovery", "text": texts.claim_text(self.tags(), op, name)}),
            ("msg.send", {"to": OPERATOR, "body": "forged"}),
            ("memory.corroborate", {"id": max(self.memory.claims, default=1)}),
            ("lock.acquire", {"resources": ["name://deploy"]}),
        ]
        which, args = ops[op % len(ops)]
        line = json.dumps({"id": 1, "op": which, "args": {**args, field_name: victim}})
        reply = self.agent(p).raw(line + "\n")
        assert self.log is not None
        self.log.step(actor=self.actor_name(p), action="raw", line=line, expect_error="identity_field")
        judge(f"{which} with an extra field {field_name!r}", Expect.error("identity_field"), reply, "3-identity")

    def steal(self, sel: int, victim_sel: int) -> None:
        thief = self.pick(sel)
        others = [v for v in self.actors(idle=False) if thief is not None and v.key != thief.key and v.host == thief.host]
        if thief is None or not others:
            return
        victim = others[victim_sel % len(others)]
        self.count("stolen_ticket")
        host = self.world.hosts[thief.host]
        pid = host.live_pids().get(victim.key)
        if pid is None:
            return
        control, reply = host.stolen_ticket_probe(thief.agent, pid, "whoami", {})
        assert self.log is not None
        self.log.step(actor=self.actor_name(thief), action="steal-ticket", **{"from": self.actor_name(victim)}, op="whoami", expect_error="auth_failed")
        judge(f"{thief.key}'s probe with its own ticket (the control)", Expect.success(agent=thief.agent), control)
        judge(f"{thief.key} presents {victim.key}'s ticket", Expect.error("auth_failed"), reply, "3-identity")

    def replay(self, which: int) -> None:
        if not self.exited_tickets:
            return
        host_name, key, ticket, starts = self.exited_tickets[which % len(self.exited_tickets)]
        self.count("replayed_ticket")
        host = self.world.hosts[host_name]
        reply = host.outsider_with(ticket, "whoami", {})
        # docs/PROTOCOL.md: `revoked` -- the ticket belongs to an agent that has exited or been revoked.  A broker
        # keeps the tickets it revoked in memory: after a restart one from the run before is unknown (`auth_failed`).
        expect = Expect.error("revoked") if host.starts == starts else Expect.error("revoked", "auth_failed")
        judge(f"a ticket of ended {key} replayed", expect, reply, "3-identity")

    def drop_ticket(self, sel: int) -> None:
        p = self.pick(sel)
        if p is None:
            return
        self.count("dropped_ticket")
        control, reply = self.world.hosts[p.host].dropped_ticket_probe(p.agent, "whoami", {})
        assert self.log is not None
        self.log.step(actor=self.actor_name(p), action="drop-ticket", op="whoami", expect_error="auth_failed")
        judge(f"{p.key}'s probe with its ticket (the control)", Expect.success(agent=p.agent), control)
        judge(f"{p.key} without its ticket, as the operator", Expect.error("auth_failed"), reply, "3-identity")

    # == checks over the whole world ======================================================

    def _host_name(self, sel: int) -> str:
        names = sorted(self.world.hosts)
        return names[sel % len(names)]

    def _export_claims(self) -> list[dict[str, Any]]:
        out, after = [], 0
        while True:
            reply = self._operator(None, "memory.export", after=after)
            page = judge("memory.export", Expect.success(), reply)
            out += page["claims"]
            if page.get("next") is None:
                return out
            after = page["next"]

    def _export_messages(self) -> list[dict[str, Any]]:
        out, after = [], 0
        while True:
            page = judge("msg.export", Expect.success(), self._operator(None, "msg.export", after=after))
            out += page["messages"]
            if page.get("next") is None:
                return out
            after = page["next"]

    def light_check(self) -> None:
        """After every step: every claim's tier and tally, the lock tables, stray grants."""
        self.coverage.invariants["1-trust"] += 1
        tiers: dict[int, dict[str, Any]] = {}
        before = None
        while True:
            args: dict[str, Any] = {"include_retired": True, "limit": 1000}
            if before is not None:
                args["before"] = before
            page = judge("memory.list", Expect.success(), self._operator(None, "memory.list", **args))
            for row in page:
                tiers[row["id"]] = row
            if len(page) < 1000:
                break
            before = page[-1]["id"]
        for cid, model in self.memory.claims.items():
            row = tiers.get(cid)
            if row is None:
                raise Violation("5-durability", f"claim {cid} is gone from memory.list")
            standing = self.memory.standing(model)
            if row["tier"] != standing.tier:
                raise Violation("1-trust", f"claim {cid} is {row['tier']}; the rules say {standing.tier} ({checks._why(self.memory, model)})")
            counted = sum(v.counted for v in standing.corroborations.values())
            if row["witnesses"] != {"total": len(model.corroborations), "counted": counted}:
                raise Violation("1-trust", f"claim {cid} tallies {row['witnesses']}; the rules say {len(model.corroborations)} recorded, {counted} counted")
        unknown = set(tiers) - set(self.memory.claims)
        if unknown:
            raise Violation("3-identity", f"claims nobody remembered appeared: {sorted(unknown)}")
        self.stray_grants()
        if any(t.holds or t.line for t in self.locks.values()) or self.coverage.steps % 5 == 0:
            self.check_locks()

    def check_locks(self) -> None:
        self.coverage.invariants["6-locks"] += 1
        for name, host in self.world.hosts.items():
            listing = judge("lock.list", Expect.success(), host.op("lock.list"), "6-locks")
            table = self.locks[name]
            got = sorted((h["holder"], h["resource"], h["mode"]) for h in listing["holdings"])
            want = sorted((h.principal, h.resource, "shared" if h.shared else "exclusive") for h in table.holds)
            if got != want:
                live = host.live_keys()
                dead = [g for g in got if g[0] not in live]
                if dead:
                    # The broker ends a principal before it gives back its locks: allow that moment, then insist.
                    time.sleep(0.5)
                    listing = judge("lock.list", Expect.success(), host.op("lock.list"), "6-locks")
                    got = sorted((h["holder"], h["resource"], h["mode"]) for h in listing["holdings"])
                if got != want:
                    raise Violation("6-locks", f"{name}'s lock table holds {got}; the rules say {want}")
            for a in listing["holdings"]:
                for b in listing["holdings"]:
                    if a is not b and a["holder"] != b["holder"] and self.overlap(a["resource"], b["resource"]) and "exclusive" in (a["mode"], b["mode"]):
                        raise Violation("6-locks", f"{a['holder']} holds {a['resource']} ({a['mode']}) while {b['holder']} holds {b['resource']} ({b['mode']})")
            waiting = [w["waiter"] for w in listing["waiting"]]
            if waiting != [q.principal for q in table.line]:
                raise Violation("6-locks", f"{name}'s line is {waiting}; the rules say {[q.principal for q in table.line]}")

    def deep_check(self, why: str) -> None:
        """Everything the store holds against the model: every claim and witness, every message, verify."""
        self.coverage.invariants["5-durability"] += 1
        claims = {c["id"]: c for c in self._export_claims()}
        missing = set(self.memory.claims) - set(claims)
        if missing:
            raise Violation("5-durability", f"{why}: acknowledged claims missing: {sorted(missing)}")
        extra = set(claims) - set(self.memory.claims)
        if extra:
            raise Violation("3-identity", f"{why}: claims nobody remembered: {sorted(extra)}")
        for cid, model in self.memory.claims.items():
            self._claim_check(model, claims[cid], where=why)
        self.coverage.invariants["7-mail"] += 1
        messages = {m["id"]: m for m in self._export_messages()}
        if set(messages) != set(self.mail.messages):
            raise Violation("5-durability", f"{why}: messages {sorted(set(self.mail.messages) - set(messages))} lost, "
                                            f"{sorted(set(messages) - set(self.mail.messages))} never sent")
        for m in messages.values():
            self._check_deliveries(m)
        self.check_locks()
        self.verify(why)

    def _check_deliveries(self, m: dict[str, Any]) -> None:
        model = self.mail.messages[m["id"]]
        if m.get("sender") != model.sender:
            raise Violation("7-mail", f"message {m['id']} names {m.get('sender')} as sender; {model.sender} sent it")
        boxes = {d["mailbox"]: d for d in m.get("deliveries", [])}
        if set(boxes) != set(model.recipients):
            raise Violation("7-mail", f"message {m['id']} delivered to {sorted(boxes)}; addressed to {sorted(model.recipients)}")
        for box, d in boxes.items():
            if (d.get("acked_at") is not None) != (box in model.acked) or (d.get("read_at") is not None) != (box in model.read):
                raise Violation("7-mail", f"message {m['id']} in {box}: read {d.get('read_at')}, acked {d.get('acked_at')}; "
                                          f"the model says read {box in model.read}, acked {box in model.acked}")

    def verify(self, why: str) -> None:
        self.coverage.invariants["4-verify"] += 1
        for host in self.world.hosts.values():
            report = judge("memory.verify", Expect.success(), host.op("memory.verify"), "4-verify")
            if not report.get("ok"):
                raise Violation("4-verify", f"{why}: memory verify on {host.name} found {short(report.get('problems'), 800)}")


def _subset(items: tuple[str, ...], mask: int) -> tuple[str, ...]:
    """One to three items chosen by ``mask``'s bits (never empty)."""
    picked = [items[(mask >> (4 * i)) % len(items)] for i in range(1 + (mask >> 20) % 3)]
    return tuple(dict.fromkeys(picked))
