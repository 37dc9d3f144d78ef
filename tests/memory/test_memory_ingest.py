"""``conclave memory ingest FILE.md...``: the facts of Markdown notes as unverified claims, through a real
broker on both backends.  The attack: an ingested note must never count as anyone's witness -- not as a
word-for-word twin, not as a rediscovery found by meaning -- beside the control where an agent's does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run
from tests.memory.memory_support import BACKENDS, started_run

INCIDENT = """\
---
title: Incident 42
---
# Incident 42: deploys failing on staging

## Symptoms

- Deploys to staging failed with a decode error in the settings reader.
- Only hosts with latin-1 settings files were affected.

## Root cause

The settings reader accepts UTF-8 only and rejects every other encoding.

## Fix

Converting the staging settings files to UTF-8 made the deploys pass again.

```bash
iconv -f latin1 -t utf-8 app.conf > app.conf.new
```

| host | status |
| --- | --- |
| web-1 | fixed |

## Follow-ups

- [ ] add an encoding check to CI
- Always run iconv before deploying.
- ok
- Only hosts with latin-1 settings files were affected.
"""


@pytest.fixture(scope="module", params=BACKENDS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from started_run(request, tmp_path_factory.mktemp(f"ingest-{request.param}"), ["alice", "bob"])


def ingest(run: Run, *args: str) -> Any:
    return run.cli("memory", "ingest", *args, "--json")


def ingested(run: Run, *args: str) -> dict[str, Any]:
    done = ingest(run, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def staged(run: Run, *names: str, apply: bool = False) -> dict[str, Any]:
    """What ``conclave memory ingest NAMES... [--yes]`` sends (each file's name and UTF-8 text) and gets back, on the
    operator's connection without a new interpreter; the command itself is held in the first test (its plan, its human form) and its usage errors."""
    files = [{"name": name, "text": Path(name).read_text(encoding="utf-8")} for name in names]
    return run.op("memory.ingest", files=files, kind="discovery", scope="repo", apply=apply)


def test_ingest_is_a_dry_run_that_shows_what_it_would_store_and_refuse_then_stores_with_yes(run, tmp_path):
    twin = run.puppet("alice").call("memory.remember", kind="discovery", text="The settings reader accepts UTF-8 only and rejects every other encoding.")["id"]
    note = tmp_path / "incident-42.md"
    note.write_text(INCIDENT)
    name = str(note)
    before = run.op("memory.stats")

    plan = ingested(run, name)
    assert plan["dry_run"] is True
    assert [(e["line"], e["kind"], e["text"]) for e in plan["store"]] == [
        (8, "failure", "Deploys to staging failed with a decode error in the settings reader."),
        (9, "failure", "Only hosts with latin-1 settings files were affected."),
        (17, "solution", "Converting the staging settings files to UTF-8 made the deploys pass again."),
    ]
    assert all(e["provenance"] == f"ingest:{name}" and e["scope"] == "repo" for e in plan["store"])
    reasons = {e["line"]: e["reason"] for e in plan["refused"]}
    assert reasons[1] == "front matter"
    assert reasons[13] == f"a duplicate of claim {twin} (unverified): the same words"
    assert "code block" in reasons[19] and reasons[23] == "a table" and 24 not in reasons and "task-list item" in reasons[29]
    assert reasons[30] == "refused by the prefilter (directive)"
    assert "too short" in reasons[31]
    assert reasons[32] == f"a duplicate of {name} line 9 in this ingest"
    after = run.op("memory.stats")
    assert (after["claims"], after["events"]) == (before["claims"], before["events"])  # a dry run stores nothing
    human = run.cli("memory", "ingest", name)
    assert human.returncode == 0 and "dry run: nothing stored" in human.stdout and "refused by the prefilter (directive)" in human.stdout

    done = staged(run, name, apply=True)
    assert done["dry_run"] is False and len(done["store"]) == 3
    for entry in done["store"]:
        claim = run.op("memory.show", id=entry["id"])
        assert claim["tier"] == "unverified" and claim["evidence"] == f"ingest:{name}" and claim["kind"] == entry["kind"]
        assert claim["author"].split("/")[-1].startswith("operator:")
    assert run.op("memory.show", id=twin)["corroborations"] == []  # the duplicate vouched for nothing
    (event,) = run.op("memory.log", kind="memory.ingest")
    assert event["detail"]["stored"] == [e["id"] for e in done["store"]] and event["actor"].split("/")[-1].startswith("operator:")
    assert run.op("memory.verify")["problems"] == []  # every stored claim matches its event
    # Ingesting the same file again stores nothing: every fact is now a duplicate.
    again = staged(run, name)
    assert again["store"] == [] and sum("a duplicate of claim" in e["reason"] for e in again["refused"]) == 5


def test_an_ingested_twin_of_a_claim_is_never_its_witness(run, tmp_path):
    """The attack: alice's unverified claim gets ingested word for word (or reworded) from an operator's notes,
    hoping the copy counts as an independent finding.  It is refused as a duplicate or stored as a claim of
    its own -- never a corroboration."""
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text="The nightly export job writes its archive under /srv/exports.")["id"]
    note = tmp_path / "notes.md"
    note.write_text("- The nightly export job writes its archive under /srv/exports.\n- Export archives under /srv/exports come from the nightly job.\n")
    done = staged(run, str(note), apply=True)
    assert [e["text"] for e in done["store"]] == ["Export archives under /srv/exports come from the nightly job."]
    assert "a duplicate of claim" in done["refused"][0]["reason"]
    shown = run.op("memory.show", id=claim)
    assert shown["tier"] == "unverified" and shown["corroborations"] == []
    # Control: a witness from another domain, on the same claim, does count.
    run.puppet("bob").call("memory.show", id=claim)
    assert run.puppet("bob").call("memory.corroborate", id=claim)["counted"] is True


def test_an_agent_cannot_ingest(run, tmp_path):
    refused = run.puppet("alice").try_call("memory.ingest", files=[{"name": "x.md", "text": "The cache warms in ninety seconds after a deploy."}], apply=True)
    assert refused["error"]["code"] == "forbidden", refused
    note = tmp_path / "x.md"
    note.write_text("The cache warms in ninety seconds after a deploy.\n")
    assert staged(run, str(note))["store"][0]["text"] == "The cache warms in ninety seconds after a deploy."  # control


def test_unreadable_files_are_usage_errors(run, tmp_path):
    missing = run.cli("memory", "ingest", str(tmp_path / "nope.md"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    latin = tmp_path / "latin.md"
    latin.write_bytes("caf\xe9 notes".encode("latin-1"))
    bad = run.cli("memory", "ingest", str(latin), "--json")
    assert bad.returncode == 2 and "is not UTF-8 text" in json.loads(bad.stderr)["error"]["message"]


# -- by meaning: an ingested restatement is linked, never a rediscovery ------------------------------

FOUND = "The integration tests time out because the mock server starts after the first request."
RESTATED = "Integration tests hit a timeout since the mock server only starts once the first request has been sent."


@pytest.fixture(params=BACKENDS)
def meaning_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Run]:
    yield from started_run(request, tmp_path / "run", ["alice", "bob"], meaning=True)  # the default local embedder


def settled(run: Run, count: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while run.op("memory.stats")["meaning"]["embedded"] < count:
        assert time.monotonic() < deadline, "the broker did not embed the claims in time"
        time.sleep(0.1)


def test_an_ingested_restatement_is_linked_never_counted_as_a_rediscovery(meaning_run, tmp_path):
    """The attack: an operator's notes restate an agent's unverified finding in other words.  Were the
    ingested claim treated like an agent's independent rediscovery, it would be a blind witness from the
    operator's domain.  Control: bob, never shown the claim, restates it himself -- that one counts."""
    run = meaning_run
    claim = run.puppet("alice").call("memory.remember", kind="discovery", text=FOUND)["id"]
    settled(run, 1)
    note = tmp_path / "postmortem.md"
    note.write_text(f"## Root cause\n\n{RESTATED}\n")
    (stored,) = staged(run, str(note), apply=True)["store"]
    settled(run, 2)
    copy = run.op("memory.show", id=stored["id"])
    assert copy["tier"] == "retired" and "never a witness" in copy["retired"]["reason"], copy
    assert run.op("memory.show", id=claim)["corroborations"] == []
    # Control: the same words from an independent agent are a blind rediscovery, counted.
    again = run.puppet("bob").call("memory.remember", kind="discovery", text=RESTATED)["id"]
    settled(run, 3)
    witnesses = run.op("memory.show", id=claim)["corroborations"]
    assert [(w["domain"], w["witness"], w["counted"], w["restatement"]) for w in witnesses] == [("bob", "blind", True, again)]
