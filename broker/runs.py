"""Runs: the broker's starts on one state directory, numbered, and pruning the old ones.

A run is everything between two ``broker.start`` events; run ``N`` is the
``N``-th start recorded (so numbers never change: the event log is
append-only).  A principal belongs to the run whose start is the last one
at or before its own start.

``conclave gc`` prunes old runs: it deletes their log files (each
principal's output and the run journal) and records ``broker.gc`` with
every file it removed.  It never deletes a database row: the principals
table is identity history that claims, witnesses, revocations and
``memory verify`` refer to, and the event log is the audit trail.  A pruned
run is hidden from ``conclave agents`` (``--all`` shows it again).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any, final

import apsw
import attrs

from broker.runlog import journal_path, log_name, segments
from store import events


@final
@attrs.frozen
class Run:
    number: int
    started_at: str
    pid: int | None
    pruned: bool


def read_runs(conn: apsw.Connection) -> list[Run]:
    """Every run recorded, oldest first."""
    pruned: set[int] = set()
    for (payload,) in conn.execute("SELECT payload FROM events WHERE kind = 'broker.gc'"):
        pruned.update(json.loads(payload).get("runs", []))
    runs = []
    for number, (at, payload) in enumerate(conn.execute("SELECT at, payload FROM events WHERE kind = 'broker.start' ORDER BY seq"), start=1):
        runs.append(Run(number, at, json.loads(payload).get("pid"), number in pruned))
    return runs


def starts(conn: apsw.Connection) -> list[str]:
    """When each run started, oldest first (run ``N`` is at index ``N - 1``)."""
    return [at for (at,) in conn.execute("SELECT at FROM events WHERE kind = 'broker.start' ORDER BY seq")]


def run_at(started: list[str], at: str) -> int | None:
    """The number of the run going at time ``at`` (None: before the first)."""
    return bisect.bisect_right(started, at) or None


def run_of(runs: list[Run], started_at: str) -> int | None:
    """The number of the run a principal started at ``started_at`` belongs to."""
    i = bisect.bisect_right([r.started_at for r in runs], started_at)
    return runs[i - 1].number if i else None


def plan_prune(conn: apsw.Connection, logs: Path, *, keep: int, live: bool) -> dict[str, Any]:
    """What pruning every run but the newest ``keep`` (and the live one) removes: runs, files, bytes."""
    runs = read_runs(conn)
    protected = {r.number for r in runs[len(runs) - keep :]} if keep > 0 else set()
    if live and runs:
        protected.add(runs[-1].number)  # the running broker's own run
    doomed = sorted(r.number for r in runs if r.number not in protected and not r.pruned)
    names: list[str] = []
    if doomed:
        for agent, session, started in conn.execute("SELECT agent, session, started_at FROM principals"):
            if run_of(runs, started) in doomed:
                name = log_name(agent, session)
                # Every segment of the log (past its cap it went on in <name>.1, ...: broker.capture).
                names += [p.name for p in segments(logs, name)] or [name]
        names += [journal_path(logs, n).name for n in doomed]
    files, size = [], 0
    for name in names:
        try:
            size += (logs / name).stat().st_size
        except FileNotFoundError:
            continue
        files.append(name)
    kept = [r.number for r in runs if r.number not in doomed and not r.pruned]
    return {"runs": doomed, "kept": kept, "files": files, "bytes": size}


def record_prune(conn: apsw.Connection, plan: dict[str, Any], *, actor: str, keep: int) -> None:
    """Append ``broker.gc`` (before any file goes: the log says what was removed, and by whom)."""
    events.append(conn, "broker.gc", actor=actor, payload={"runs": plan["runs"], "files": plan["files"], "bytes": plan["bytes"], "keep": keep})


def remove_files(logs: Path, names: list[str]) -> list[str]:
    """Delete the planned files; return the ones that could not be removed (with why)."""
    failed = []
    for name in names:
        try:
            (logs / name).unlink(missing_ok=True)
        except OSError as exc:
            failed.append(f"{name}: {exc.strerror or exc}")
    return failed
