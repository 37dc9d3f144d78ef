"""What the panes show, from wire-shaped replies (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from broker.dashboard.model import ThreadView, agent_rows, biography, claim_rows, exit_words, first_agent, reply_target, span, thread_rows, witnesses
from broker.dashboard.tail import LogName

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat()


def test_exit_statuses_read_as_words() -> None:
    assert exit_words(0) == "exit 0" and exit_words(3) == "exit 3"
    assert exit_words(-9) == "killed by SIGKILL" and exit_words(-15) == "killed by SIGTERM"
    assert exit_words(127) == "exit 127: command not found" and exit_words(None) == "ended"
    assert (span(4.25), span(185), span(7380)) == ("4.2 s", "3 min 05 s", "2 h 03 min")


def test_agent_rows_merge_the_board_the_wait_line_and_the_logs() -> None:
    agents = [
        {"principal": "alice:a1", "agent": "alice", "live": True, "exit_code": None, "revoked_at": None},
        {"principal": "bob:b1", "agent": "bob", "live": False, "exit_code": -9, "revoked_at": None},
        {"principal": "bob:b2", "agent": "bob", "live": True, "exit_code": None, "revoked_at": None},
    ]
    board = {"agents": [
        {"principal": "alice:a1", "agent": "alice", "status": "writing\x1b]0;x\x07 docs", "locks": [{"resource": "docs/", "mode": "exclusive"}], "unread": 2},
        {"principal": "bob:b2", "agent": "bob", "status": None, "locks": [], "unread": 0},
    ]}
    locks = {"waiting": [{"position": 1, "waiter": "bob:b2", "resources": ["docs/", "git"], "mode": "exclusive", "since": ago(12.5)}]}
    logs = {k: LogName.parse(Path(f)) for k, f in (("alice:a1", "alice-a1.log"), ("broker", "broker.log"), ("zed:z9", "zed-z9.log"))}
    rows = {r.key: r for r in agent_rows(agents, board, locks, logs, {"alice:a1": 5}, {"alice:a1": "last"}, NOW)}
    assert list(rows) == ["alice:a1", "bob:b2", "bob:b1", "broker"]  # live first, the broker's log last
    assert rows["alice:a1"].status == "writing docs" and rows["alice:a1"].holds == ("docs/ (exclusive)",) and rows["alice:a1"].unread == 2
    assert rows["bob:b2"].waits == ("docs/, git (exclusive) for 12.5 s, #1 in line",)
    assert rows["bob:b1"].state == "killed by SIGKILL" and not rows["bob:b1"].live
    assert "zed:z9" not in rows  # a log no principal of this broker owns is left out while a broker answers
    # With no broker the log files are the list.
    offline = {r.key: r.state for r in agent_rows(None, None, None, logs, {}, {}, NOW)}
    assert offline == {"alice:a1": "log only", "zed:z9": "log only", "broker": "broker log"}


def test_threads_group_sends_and_a_reply_goes_to_the_last_agent_who_wrote() -> None:
    sends = [
        {"actor": "alice:a1", "at": ago(30), "detail": {"thread": "t1", "recipients": ["operator"]}},
        {"actor": "operator:uid0", "at": ago(20), "detail": {"thread": "t1", "recipients": ["alice"]}},
        {"actor": "bob:b1", "at": ago(10), "detail": {"thread": "t2", "recipients": ["carol", "dave"]}},
    ]
    rows = thread_rows(sends)
    assert [(r.thread, r.participants, r.messages, r.to_operator) for r in rows] == [
        ("t2", ("bob", "carol", "dave"), 1, False),
        ("t1", ("alice", "operator"), 2, True),
    ]
    assert reply_target([{"sender_agent": "alice"}, {"sender_agent": "operator"}]) == "alice"
    assert reply_target([{"sender_agent": "operator"}]) is None


def test_claims_by_tier_with_search() -> None:
    claims = [
        {"id": 1, "tier": "unverified", "text": "The lexer is slow", "author": "alice:a1", "kind": "discovery"},
        {"id": 2, "tier": "trusted", "text": "The parser is fast", "author": "bob:b1", "kind": "discovery"},
        {"id": 3, "tier": "retired", "text": "The parser was slow", "author": "bob:b1", "kind": "failure"},
        {"id": 4, "tier": "trusted", "text": "The lexer caches tokens", "author": "carol:c1", "kind": "pattern"},
    ]
    assert [c["id"] for c in claim_rows(claims, tier="live", search="")] == [4, 2, 1]  # trusted first, newest first
    assert [c["id"] for c in claim_rows(claims, tier=None, search="parser")] == [2, 3]
    assert [c["id"] for c in claim_rows(claims, tier="retired", search="")] == [3]
    assert [c["id"] for c in claim_rows(claims, tier="live", search="lexer bob")] == []
    assert [c["id"] for c in claim_rows(claims, tier="live", search="LEXER carol")] == [4]


def _agent(key: str, *, live: bool, run: int, started: str) -> dict[str, object]:
    return {"principal": key, "agent": key.split(":")[0], "live": live, "exit_code": None if live else 0, "revoked_at": None, "run": run, "started_at": started}


def test_the_cursor_starts_on_a_live_agent_of_the_current_run_else_the_newest_session() -> None:
    """An old run's aardvark sorts before every agent by name; it must not be where the cursor starts."""
    agents = [
        _agent("aardvark:o1", live=False, run=1, started=ago(3600)),
        _agent("zed:o2", live=False, run=1, started=ago(3500)),
        _agent("bob:n1", live=True, run=2, started=ago(60)),
        _agent("alice:n2", live=True, run=2, started=ago(59)),
    ]
    rows = agent_rows(agents, None, None, {}, {}, {}, NOW)
    assert [r.key for r in rows] == ["alice:n2", "bob:n1", "zed:o2", "aardvark:o1"]  # live by name, then newest first
    assert first_agent(rows) == "alice:n2"
    # Control: nothing live -- the newest session, whatever its name.
    ended = [dict(a, live=False) for a in agents]
    assert first_agent(agent_rows(ended, None, None, {}, {}, {}, NOW)) == "alice:n2"
    # With no broker the logs decide, by when each was last written.
    logs = {k: LogName.parse(Path(f)) for k, f in (("aardvark:o1", "aardvark-o1.log"), ("zed:o2", "zed-o2.log"), ("broker", "broker.log"))}
    offline = agent_rows(None, None, None, logs, {}, {}, NOW, {"aardvark:o1": ago(10), "zed:o2": ago(5), "broker": ago(1)})
    assert first_agent(offline) == "zed:o2" and [r.key for r in offline][-1] == "broker"
    assert first_agent(agent_rows(None, None, None, {"broker": logs["broker"]}, {}, {}, NOW)) == "broker"
    assert first_agent([]) is None


def test_a_thread_view_names_the_thread_and_the_agent_a_reply_goes_to() -> None:
    messages = ({"sender_agent": "carol", "sender": "carol:c1", "recipients": ["operator"], "id": 4, "at": ago(5), "body": "merge?"},)
    view = ThreadView("t7", messages)
    assert view.header() == "thread t7  (r replies in this thread to carol)" and view.reply_to == "carol"
    # While it is read, or when it could not be, nobody is named and `r` has no one to answer.
    assert ThreadView("t8").header() == "thread t8: reading it..." and ThreadView("t8").reply_to is None
    failed = ThreadView("t8", problem="thread t8 could not be read: the broker stopped")
    assert failed.header() == "thread t8 could not be read: the broker stopped" and failed.reply_to is None
    only_mine = ThreadView("t9", ({"sender_agent": "operator", "sender": "operator:o", "recipients": ["bob"], "id": 5, "at": ago(1), "body": "hi"},))
    assert only_mine.reply_to is None and "no agent in it" in only_mine.header()


def test_the_witness_column_and_the_biography_count_witnesses_alike() -> None:
    """Three corroborations, two counted: the table and the biography both say so, in the same words."""
    claim = {
        "id": 3, "tier": "trusted", "kind": "discovery", "scope": "repo", "edition": 1, "author": "alice:a1", "author_domain": "alice",
        "created_at": ago(60), "text": "The parser is slow.",
        "corroborations": [
            {"principal": "bob:b1", "domain": "bob", "blind": True, "counted": True, "at": ago(50)},
            {"principal": "carol:c1", "domain": "carol", "blind": False, "counted": True, "at": ago(40)},
            {"principal": "alice/kid:k1", "domain": "alice", "blind": False, "counted": False, "reason_not_counted": "author_domain", "at": ago(30)},
        ],
        "witnesses": {"total": 3, "counted": 2},
    }
    assert witnesses(claim) == "3, 2 counted"
    assert f"witnesses: {witnesses(claim)}" in biography(claim)
    assert witnesses({"witnesses": {"total": 0, "counted": 0}}) == "none"


def test_the_used_column_and_the_biography_say_how_much_the_team_used_a_claim() -> None:
    """memory's ``usage`` (context pushes, direct recall hits, last times): the table says it in a few words, the biography with the times."""
    from broker.dashboard.model import used

    claim = {
        "id": 4, "tier": "trusted", "kind": "pattern", "scope": "repo", "edition": 1, "author": "alice:a1", "author_domain": "alice",
        "created_at": ago(60), "text": "The cache is warm after a deploy.", "witnesses": {"total": 2, "counted": 2},
        "usage": {"context": {"count": 3, "last": ago(5)}, "recall": {"count": 1, "last": ago(9)}},
    }
    assert used(claim) == "3 pushed, 1 found"
    bio = biography(claim)
    assert "used: 3 pushed, 1 found" in bio and any(line.startswith("  last pushed ") for line in bio) and any(line.startswith("  last found ") for line in bio)
    never = {**claim, "usage": {"context": {"count": 0, "last": None}, "recall": {"count": 0, "last": None}}}
    assert used(never) == "never" and "used: never" in biography(never) and not any("last pushed" in line for line in biography(never))
    # A broker from before usage sends none: the column reads "never" and the biography leaves the line out.
    assert used({}) == "never" and not any(line.startswith("used:") for line in biography({k: v for k, v in claim.items() if k != "usage"}))
