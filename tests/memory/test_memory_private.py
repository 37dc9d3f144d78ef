"""Private pools: ``remember --private``, visible to its agent name only, pushed only into its own
``context``, never counting toward anyone's trust, and ``memory share`` by its agent or the operator.

Through a real broker with puppet agents, on SQLite and on PostgreSQL.  Each
attack is beside the control that shows the same route working for a shared
claim (or for the owner).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from tests.memory.memory_support import backend_run, vouch

from agents.harness import Run
from broker.errors import ConclaveError, ErrorCode

TEAM: list[Any] = [{"name": "alice", "restart": "on-failure"}, "bob", "carol", "dave"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with backend_run(request, tmp_path_factory.mktemp(f"private-{request.param}"), TEAM) as r:
        yield r


def keep(run: Run, who: str, text: str) -> dict[str, Any]:
    return run.puppet(who).call("memory.remember", kind="discovery", text=text, private=True)


def refused(call: Any, code: ErrorCode) -> str:
    with pytest.raises(ConclaveError) as caught:
        call()
    assert caught.value.code is code, caught.value
    return str(caught.value)


def test_a_private_claim_is_its_agents_alone_and_does_not_exist_for_others(run: Run) -> None:
    mine = keep(run, "alice", "The gannet deploy script needs the staging VPN up before it starts.")
    assert mine["private_to"] == "alice" and mine["badge"] == "[PRIVATE]" and mine["tier"] == "unverified"
    shared = run.puppet("alice").call("memory.remember", kind="discovery", text="The gannet deploy script logs to the release channel.")["id"]
    bob = run.puppet("bob")
    # bob searches, pulls, asks by id, links: alice's note is nowhere, and asking for it reads like a claim never written.
    assert [c["id"] for c in bob.call("memory.recall", query="gannet deploy script")] == [shared]
    assert bob.call("memory.context", query="gannet deploy script staging VPN", include_unverified=True)["claims"] == [
        c for c in bob.call("memory.context", query="gannet deploy script staging VPN", include_unverified=True)["claims"] if c["id"] != mine["id"]
    ]
    missing = refused(lambda: bob.call("memory.show", id=mine["id"]), ErrorCode.NOT_FOUND)
    never = refused(lambda: bob.call("memory.show", id=999_999), ErrorCode.NOT_FOUND)
    assert missing.replace(str(mine["id"]), "N") == never.replace("999999", "N")
    refused(lambda: bob.call("memory.link", source=shared, target=mine["id"]), ErrorCode.NOT_FOUND)
    refused(lambda: bob.call("memory.share", id=mine["id"]), ErrorCode.NOT_FOUND)
    # A twin in bob's own words is not told about alice's note either.
    twin = bob.call("memory.remember", kind="discovery", text="The gannet deploy script needs the staging VPN up before it starts.")
    assert twin["twins"] == []
    # Control: alice -- this session and a restart of it -- finds it, badged; so does the operator's list.
    pulled = {c["id"]: c["badge"] for c in run.puppet("alice").call("memory.recall", query="gannet deploy script staging VPN")}
    assert pulled[mine["id"]] == "[PRIVATE]"
    first_session = run.puppet("alice").key
    run.puppet("alice").exit(1)  # it fails; the broker restarts it as a new session of alice
    run.forget("alice")

    def restarted() -> Any:
        try:
            puppet = run.puppet("alice", fresh=True, timeout=5)
        except (TimeoutError, ConnectionError, OSError):
            return None
        if puppet.key == first_session:
            run.forget("alice")  # the old puppet's socket, not yet gone
            return None
        return puppet

    again = run.wait_until(restarted, timeout=40, interval=0.2, what="alice's restart")
    assert again.call("memory.show", id=mine["id"])["private_to"] == "alice"
    assert mine["id"] in {c["id"] for c in run.op("memory.list", limit=1000)}
    assert run.op("memory.stats")["private"] >= 1


def test_a_private_claim_is_pushed_only_into_its_own_agents_context(run: Run) -> None:
    note = keep(run, "carol", "The ibis queue drains fastest with four consumers.")["id"]
    shared = run.puppet("alice").call("memory.remember", kind="pattern", text="The ibis queue keeps messages for seven days.")["id"]
    vouch(run.puppet("bob"), shared)
    vouch(run.puppet("dave"), shared)
    own = run.puppet("carol").call("memory.context", query="ibis queue consumers messages")
    assert {c["id"] for c in own["claims"]} == {note, shared}
    assert f"[PRIVATE] #{note} " in own["block"] and f"[TRUSTED] #{shared} " in own["block"]
    # Attack routes for another agent: its default context, context with unverified claims, recall.
    for who in ("bob", "dave"):
        other = run.puppet(who)
        assert [c["id"] for c in other.call("memory.context", query="ibis queue consumers messages")["claims"]] == [shared]
        assert note not in {c["id"] for c in other.call("memory.context", query="ibis queue consumers", include_unverified=True)["claims"]}
        assert note not in {c["id"] for c in other.call("memory.recall", query="ibis queue consumers", expand=True)}
    # ...nor through a link carol drew from the shared claim to her note (the link only leads her there).
    run.puppet("carol").call("memory.link", source=shared, target=note, kind="relates-to", why="my own tuning")
    bob_sees = run.puppet("bob").call("memory.context", query="messages seven days", include_unverified=True)
    assert [c["id"] for c in bob_sees["claims"]] == [shared] and "my own tuning" not in str(bob_sees)
    assert run.puppet("bob").call("memory.show", id=shared)["relations"] == []  # the link would name her note
    carol_sees = run.puppet("carol").call("memory.context", query="messages seven days")
    assert [c["id"] for c in carol_sees["claims"]] == [shared, note] and f"[PRIVATE] [linked] #{note} " in carol_sees["block"]
    # The operator's own context is nobody's private pool.
    assert note not in {c["id"] for c in run.op("memory.context", query="ibis queue consumers", include_unverified=True)["claims"]}


def test_a_private_claim_cannot_vouch_or_be_vouched_for(run: Run) -> None:
    """Attack: alice keeps a note privately, then tries to make it count -- her own vouches, another agent's
    vouch by id, a promotion -- or to have it count as an independent rediscovery of bob's claim."""
    note = keep(run, "alice", "The jacana importer skips rows with a blank tenant id.")["id"]
    for who in ("alice", "bob"):
        refused(lambda: run.puppet(who).call("memory.corroborate", id=note, evidence="checked the importer"), ErrorCode.NOT_FOUND if who == "bob" else ErrorCode.CONFLICT)
        refused(lambda: run.puppet(who).call("memory.dispute", id=note, reason="not what I saw"), ErrorCode.NOT_FOUND if who == "bob" else ErrorCode.CONFLICT)
    assert "share it first" in refused(lambda: run.op("memory.promote", id=note, reason="looks right"), ErrorCode.CONFLICT)
    shown = run.op("memory.show", id=note)
    assert shown["tier"] == "unverified" and shown["corroborations"] == [] and shown["disputes"] == []
    # Control: shared, the same claim takes witnesses like any other and becomes trusted.
    shared = run.puppet("alice").call("memory.share", id=note)
    assert shared["private_to"] is None and shared["tier"] == "unverified" and shared["author"].endswith(run.puppet("alice").key.split(":")[0] + ":" + shared["author"].split(":")[-1])
    vouch(run.puppet("bob"), note)
    assert vouch(run.puppet("carol"), note)["tier"] == "trusted"


def test_sharing_by_the_author_or_the_operator_starts_an_unverified_shared_claim(run: Run) -> None:
    first = keep(run, "dave", "The kiwi cache warms from the nightly export.")
    revised = run.puppet("dave").call("memory.revise", id=first["id"], text="The kiwi cache warms from the hourly export.")
    assert revised["private_to"] == "dave"  # a private claim's next edition stays private
    refused(lambda: run.puppet("bob").call("memory.share", id=revised["id"]), ErrorCode.NOT_FOUND)
    out = run.puppet("dave").call("memory.share", id=revised["id"])
    assert out["private_to"] is None and out["badge"] == "[UNVERIFIED]" and out["corroborations"] == []
    assert out["author"] == revised["author"]  # the original author is kept
    (event,) = run.op("memory.log", kind="share", claim=revised["id"])
    assert event["detail"]["private_to"] == "dave" and event["actor"].split("/")[-1].startswith("dave:")
    assert run.puppet("bob").call("memory.show", id=revised["id"])["tier"] == "unverified"  # now anyone's
    assert "already shared" in refused(lambda: run.puppet("dave").call("memory.share", id=revised["id"]), ErrorCode.CONFLICT)
    # The operator may share an agent's note too (by the command line, with --json).
    other = keep(run, "carol", "The kiwi exporter compresses with zstd level 3.")["id"]
    import json

    done = run.cli("memory", "share", str(other), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["private_to"] is None
    assert other in {c["id"] for c in run.puppet("bob").call("memory.recall", query="kiwi exporter zstd")}
    # Every private claim, share and link above left the store consistent with its keyed log.
    checked = run.op("memory.verify")
    assert checked["ok"], checked["problems"]


def test_a_private_note_repeats_only_in_its_own_pool(run: Run) -> None:
    """The same agent remembering the same text gets its live claim back -- within one pool: a private
    note repeated is that note; the same words shared are a shared claim of their own (the note stays private)."""
    carol = run.puppet("carol")
    text = "The lapwing build caches wheels per Python minor version."
    first = carol.call("memory.remember", kind="pattern", text=text, private=True)
    again = carol.call("memory.remember", kind="pattern", text=text, private=True)
    assert again["id"] == first["id"] and again.get("repeated") is True and again["private_to"] == "carol"
    shared = carol.call("memory.remember", kind="pattern", text=text)
    assert shared["id"] != first["id"] and not shared.get("repeated") and shared["private_to"] is None
    assert shared["twins"] == []  # its private twin is not named, not even to its own agent's shared claim
    # Another agent's identical words: its own claim, told only of the shared twin.
    theirs = run.puppet("bob").call("memory.remember", kind="pattern", text=text)
    assert theirs["id"] not in (first["id"], shared["id"]) and [t["id"] for t in theirs["twins"]] == [shared["id"]]
    # A private note, repeated or new, is told of the shared twins only: never of a private note, not even its own.
    repeated = carol.call("memory.remember", kind="pattern", text=text, private=True)
    assert repeated["id"] == first["id"] and [t["id"] for t in repeated["twins"]] == [shared["id"], theirs["id"]]
    note = run.puppet("bob").call("memory.remember", kind="pattern", text=text, private=True)
    assert note["id"] not in (first["id"], shared["id"], theirs["id"]) and [t["id"] for t in note["twins"]] == [shared["id"], theirs["id"]]
