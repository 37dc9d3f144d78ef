"""Operator views print what agents wrote literally.

The attack: an agent names a lock ``name://[/]`` (rich markup), or writes
escape sequences and right-to-left overrides into claim text, evidence,
mail and status lines, hoping to crash the operator's tables (``MarkupError``
outlived the run: the name stays in the lock log) or to recolour, erase or
reverse what the operator reads.  Every view must show the text -- markup as
brackets, control characters spelled out -- and never pass a control
character to the terminal.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Iterator

import pytest

from agents.harness import Run

MARKUP = "[bold red]loud[/] name://[/]"
ESC = "\x1b[2J\x1b[31m"
RLO = "\u202e"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_literal(out, *expected: str) -> None:
    assert out.returncode == 0, out.stderr
    assert "MarkupError" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not RAW_CONTROL.search(out.stdout), f"a control character reached the terminal: {out.stdout!r}"
    for text in expected:
        assert text in out.stdout, f"{text!r} not shown literally in:\n{out.stdout}"


@pytest.fixture(scope="module")
def markup_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, dict]]:
    """A live run in which agents put rich markup in every field they control (brackets are
    ordinary text, so the broker accepts them everywhere)."""
    run = Run(tmp_path_factory.mktemp("hostile"), [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}])
    try:
        run.start()
        alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
        alice.call("lock.acquire", resources=["name://[/]", "tool://[bold]x[/]"])
        # carol waits in line for the markup-named lock (in a thread: the call blocks her puppet).
        waiting = threading.Thread(target=lambda: carol.try_call("lock.acquire", resources=["name://[/]"], wait=30))
        waiting.start()
        run.wait_until(lambda: run.op("lock.list")["waiting"], what="carol in the wait line")
        claim = alice.call("memory.remember", kind="discovery", text=f"The parser {MARKUP} reads its input lazily.", evidence="[/] seen in [red]logs")
        alice.call("msg.send", to="operator", subject="[/] subject", body=f"body {MARKUP}")
        alice.call("status.set", text="[/] working on [bold]it")
        yield run, {"claim": claim["id"], "bob": bob}
        alice.call("lock.release", resources=["name://[/]", "tool://[bold]x[/]"])
        waiting.join(timeout=30)
    finally:
        run.close()


def test_markup_in_agent_fields_is_shown_literally_in_every_live_view(markup_run):
    run, facts = markup_run
    claim = str(facts["claim"])
    bob = facts["bob"]
    corroborated = bob.call("memory.corroborate", id=facts["claim"], evidence="[/] reproduced")
    assert corroborated["id"] == facts["claim"]
    assert_literal(run.cli("lock", "list"), "name://[/]", "tool://[bold]x[/]")
    assert_literal(run.cli("lock", "log"), "name://[/]")
    assert_literal(run.cli("memory", "list"), MARKUP)
    assert_literal(run.cli("memory", "show", claim), MARKUP, "evidence: [/] seen in [red]logs", "evidence: [/] reproduced")
    assert_literal(run.cli("memory", "trail", claim), MARKUP)
    assert_literal(run.cli("memory", "trail", "--agent", "alice"), MARKUP)
    assert_literal(run.cli("memory", "log"), "memory.remember")
    assert_literal(run.cli("msg", "inbox"), "subject: [/] subject", f"body {MARKUP}")
    assert_literal(run.cli("status"), "[/] working on [bold]it", "name://[/]")
    assert_literal(run.cli("agents"), "alice:")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A finished run whose database was then edited to hold escape sequences and
    right-to-left overrides in every agent-written field (the raw-database route:
    whatever the broker refuses at its edge, the views must still be safe).  The
    planted message comes with a keyed msg.send event, as one written by a holder of
    the chain key would: a message row with no event is never shown at all
    (tests/memory/test_decisions_from_events.py), and one that is shown must still be
    shown literally."""
    from store import events
    from store.chainkey import ChainKey
    from store.database import connect

    run = Run(tmp_path_factory.mktemp("planted"), [{"name": "alice"}, {"name": "bob"}])
    run.start()
    alice, bob = run.puppet("alice"), run.puppet("bob")
    claim = alice.call("memory.remember", kind="discovery", text="The cache is rebuilt on every start.", evidence="plain")
    bob.call("memory.corroborate", id=claim["id"], evidence="plain too")
    bob.call("memory.dispute", id=claim["id"], reason="plain reason")
    alice.call("msg.send", to="operator", body="plain body")
    run.close()
    hostile = f"x{ESC}y{RLO}txt.exe {MARKUP}"
    conn = connect(run.state / "conclave.db")
    try:
        conn.execute("UPDATE claims SET text = ?, evidence = ? WHERE id = ?", (f"The cache {hostile}", hostile, claim["id"]))
        conn.execute("UPDATE corroborations SET evidence = ?", (hostile,))
        conn.execute("UPDATE disputes SET reason = ?", (hostile,))
        (mid,) = conn.execute("SELECT max(id) + 1 FROM mail_messages").fetchone()
        sender = conn.execute("SELECT sender FROM mail_messages LIMIT 1").fetchone()[0]
        conn.execute(
            "INSERT INTO mail_messages(id, thread, sender, sender_box, addressed, subject, body, at) VALUES (?,?,?,?,?,?,?,?)",
            (mid, f"t{mid}", sender, "alice", "operator", hostile, f"body {hostile}\nsecond line", "2030-01-01T00:00:00+00:00"),
        )
        conn.execute("INSERT INTO mail_deliveries(mailbox, message) VALUES ('operator', ?)", (mid,))
        key = ChainKey.load(run.state / "chain-key")
        assert key is not None
        events.key_chain(conn, key)
        with conn:
            events.append(conn, "msg.send", actor=sender, subject=f"msg:{mid}", at="2030-01-01T00:00:00+00:00", payload={
                "id": mid, "thread": f"t{mid}", "to": "operator", "recipients": ["operator"], "sender_box": "alice",
                "subject_sha256": events.sha256(hostile), "body_sha256": events.sha256(f"body {hostile}\nsecond line"),
            })
        conn.execute("UPDATE principals SET agent = ? WHERE agent = 'bob'", (f"bob{ESC}{RLO}",))
    finally:
        conn.close()
    run.claim_id = claim["id"]  # type: ignore[attr-defined]
    return run


def test_escape_sequences_and_bidi_overrides_are_spelled_out_in_every_stored_view(planted):
    run = planted
    claim = str(run.claim_id)  # type: ignore[attr-defined]
    spelled = ("\\x1b[2J", "\\u202e", MARKUP)
    assert_literal(run.cli("memory", "list"), "\\x1b[2J")
    assert_literal(run.cli("memory", "show", claim), *spelled)
    assert_literal(run.cli("memory", "trail", claim), "\\x1b[2J", "\\u202e")
    assert_literal(run.cli("memory", "trail", "--agent", "alice"), "\\x1b[2J")
    assert_literal(run.cli("msg", "inbox"), *spelled, "second line")
    assert_literal(run.cli("agents"), "bob\\x1b[2J")
    for fmt in ("jsonl", "markdown"):
        assert_literal(run.cli("memory", "export", "--format", fmt), "\\u202e" if fmt == "markdown" else "\\u202e")
        assert_literal(run.cli("msg", "export", "--format", fmt), "\\u202e")
    # --json carries the exact text (escaped the JSON way, decoded back exactly).
    shown = json.loads(run.cli("memory", "show", claim, "--json").stdout)
    assert ESC in shown["text"] and RLO in shown["text"]


def test_lock_and_board_renderers_show_hostile_names_literally(capsys):
    """The live-only views, rendered from hostile data as the broker would send it."""
    from broker.mail.cli import print_board
    from locks.cli import print_locks, print_lock_log

    name = f"src/{ESC}{RLO}gnp.exe [/]"
    holder = f"alice{ESC}:1"
    print_locks({
        "holdings": [{"resource": name, "mode": "exclusive", "holder": holder, "since": None, "token": 1, "scope": "agent", "expires_at": None}],
        "waiting": [{"position": 1, "resources": [name], "mode": "shared", "waiter": "bob:2", "since": None}],
        "slots": [],
    })  # fmt: skip
    print_lock_log([{"seq": 1, "at": None, "kind": "lock.grant", "actor": holder, "subject": name, "payload": {"reason": f"why {ESC}[/]"}}])
    print_board({
        "at": "2030-01-01T00:00:00.000000+00:00", "operator_unread": 0, "locks_tracked": True,
        "agents": [{"agent": f"a{ESC}", "session": "s", "principal": "a:s", "status": f"st {RLO}[/]", "since": None,
                    "locks": [{"resource": name, "mode": "exclusive"}], "unread": 0,
                    "waiting": [{"position": 1, "resources": [name], "mode": "shared", "since": None}]}],
    })  # fmt: skip
    out = capsys.readouterr().out
    assert not RAW_CONTROL.search(out), out
    assert out.count("src/\\x1b[2J\\x1b[31m\\u202egnp.exe [/]") >= 4 and "st \\u202e[/]" in out and "why \\x1b[2J\\x1b[31m[/]" in out
    # Control: the same renderers print ordinary names unchanged.
    print_locks({"holdings": [], "waiting": [], "slots": []})
    assert "no locks are held" in capsys.readouterr().out


def test_piped_tables_keep_every_principal_resource_and_reason_whole(capsys):
    """Through a pipe (an agent's log), a wide table is printed wide, never cut with an ellipsis."""
    from locks.cli import print_locks

    name = "src/" + "/".join(f"directory{i}" for i in range(30)) + "/file.py"
    holder = "a-rather-long-agent-name/with-a-child:0123456789ab"
    print_locks({
        "holdings": [{"resource": name, "mode": "exclusive", "holder": holder, "since": None, "token": 7, "scope": "agent", "expires_at": None}],
        "waiting": [], "slots": [],
    })  # fmt: skip
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if holder in line)
    assert name in row and "\u2026" not in out
