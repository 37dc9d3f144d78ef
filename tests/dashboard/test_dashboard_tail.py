"""Agents' output as the dashboard reads it: incrementally, bounded, and cleaned of terminal control."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.dashboard.tail import FIRST_READ, LogName, LogTailer, OutputBuffer, clean


def test_a_log_file_name_says_whose_output_it_is(tmp_path: Path) -> None:
    assert LogName.parse(tmp_path / "alice-0a1b2c.log") == LogName("alice:0a1b2c", "alice", "0a1b2c")
    assert LogName.parse(tmp_path / "alice__helper-99ff.log") == LogName("alice/helper:99ff", "alice/helper", "99ff")
    assert LogName.parse(tmp_path / "code-review-bot-77aa.log") == LogName("code-review-bot:77aa", "code-review-bot", "77aa")
    assert LogName.parse(tmp_path / "broker.log") == LogName("broker", "broker", None)
    for stray in ("notes.txt", "nodash.log", "-abc.log", "alice-.log"):
        assert LogName.parse(tmp_path / stray) is None, stray


def test_only_new_finished_lines_are_returned_and_an_unfinished_one_waits(tmp_path: Path) -> None:
    log = tmp_path / "alice-s1.log"
    log.write_bytes(b"one\ntwo\nhal")
    tail = LogTailer(tmp_path)
    assert tail.poll() == {"alice:s1": ["one", "two"]}
    assert tail.poll() == {}  # nothing new: nothing returned
    with log.open("ab") as f:
        f.write(b"f a line\r\nthree\n")
    assert tail.poll() == {"alice:s1": ["half a line", "three"]}
    (tmp_path / "bob-s2.log").write_text("bob here\n")  # a file that appears later is found
    assert tail.poll() == {"bob:s2": ["bob here"]}
    assert tail.path_of("bob:s2") == tmp_path / "bob-s2.log" and tail.path_of("carol:s3") is None


def test_a_big_file_is_read_from_its_end_and_the_cut_line_dropped(tmp_path: Path) -> None:
    log = tmp_path / "alice-s1.log"
    line = b"x" * 99 + b"\n"
    log.write_bytes(b"first\n" + line * (FIRST_READ // 100 + 50) + b"last\n")
    lines = LogTailer(tmp_path).poll()["alice:s1"]
    assert lines[-1] == "last" and "first" not in lines
    assert all(entry == "x" * 99 for entry in lines[:-1])  # no partial line from the cut
    # Control: a small file is read whole.
    (tmp_path / "bob-s2.log").write_bytes(b"first\nlast\n")
    assert LogTailer(tmp_path).poll()["bob:s2"] == ["first", "last"]


def test_output_faster_than_the_read_cap_is_skipped_and_the_gap_said(tmp_path: Path) -> None:
    log = tmp_path / "alice-s1.log"
    log.write_text("start\n")
    tail = LogTailer(tmp_path, max_read=1000)
    assert tail.poll() == {"alice:s1": ["start"]}
    with log.open("a") as f:
        f.write("".join(f"line {i:04d}\n" for i in range(1000)))  # 10,000 bytes at once
    lines = tail.poll()["alice:s1"]
    assert lines[0].startswith("[conclave dashboard: 9000 bytes of output skipped")
    assert lines[-1] == "line 0999" and len(lines) < 120
    assert all(entry.startswith("line ") and len(entry) == 9 for entry in lines[1:])  # whole lines only


def test_a_truncated_log_is_read_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "alice-s1.log"
    log.write_text("old one\nold two\n")
    tail = LogTailer(tmp_path)
    tail.poll()
    log.write_text("new\n")
    assert tail.poll() == {"alice:s1": ["new"]}


def test_agent_output_cannot_drive_the_operators_terminal() -> None:
    """An agent prints escape sequences: retitle the window, clear the screen, move the cursor, ring, hide text."""
    attacks = {
        "\x1b]0;pwned\x07title": "title",
        "\x1b]2;pwned\x1b\\title": "title",
        "\x1b[2J\x1b[Hcleared": "cleared",
        "\x1b[8mhidden\x1b[0m": "hidden",
        "\x1b[31;1mred\x1b[m": "red",
        "bell\x07\x08\x7f": "bell",
        "\x9b31mcsi": "31mcsi",  # a C1 CSI byte is removed (its parameters stay as text)
        "\x1bPdcs": "dcs",
    }
    for raw, shown in attacks.items():
        assert clean(raw) == shown, repr(raw)
        assert not any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in clean(raw))
    # Control: ordinary text, tabs and non-ASCII pass through.
    assert clean("ok\tdone: caf\u00e9 \u2713 [bold]x[/bold]") == "ok  done: caf\u00e9 \u2713 [bold]x[/bold]"
    assert len(clean("y" * 10_000)) == 2000


def test_the_buffer_keeps_the_last_lines_and_counts_them_all() -> None:
    buffer = OutputBuffer(keep=3)
    buffer.add("alice:s1", ["a", "b"])
    buffer.add("alice:s1", ["c", "d", "e"])
    assert buffer.lines("alice:s1") == ["c", "d", "e"] and buffer.counts["alice:s1"] == 5
    assert buffer.last("alice:s1") == "e" and buffer.last("bob:s2") is None and buffer.lines("bob:s2") == []
    with pytest.raises(ValueError, match="at least 1"):
        OutputBuffer(keep=0)


def test_a_log_swapped_for_a_link_to_a_secret_is_not_shown(tmp_path: Path) -> None:
    """An agent that can write the logs directory replaces its log (or plants a new one) with a
    symlink to a file the operator can read: the dashboard shows neither, as `conclave logs` does."""
    secret = tmp_path / "id_ed25519"
    secret.write_text("the operator's private key\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "alice-s1.log").write_text("alice here\n")
    (logs / "mallory-s2.log").symlink_to(secret)
    tail = LogTailer(logs)
    assert tail.poll() == {"alice:s1": ["alice here"]}  # control: the real log is read
    (logs / "alice-s1.log").unlink()
    (logs / "alice-s1.log").symlink_to(secret)
    assert tail.poll() == {}


def test_a_log_is_counted_from_its_start_to_its_last_finished_line(tmp_path: Path) -> None:
    """`dashboard --json` reports each log's lines: every finished line from the start (the live view reads
    only the last 256 KiB), the last one cleaned, an unfinished line not yet counted."""
    log = tmp_path / "alice-s1.log"
    line = b"x" * 99 + b"\n"
    log.write_bytes(b"first\n" + line * (3 * (1 << 20) // 100) + b"the last \x1b]0;pwned\x07line\nhalf")
    tail = LogTailer(tmp_path)
    tail.discover()
    assert tail.count("alice:s1") == (1 + 3 * (1 << 20) // 100 + 1, "the last line")
    (tmp_path / "bob-s2.log").write_bytes(b"")
    tail.discover()
    assert tail.count("bob:s2") == (0, None) and tail.count("carol:s3") == (0, None)
    # A log swapped for a link to a secret is not read for its count either.
    secret = tmp_path / "secret"
    secret.write_text("key\n" * 5)
    log.unlink()
    log.symlink_to(secret)
    assert tail.count("alice:s1") == (0, None)


def test_invisible_characters_in_agent_output_are_spelled_out() -> None:
    """A bidi override or a zero-width space would make the operator read other words than were written."""
    assert clean("paid \u202eeulav\u202c ok\u200b!") == "paid \\u202eeulav\\u202c ok\\u200b!"
    assert clean("caf\u00e9 \u2713") == "caf\u00e9 \u2713"  # control: visible non-ASCII stays as it is


def test_the_tail_follows_a_log_past_its_cap_into_its_newest_segment(tmp_path: Path) -> None:
    """Past log_cap the broker writes an agent's output in further segments (broker.capture);
    the dashboard goes on showing the newest lines.  Control: before any rotation it reads the
    first segment as before."""
    from broker.capture import OutputLog
    from broker.dashboard.tail import LogTailer

    log = OutputLog(tmp_path, "alice-a1.log", cap=256 * 1024)
    log.write(b"first line\n")
    tailer = LogTailer(tmp_path)
    assert tailer.poll() == {"alice:a1": ["first line"]}
    for i in range(20_000):
        log.write(f"line {i:05d} {'z' * 40}\n".encode())
    seen: list[str] = []
    for _ in range(50):
        seen += tailer.poll().get("alice:a1", [])
        if seen and seen[-1].startswith("line 19999"):
            break
    assert seen[-1].startswith("line 19999 ")
    assert tailer.path_of("alice:a1") != tmp_path / "alice-a1.log"
