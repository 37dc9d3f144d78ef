"""The broker's own tables rebuilt from the keyed log: every principal ever issued, and the operator key's digest.

A principal's row is written with its ``agent.spawn`` event, ended with its
``agent.exit`` and revoked with ``memory.revoke``; its trust domain is
recomputed from the spawn events by the registry's rule (a team agent is its
own domain, a spawned child is its parent's), never read back, since the
trust policy counts witnesses by domain.  See ``store.projection`` for how
the rows are compared and ``memory.projection`` for the pattern.
"""

from __future__ import annotations

from typing import Any, Final, Iterable, final

import apsw

from store import dialect
from store.events import BROKER_ACTOR, Event
from store.projection import UNKNOWN, Check, Difference, Projection, Row, Table, Unrebuilt

PRINCIPALS_TABLE: Final = Table("principals", ("key",), (
    "role", "domain", "parent", "pid", "command", "started_at", "ended_at", "exit_code", "revoked_at", "revoked_reason",
), noun="principal")
STORE_KEYS_TABLE: Final = Table("store_keys", ("name",), ("digest", "at"), noun="store key")


def is_broker(actor: str) -> bool:
    """The broker's own actor: ``broker``, or ``HOST/broker`` on a store several brokers share."""
    return actor == BROKER_ACTOR or actor.endswith("/" + BROKER_ACTOR)


def root_domain(key: str, actor: str) -> str:
    """A team agent's trust domain: its name (the key without its session and, on a shared store, its host)."""
    agent = key.rpartition(":")[0]
    host = actor[: -len(BROKER_ACTOR)] if actor != BROKER_ACTOR else ""
    return agent[len(host):] if host and agent.startswith(host) else agent


@final
class BrokerLog:
    """Principals and the operator key's digest, as the events tell them (a ``store.projection.Projector``)."""

    kinds = frozenset({"agent.spawn", "agent.exit", "memory.revoke", "broker.operator_key_bound"})

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._seqs: dict[str, int] = {}
        self._domains: dict[str, str] = {}
        self._findings: list[Difference] = []
        self._keys: dict[str, tuple[int, str, dict[str, Any]]] = {}

    def prepare(self, conn: apsw.Connection) -> None:
        pass

    def feed(self, event: Event) -> None:
        p, key = event.payload, event.subject or ""
        if event.kind == "agent.spawn":
            root = is_broker(event.actor)
            domain = root_domain(key, event.actor) if root else self._domains.get(event.actor)
            if domain is None:
                domain = UNKNOWN  # its parent's spawn is not in the log
            elif p.get("domain") != domain:
                self._findings.append(Difference("principals", (key,), "domain", domain, str(p.get("domain")),
                                                 f"principals: event {event.seq} spawned {key} in domain {p.get('domain')!r}, but by the "
                                                 f"registry's rule (its parent's domain, or its own name) it is {domain!r}", event.seq))
            if isinstance(domain, str):
                self._domains[key] = domain
            command = p.get("command")
            self._seqs[key] = event.seq
            self._rows[key] = {
                "role": "agent", "domain": domain, "parent": None if root else event.actor, "pid": p.get("pid"),
                "command": Check(lambda found, c=command: _json_is(found, c), f"the command event {event.seq} recorded"),
                "started_at": p.get("started_at", UNKNOWN), "ended_at": None, "exit_code": None, "revoked_at": None, "revoked_reason": None,
            }
        elif event.kind == "agent.exit" and key in self._rows:
            self._rows[key].update(ended_at=event.at, exit_code=p.get("exit_code"))
        elif event.kind == "memory.revoke" and key in self._rows:
            self._rows[key].update(revoked_at=event.at, revoked_reason=p.get("reason"))
        elif event.kind == "broker.operator_key_bound":
            self._keys[event.actor] = (event.seq, event.at, p)

    def projections(self, conn: apsw.Connection) -> Iterable[Projection]:
        yield Projection(PRINCIPALS_TABLE, {(k,): Row(self._seqs[k], v) for k, v in self._rows.items()}, findings=tuple(self._findings))
        table, hosts = STORE_KEYS_TABLE, None
        if dialect.is_postgresql(conn):
            # Each host binds its own key; a broker's role sees only its own host's row (the owner sees all).
            host = conn.execute("SELECT conclave_host()").fetchone()[0]
            table = Table("store_keys", ("host", "name"), ("digest", "at"), noun="store key", where=None if host is None else f"host = '{host}'")
            hosts = host
        keys: dict[tuple[Any, ...], Row] = {}
        for actor, (seq, at, p) in self._keys.items():
            if table.key == ("name",):
                if actor != BROKER_ACTOR:
                    continue
                key: tuple[Any, ...] = ("operator",)
            else:
                actor_host = actor.split("/", 1)[0]
                if hosts is not None and actor_host != hosts:
                    continue
                key = (actor_host, "operator")
            full = p.get("sha256")
            prefix = str(p.get("sha256_prefix") or "")
            keys[key] = Row(seq, {
                "digest": full if full else Check(lambda found, pre=prefix: isinstance(found, str) and found.startswith(pre), f"a digest starting {prefix}"),
                "at": at if full else UNKNOWN,
            })
        yield Projection(table, keys, legacy=None if keys else (lambda key: "bound before the binding was an event"))

    def unrebuilt(self) -> list[Unrebuilt]:
        return []


def _json_is(found: Any, expected: Any) -> bool:
    import json

    try:
        return bool(json.loads(found) == expected)
    except (TypeError, ValueError):
        return False
