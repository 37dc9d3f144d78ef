"""The dashboard, driven headless by Textual's Pilot against a real broker with puppet agents.

Every action is checked where it lands -- the store, the lock table, an
agent's inbox -- not in the UI alone, and each is paired with a cancel or
a refusal that must change nothing.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from agents.harness import Run
from broker.dashboard.screens import Ask
from broker.errors import ConclaveError
from tests.dashboard.dashtools import PRINTER, app_for, drive, output_lines, press, row_for, rows, select_row, shown, type_text, until

TEAM = [{"name": "alice", "may_spawn": 1}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}, {"name": "printer", "command": PRINTER}]
PUPPETS = ["alice", "bob", "carol", "dave"]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("dash"), TEAM)
    try:
        yield run.start(wait_for=PUPPETS)
    finally:
        run.close()


def test_agents_pane_shows_status_locks_held_and_waited_for_unread_mail_and_live_output(team: Run) -> None:
    alice, bob = team.puppet("alice"), team.puppet("bob")
    alice.call("status.set", text="refactoring [bold]the parser[/bold]")  # markup in agent text must show as typed
    alice.call("lock.acquire", resources=["src/parser.py"])
    bob.call("msg.send", to="alice", body="can I have the parser after you?")
    # A puppet answers one command at a time: nothing else talks to bob while it waits.
    waiter = threading.Thread(target=lambda: _quietly(bob.call, "lock.acquire", resources=["src/parser.py"], wait=30))
    waiter.start()
    try:

        async def scenario(pilot: Pilot[None]) -> None:
            app = pilot.app
            await until(pilot, lambda: "broker running" in shown(app, "#banner"), "the banner to say the broker runs")
            alice_row = await until(pilot, lambda: row_for(app, "#agents", "alice:"), "alice's row")
            assert alice_row[1] == "live" and alice_row[2] == "refactoring [bold]the parser[/bold]"
            assert alice_row[3] == "src/parser.py (exclusive)" and alice_row[5] == "1"  # bob's mail is unread
            bob_row = await until(pilot, lambda: (r := row_for(app, "#agents", "bob:")) and r[4] and r, "bob waiting")
            assert bob_row[4].startswith("src/parser.py (exclusive) for ") and bob_row[4].endswith(" s, #1 in line")
            # The printer's output, live: select it and watch new lines arrive.
            await select_row(pilot, "#agents", "printer:")
            first = await until(pilot, lambda: output_lines(app), "the printer's output")
            later = await until(pilot, lambda: (lines := output_lines(app)) and lines[-1] != first[-1] and lines, "more output")
            assert all(line.startswith("printer line ") and line.endswith("done") for line in later)
            assert not any("\x1b" in line or "\x07" in line for line in later)  # the escapes never reach the screen
            title = str(app.main.query_one("#output-title").content)
            assert title.startswith("output of printer:") and " line(s) read, the last 1,000 kept" in title
            # The Locks tab: the holder and the wait line with each waiter's time.
            await press(pilot, "2")
            held = await until(pilot, lambda: row_for(app, "#holdings", "src/parser.py"), "the held lock")
            assert held[1] == "exclusive" and held[2].startswith("alice:")
            line = rows(app, "#waiting")
            assert len(line) == 1 and line[0][0] == "1" and line[0][1].startswith("bob:") and line[0][4].endswith(" s")

        drive(app_for(team), scenario)
    finally:
        alice.call("lock.release", resources=["src/parser.py"])
        waiter.join()
        _quietly(bob.call, "lock.release", resources=["src/parser.py"])


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except ConclaveError:
        pass


def test_mail_pane_shows_threads_and_the_inbox_and_a_reply_reaches_the_agent(team: Run) -> None:
    carol = team.puppet("carol")
    sent = carol.call("msg.send", to="operator", body="tests pass on my branch\nshall I merge?", subject="merge?")
    before = [m["id"] for m in team.op("msg.thread", thread=sent["thread"])]

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "3")
        thread = await until(pilot, lambda: row_for(app, "#threads", sent["thread"]), "carol's thread")
        assert "carol" in thread[1] and "operator" in thread[1]
        message = await until(pilot, lambda: row_for(app, "#inbox", str(sent["id"])), "carol's message in the operator's inbox")
        assert message[1].startswith("carol:") and message[4] == "new: tests pass on my branch shall I merge?"  # the whole body, its lines joined
        await select_row(pilot, "#threads", sent["thread"])
        view = await until(pilot, lambda: "shall I merge?" in shown(app, "#thread-view") and shown(app, "#thread-view"), "the thread")
        assert "[merge?]" in view and shown(app, "#thread-title") == f"thread {sent['thread']}  (r replies in this thread to carol)"
        # Cancel first: nothing is sent.
        await press(pilot, "r")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the reply dialog")
        await type_text(pilot, "not this one")
        await press(pilot, "escape")
        await until(pilot, lambda: "cancelled" in shown(app, "#status"), "the cancel to be said")
        assert [m["id"] for m in team.op("msg.thread", thread=sent["thread"])] == before
        # Then for real.
        await press(pilot, "r")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the reply dialog")
        await type_text(pilot, "yes merge it")
        await press(pilot, "enter")
        await until(pilot, lambda: "sent message" in shown(app, "#status"), "the reply to be sent")
        await until(pilot, lambda: "yes merge it" in shown(app, "#thread-view"), "the reply in the thread view")

    drive(app_for(team), scenario)
    inbox = carol.call("msg.inbox", unread=True)
    reply = [m for m in inbox if m["body"] == "yes merge it"]
    assert len(reply) == 1 and reply[0]["sender_agent"] == "operator" and reply[0]["thread"] == sent["thread"]


def test_new_mail_in_the_background_does_not_move_the_thread_a_reply_goes_to(team: Run) -> None:
    """The person reads carol's thread, picked in the threads table, while the inbox's cursor sits on
    dave's message.  New mail arrives and the inbox is refilled: its cursor fires a selection of its
    own.  The header must go on naming carol's thread, and `r` must reply there, to carol."""
    carol, dave, bob = team.puppet("carol"), team.puppet("dave"), team.puppet("bob")
    theirs = carol.call("msg.send", to="operator", body="which branch do I rebase on?")
    other = dave.call("msg.send", to="operator", body="the docs build is green")

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "3")
        await until(pilot, lambda: row_for(app, "#inbox", str(other["id"])), "dave's message in the inbox")
        await select_row(pilot, "#inbox", str(other["id"]))
        await until(pilot, lambda: shown(app, "#thread-title").startswith(f"thread {other['thread']} "), "dave's thread on screen")
        await select_row(pilot, "#threads", theirs["thread"])
        header = f"thread {theirs['thread']}  (r replies in this thread to carol)"
        await until(pilot, lambda: shown(app, "#thread-title") == header, "carol's thread on screen")
        late = bob.call("msg.send", to="operator", body="a new question, in a new thread")
        await until(pilot, lambda: row_for(app, "#inbox", str(late["id"])), "the new mail in the inbox")
        await pilot.pause(0.5)  # the refill's selection events have been handled
        assert shown(app, "#thread-title") == header
        await press(pilot, "r")
        ask = await until(pilot, lambda: isinstance(app.screen, Ask) and app.screen, "the reply dialog")
        assert ask.question == f"Reply to carol in thread {theirs['thread']}"
        await type_text(pilot, "rebase on main")
        await press(pilot, "enter")
        await until(pilot, lambda: "sent message" in shown(app, "#status"), "the reply to be sent")

    drive(app_for(team), scenario)
    reply = [m for m in carol.call("msg.inbox", unread=True) if m["body"] == "rebase on main"]
    assert len(reply) == 1 and reply[0]["thread"] == theirs["thread"]
    assert not [m for m in dave.call("msg.inbox", unread=True) if m["body"] == "rebase on main"]


def test_promote_through_the_ui_makes_the_claim_trusted_in_the_store(team: Run) -> None:
    alice = team.puppet("alice")
    cid = alice.call("memory.remember", kind="solution", text="The parser tests pass when the slow marker is excluded.")["id"]

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "4")
        await select_row(pilot, "#claims", str(cid))
        await until(pilot, lambda: f"claim #{cid}" in shown(app, "#bio"), "the claim's biography")
        # Escape cancels: the claim stays unverified.
        await press(pilot, "p")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the confirmation")
        assert f"Promote claim #{cid} to trusted?" in shown(app, "#ask-question")
        await press(pilot, "escape")
        await until(pilot, lambda: "cancelled" in shown(app, "#status"), "the cancel")
        assert team.op("memory.show", id=cid)["tier"] == "unverified"
        await press(pilot, "p")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the confirmation")
        await type_text(pilot, "checked by hand")
        await press(pilot, "enter")
        await until(pilot, lambda: f"claim #{cid} is now trusted" in shown(app, "#status"), "the promotion")
        await until(pilot, lambda: (r := row_for(app, "#claims", str(cid))) and r[1] == "trusted", "the table to say trusted")
        await until(pilot, lambda: "promote by operator" in shown(app, "#bio"), "the promotion in the biography")

    drive(app_for(team), scenario)
    stored = team.op("memory.show", id=cid)
    assert stored["tier"] == "trusted" and stored["promotions"][0]["reason"] == "checked by hand"


def test_retire_needs_a_reason_and_then_tombstones_the_claim(team: Run) -> None:
    cid = team.puppet("bob").call("memory.remember", kind="discovery", text="The parser cache lives in the build directory.")["id"]

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "4")
        await select_row(pilot, "#claims", str(cid))
        await press(pilot, "x")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the confirmation")
        await press(pilot, "enter")  # no reason: refused, the dialog stays
        await until(pilot, lambda: "a reason is required" in shown(app, "#ask-problem"), "the refusal")
        assert isinstance(app.screen, Ask) and team.op("memory.show", id=cid)["tier"] == "unverified"
        await type_text(pilot, "moved to the cache dir")
        await press(pilot, "enter")
        await until(pilot, lambda: f"claim #{cid} is now retired" in shown(app, "#status"), "the retirement")
        # Retired claims leave the live view; the tier filter brings them back.
        await until(pilot, lambda: row_for(app, "#claims", str(cid)) is None, "the claim to leave the live list")
        app.main.query_one("#tier").value = "retired"
        await until(pilot, lambda: row_for(app, "#claims", str(cid)), "the claim under retired")

    drive(app_for(team), scenario)
    stored = team.op("memory.show", id=cid)
    assert stored["tier"] == "retired" and stored["retired"]["reason"] == "moved to the cache dir"


def test_claims_pane_searches_and_shows_biography_witnesses_and_trust_graph(team: Run) -> None:
    alice, bob, carol, dave = (team.puppet(n) for n in PUPPETS)
    cid = alice.call("memory.remember", kind="discovery", text="The tokenizer tests need the zstd fixtures unpacked.")["id"]
    carol.call("memory.recall", query="tokenizer zstd fixtures")  # carol has seen it: informed
    bob.call("memory.corroborate", id=cid, evidence="Reproduced: the tokenizer tests only pass once the zstd fixtures are unpacked.")  # blind: never shown it
    carol.call("memory.corroborate", id=cid)
    dave.call("memory.dispute", id=cid, reason="only on a cold cache")

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "4")
        await until(pilot, lambda: row_for(app, "#claims", str(cid)), "the claim")
        await press(pilot, "slash")
        await type_text(pilot, "zstd tokenizer")
        await until(pilot, lambda: [r[0] for r in rows(app, "#claims")] == [str(cid)], "the search to leave only this claim")
        await select_row(pilot, "#claims", str(cid))
        bio = await until(pilot, lambda: "witnesses: 2, 2 counted" in shown(app, "#bio") and shown(app, "#bio"), "the biography")
        assert "(domain bob) blind, counted" in bio and "evidence: Reproduced: the tokenizer tests" in bio
        assert "(domain carol) informed, counted" in bio
        assert "disputes (1):" in bio and "(domain dave), counted: only on a cold cache" in bio
        assert "-> trusted" in bio and "-> disputed" in bio  # how it reached its tier, step by step
        graph = shown(app, "#graph")
        assert f"trust graph of claim {cid}" in graph and "[bob]" in graph and "[carol]" in graph
        assert f"#{cid} blind, counted" in graph and f"#{cid} informed, counted" in graph and "--x" in graph
        # Control: a search for words no claim has empties the table.
        app.main.query_one("#search", Input).value = "no such words anywhere"
        await until(pilot, lambda: rows(app, "#claims") == [], "the empty result")

    drive(app_for(team), scenario)


def test_the_witness_column_and_the_biography_count_witnesses_alike(team: Run) -> None:
    """Three corroborations, one from the author's own child (never counted): the claims table said 2
    (the counted ones) while the biography said 3.  Both now read the memory's one tally."""
    run = team
    cid = run.puppet("alice").call("memory.remember", kind="discovery", text="The lexer tests need the unicode tables.")["id"]
    for witness in (run.puppet("bob"), run.puppet("carol"), run.spawn_puppet("alice", "helper")):
        witness.call("memory.show", id=cid)  # read first: a vouch by id alone is unread and never counts
        witness.call("memory.corroborate", id=cid)
    shown_claim = run.op("memory.show", id=cid)
    listed = next(c for c in run.op("memory.list") if c["id"] == cid)
    assert [c["counted"] for c in shown_claim["corroborations"]] == [True, True, False]
    assert listed["witnesses"] == shown_claim["witnesses"] == {"total": 3, "counted": 2}

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "4")
        await select_row(pilot, "#claims", str(cid))
        bio = await until(pilot, lambda: "witnesses:" in shown(app, "#bio") and shown(app, "#bio"), "the biography")
        column = row_for(app, "#claims", str(cid))[4]
        assert column == "3, 2 counted" and "witnesses: 3, 2 counted" in bio
        assert bio.count("not counted") == 1  # the listed rows agree with the count above them

    drive(app_for(run), scenario)


def test_force_release_and_revoke_go_through_the_broker_after_confirmation(team: Run) -> None:
    dave = team.puppet("dave")
    dave.call("lock.acquire", resources=["docs/guide.md"])
    principal = dave.key

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        await press(pilot, "2")
        await select_row(pilot, "#holdings", "docs/guide.md")
        await press(pilot, "f")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the confirmation")
        assert "Held by " + principal in shown(app, "#ask-detail")
        await type_text(pilot, "dave is stuck")
        await press(pilot, "enter")
        await until(pilot, lambda: "force-released docs/guide.md" in shown(app, "#status"), "the release")
        await until(pilot, lambda: row_for(app, "#holdings", "docs/guide.md") is None, "the lock to leave the table")
        # Revoke dave from the Agents tab.
        await press(pilot, "1")
        await select_row(pilot, "#agents", principal)
        await press(pilot, "v")
        await until(pilot, lambda: isinstance(app.screen, Ask), "the confirmation")
        assert f"Revoke {principal}?" in shown(app, "#ask-question")
        await press(pilot, "enter")  # the reason is optional
        await until(pilot, lambda: f"revoked {principal}" in shown(app, "#status"), "the revocation")
        await until(pilot, lambda: (r := row_for(app, "#agents", principal)) and r[1].startswith("revoked"), "dave shown revoked")

    drive(app_for(team), scenario)
    assert not [h for h in team.op("lock.list")["holdings"] if h["resource"] == "docs/guide.md"]
    assert [e["detail"]["reason"] for e in team.op("memory.log", kind="lock.force_release")] == ["dave is stuck"]
    ended = {a["principal"]: a for a in team.op("agents")}[principal]
    assert ended["revoked_at"] and not ended["live"]
    team.forget("dave")


def test_json_snapshot_and_refusal_inside_an_agent(team: Run) -> None:
    team.puppet("alice").call("memory.remember", kind="discovery", text="The release checklist lives in docs/RELEASING.md.")
    # Read by meaning first (a claim refused by meaning is retired in the background: the counts would move).
    assert team.op("memory.settle")["settled"]
    snap = team.cli("dashboard", "--json")
    assert snap.returncode == 0, snap.stderr
    data = json.loads(snap.stdout)
    assert data["broker"]["running"] is True
    names = {a["agent"] for a in data["agents"]}
    assert {"alice", "bob", "carol", "printer", "broker"} <= names
    printer = next(a for a in data["agents"] if a["agent"] == "printer")
    assert printer["live"] and printer["log"].endswith(".log") and Path(printer["log"]).exists()
    # Every log's lines are counted from its start (they were always 0), and its last line is given.
    after = Path(printer["log"]).read_bytes().count(b"\n")
    assert 0 < printer["lines"] <= after and printer["last_line"].startswith("printer line ")
    quiet = [a for a in data["agents"] if a["log"] and a["agent"] != "printer" and a["live"]]
    for agent in quiet:  # their logs do not grow: the count is exact
        assert agent["lines"] == Path(agent["log"]).read_bytes().count(b"\n"), agent
    from store.database import connect

    db = connect(team.state / "conclave.db", readonly=True)
    try:
        stored = dict(db.execute("SELECT tier, count(*) FROM claims GROUP BY tier").fetchall())
    finally:
        db.close()
    assert stored and {tier: n for tier, n in data["claims"]["by_tier"].items() if n} == stored  # the store's own counts
    assert data["locks"] is not None
    inside = team.puppet("alice").conclave("dashboard", "--json", "--state-dir", str(team.state), "--repo", str(team.repo))
    assert inside.returncode == 1 and "the dashboard is the operator's view" in inside.stderr


def test_an_agent_that_drops_its_ticket_still_cannot_read_the_operators_view(team: Run) -> None:
    """The dashboard's own check is a courtesy; the broker's lineage check is the defence."""
    bob = team.puppet("bob")
    from broker.entry import conclave_argv

    argv = ["env", "-u", "CONCLAVE_TICKET", "-u", "CONCLAVE_SOCKET", *conclave_argv("dashboard", "--json", "--state-dir", str(team.state), "--repo", str(team.repo))]
    sneaky = bob.sh(*argv)
    assert sneaky.returncode == 1 and "refused" in sneaky.stderr and '"claims"' not in sneaky.stdout
    # Control: the same command from the operator's own process tree answers.
    assert team.cli("dashboard", "--json").returncode == 0


def test_with_no_broker_it_says_so_shows_the_logs_and_connects_when_one_starts(tmp_path: Path) -> None:
    first = Run(tmp_path / "run", [{"name": "alice"}, {"name": "printer", "command": PRINTER}])
    try:
        first.start(wait_for=["alice"])  # inside the try: a start that times out still stops its broker
        logs = first.state / "logs"
        first.wait_until(lambda: any(p.name.startswith("printer-") and p.stat().st_size > 200 for p in logs.iterdir()), what="printer output")
    finally:
        first.stop()
    second = Run(tmp_path / "run", [{"name": "alice"}], reuse=True)

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        banner = await until(pilot, lambda: "no broker is running" in shown(app, "#banner") and shown(app, "#banner"), "the no-broker banner")
        assert str(first.state) in banner and "conclave run --team" in banner and "read from" in banner
        printer = await until(pilot, lambda: row_for(app, "#agents", "printer:"), "the printer's past session, from its log")
        assert printer[1] == "log only"
        await select_row(pilot, "#agents", "printer:")
        lines = await until(pilot, lambda: output_lines(app), "the printer's output from its log file")
        assert lines[-1].startswith("printer line ") and lines[-1].endswith("done")
        await press(pilot, "4")
        await press(pilot, "p")
        await until(pilot, lambda: "needs a running broker" in shown(app, "#status"), "actions to need a broker")
        assert not isinstance(app.screen, Ask)
        # A broker starts for the same state directory: the dashboard finds it by itself.
        second.start()
        await until(pilot, lambda: "broker running" in shown(app, "#banner"), "the dashboard to connect")
        await press(pilot, "1")
        alice = await until(pilot, lambda: (r := [r for r in rows(app, "#agents") if r[0].startswith("alice:") and r[1] == "live"]) and r, "the new alice, live")
        assert len(alice) == 1

    try:
        drive(app_for(first), scenario)
    finally:
        second.close()


def test_a_wrong_operator_key_gets_no_view_and_the_right_one_does(team: Run) -> None:
    """The dashboard proves it is the operator exactly as the CLI does: with the state directory's key."""
    run = team
    run.puppet("alice").call("memory.remember", kind="discovery", text="The key file sits in the state directory.")
    key_file = run.state / "operator.key"
    real = key_file.read_text()
    key_file.write_text("f" * len(real.strip()) + "\n")  # a forged key of the right shape

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        banner = await until(pilot, lambda: "cannot act as the operator here" in shown(app, "#banner") and shown(app, "#banner"), "the refusal")
        assert "broker running" not in banner and app.claims is None and rows(app, "#claims") == []
        await press(pilot, "4", "p")
        await until(pilot, lambda: "promoting a claim: cannot act as the operator here" in shown(app, "#status"), "actions to be refused")
        key_file.write_text(real)  # control: the real key, and the same dashboard gets in
        await until(pilot, lambda: "broker running" in shown(app, "#banner"), "the connection with the real key")
        await until(pilot, lambda: rows(app, "#claims"), "the claims")

    try:
        drive(app_for(run), scenario)
    finally:
        key_file.write_text(real)


def test_biography_tells_editions_and_every_step_to_the_tier_from_the_brokers_own_reply(team: Run) -> None:
    """The claims pane's biography, built from a real `memory.show`: a claim revised, promoted, then retired."""
    from broker.dashboard.model import biography

    alice = team.puppet("alice")
    first = alice.call("memory.remember", kind="pattern", text="Fixtures for the lexer live beside its tests.")["id"]
    second = alice.call("memory.revise", id=first, text="Fixtures for the lexer live in tests/lexer/fixtures.")["id"]
    team.op("memory.promote", id=second, reason="read the tree")
    team.op("memory.retire", id=second, reason="the lexer moved")
    text = "\n".join(biography(team.op("memory.show", id=second)))
    assert "editions:" in text and f"#{first} edition 1 [superseded]" in text and f"#{second} edition 2 [retired]" in text
    assert "<- this one" in text.split(f"#{second} edition 2")[1].splitlines()[0]
    steps = text.split("how it got its tier:")[1]
    order = [f"#{second} revise by alice:", f"#{second} promote by operator", f"#{second} unverified -> trusted (promoted by operator", f"#{second} retire by operator"]
    assert all(step in steps for step in order) and [steps.index(s) for s in order] == sorted(steps.index(s) for s in order)
    assert "read the tree" in steps and "the lexer moved" in steps
    # Control: a claim nothing happened to says so.
    fresh = alice.call("memory.remember", kind="pattern", text="The lexer tests use golden files.")["id"]
    assert "written unverified; nothing has changed it" in "\n".join(biography(team.op("memory.show", id=fresh)))


def test_the_output_tail_ends_quietly_when_the_app_unmounts_between_two_polls(team: Run) -> None:
    """The unmount shuts the tail's thread and the broker link's thread down; the loops, asleep or between
    two reads, must not hand those threads more work when they go on (the tail did, under load:
    'cannot schedule new futures after shutdown' failed a suite run).  The unmount is made to land
    while both loops run, every time."""
    import asyncio

    from textual.worker import WorkerState

    app = app_for(team, tail=0.3)

    async def scenario(pilot: Pilot[None]) -> None:
        # Both loops, held from the start: a loop that ended leaves the app's worker list.
        tail, poll = (next(w for w in app.workers if w.name == name) for name in ("tail", "poll"))
        await until(pilot, lambda: output_lines(app) is not None and app.lognames, "the tail's first poll")
        assert tail.state is WorkerState.RUNNING  # the control: the tail runs, polling every 0.3 s (and the broker poll)
        await app.on_unmount()  # what the unmount does, while the loop sleeps
        await asyncio.sleep(0.8)  # the loop wakes at least twice
        for loop in (tail, poll):
            assert loop.state is not WorkerState.ERROR and not isinstance(loop.error, RuntimeError), (loop.name, loop.state, loop.error)

    drive(app, scenario)


def test_a_filter_change_delivered_as_the_app_closes_is_dropped(team: Run) -> None:
    """A widget's message -- the search box's change, a tab's activation -- can reach the app after its screens are gone (a suite run failed with
    'No screens on stack' from the claims filter as its test's app closed): it is dropped, not raised."""
    app = app_for(team)
    shown: list[int] = []

    async def scenario(pilot: Pilot[None]) -> None:
        await press(pilot, "4")
        await until(pilot, lambda: rows(app, "#claims") is not None, "the claims tab")
        app.main.query_one("#search", Input).value = "no such words anywhere"
        app._filter_changed()  # the control: with its screen there, the filter renders (an empty table)
        shown.append(len(rows(app, "#claims")))

    drive(app, scenario)
    assert shown == [0] and not app.screen_stack  # the app has closed: no screen is left
    app._filter_changed()  # what a late Input.Changed does: nothing, no ScreenStackError
    app._tab_changed()  # likewise a late TabActivated


def test_a_tab_key_is_not_undone_by_a_focus_that_lands_after_it(team: Run) -> None:
    """A late focus inside another pane does not switch the tabs back (a busy machine lost the ``4``)."""

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        agents = app.main.query_one("#agents")
        for _ in range(5):
            # The focus lands a moment after the call; the tab key is handled before it lands.
            app.set_focus(None)
            agents.focus()
            await press(pilot, "4")
            await pilot.pause(0.3)
            assert app._tab() == "claims", "the late focus in the agents pane switched the tabs back"
            assert app.focused is app.main.query_one("#claims")
            # Control: the keys still switch the tabs, both ways, and the focus follows them.
            await press(pilot, "1")
            await until(pilot, lambda: app._tab() == "agents" and app.focused is agents, "the agents tab and its table")

    drive(app_for(team), scenario)
