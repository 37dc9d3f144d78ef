"""The team file is trusted configuration: what the operator ran is recorded, and a change is shown.

The team file says how wide each agent's box is, what runs, with which
environment, under which trust policy and which store -- and it lives in the
work tree, which agents write.  An agent that edits it (and gets the edit
committed) would have a wider box on the next run.  So ``conclave run``
keeps, in the state directory (which no box reads or writes), the
trust-relevant content of each team file the operator ran, and refuses to
run a file whose trust-relevant content changed since, showing the
differences field by field, until the operator accepts them (``conclave team
accept TEAM`` or ``conclave run --accept-team``).  A team file run for the
first time here is recorded as it is.

Trust-relevant: everything that shapes a box, an identity, the policy or
what runs -- per agent ``command``, ``preset``, ``sandbox``, ``allow_read``,
``allow_write``, ``env``, ``cwd``, ``may_spawn``, ``restart``,
``max_restarts``, the agents themselves (added, removed), and the tables
``[policy]``, ``[memory]``, ``[store]``, ``[mail]`` and ``[[slot]]``.
Not trust-relevant: an agent's ``prompt`` (the task: text the model reads,
which gives it no power its box and the broker do not already bound -- T1's
defences judge what it does, not what it was asked) and ``description`` (a
label).  Changing those runs without asking.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Final, Iterator, final

import attrs

from broker.paths import TEAM_RECORD_NAME
from broker.team import Team

#: Where the accepted content lives, in the state directory (0600).
RECORD_NAME: Final = TEAM_RECORD_NAME
#: An ``env`` value whose name looks like this is shown as changed, never printed.
_SECRET_NAME: Final = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


@final
@attrs.frozen
class Change:
    """One trust-relevant field that differs from what the operator accepted."""

    field: str
    before: Any
    after: Any

    def describe(self) -> str:
        """One line a person reads (a secret-looking ``env`` value is never printed)."""
        shown = [_shown(self.field, v) for v in (self.before, self.after)]
        if self.before is _MISSING:
            return f"{self.field}: added, {shown[1]}"
        if self.after is _MISSING:
            return f"{self.field}: removed (was {shown[0]})"
        return f"{self.field}: {shown[0]} -> {shown[1]}"

    def to_json(self) -> dict[str, Any]:
        hide = _secret_field(self.field)
        url = self.field == "[store] url"
        value = lambda v: None if v is _MISSING else ("(secret)" if hide else _without_password(v) if url and isinstance(v, str) else v)  # noqa: E731
        return {"field": self.field, "before": value(self.before), "after": value(self.after),
                "added": self.before is _MISSING, "removed": self.after is _MISSING}  # fmt: skip


class _Missing:
    def __repr__(self) -> str:
        return "(none)"


_MISSING: Final = _Missing()


def _secret_field(field: str) -> bool:
    return ".env." in field and bool(_SECRET_NAME.search(field.rsplit(".env.", 1)[1]))


def _shown(field: str, value: Any) -> str:
    if value is _MISSING:
        return "(none)"
    if _secret_field(field):
        return "(a value not shown: its name says it is a secret)"
    if field == "[store] url" and isinstance(value, str):
        value = _without_password(value)
    if field.endswith(".sandbox") and value is None:
        return "(left out: the strongest this machine offers)"
    return json.dumps(value, sort_keys=True)


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


def trust_view(team: Team) -> dict[str, Any]:
    """The trust-relevant content of ``team``, as plain JSON values (what is recorded and compared)."""
    agents = {
        a.name: {
            "command": list(a.command), "preset": a.preset, "sandbox": a.sandbox, "allow_read": list(a.allow_read),
            "allow_write": list(a.allow_write), "env": dict(a.env), "cwd": a.cwd, "may_spawn": a.may_spawn,
            "restart": a.restart, "max_restarts": a.max_restarts,
        }
        for a in team.agents
    }  # fmt: skip
    view = {"agent": agents, "policy": team.policy, "memory": team.memory, "mail": team.mail, "store": {"url": team.store_url}, "slot": list(team.slots)}
    return json.loads(json.dumps(view, sort_keys=True, default=str))


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """Every field that differs, named the way a team file names it (``agent alice.sandbox``, ``[policy] quorum``)."""
    return list(_diff(before, after, ()))


def _diff(before: Any, after: Any, where: tuple[str, ...]) -> Iterator[Change]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            yield from _diff(before.get(key, _MISSING), after.get(key, _MISSING), (*where, str(key)))
        return
    if before != after:
        yield Change(_name(where), before, after)


def _name(where: tuple[str, ...]) -> str:
    if not where:
        return "team"
    head, *rest = where
    if head == "agent" and rest:
        return f"agent {rest[0]!r}" + "".join(f".{part}" for part in rest[1:])
    if head == "slot":
        return "[[slot]]"
    return f"[{head}]" + (" " + ".".join(rest) if rest else "")


@final
@attrs.frozen
class Verdict:
    """What ``conclave run`` may do with a team file."""

    first: bool  # never run here before: it will be recorded as it is
    changes: tuple[Change, ...]  # differences from what the operator accepted (empty: none)


def judge(team: Team, team_file: Path, state: Path) -> Verdict:
    """Compare ``team`` with what the operator last accepted for ``team_file`` in ``state``."""
    accepted = _read(state).get(_key(team_file))
    if accepted is None:
        return Verdict(first=True, changes=())
    return Verdict(first=False, changes=tuple(changes(accepted["trust"], trust_view(team))))


def accept(team: Team, team_file: Path, state: Path, *, at: str) -> None:
    """Record ``team``'s trust-relevant content as what the operator accepted for ``team_file``."""
    record = _read(state)
    record[_key(team_file)] = {"accepted_at": at, "trust": trust_view(team)}
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = state / f".{RECORD_NAME}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(temp, state / RECORD_NAME)


def _key(team_file: Path) -> str:
    return str(team_file.resolve())


def _read(state: Path) -> dict[str, Any]:
    try:
        return json.loads((state / RECORD_NAME).read_text())
    except FileNotFoundError:
        return {}
