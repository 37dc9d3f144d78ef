"""The dashboard in a real terminal: tmux runs ``conclave dashboard``, keys go in with
``send-keys``, and the screen comes back with ``capture-pane``.

This is the check that the installed command starts, draws and takes keys
where a person would use it -- not Textual's headless driver.  It needs
tmux; without it the test fails saying how to install it (``make test``
installs it when run as root with apt-get).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from agents.harness import Run
from broker.entry import conclave_argv
from broker.errors import ConclaveError
from tests.dashboard.dashtools import PRINTER


class Tmux:
    """A private tmux server (its own socket, no user config) in a directory the test made."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("tmux")
        if binary is None:
            pytest.fail("this test runs the dashboard in a real terminal and needs tmux, which is not on PATH: "
                        "install it (Debian/Ubuntu: apt-get install tmux; make test does this as root)")
        self.argv = [binary, "-S", str(root / "tmux.sock"), "-f", "/dev/null"]

    def __call__(self, *args: str) -> str:
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def screen(self, target: str) -> str:
        return self("capture-pane", "-p", "-t", target)

    def wait_for(self, target: str, check: Callable[[str], bool], what: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen(target)
            if check(text):
                return text
            if time.monotonic() > deadline:
                size = self("display-message", "-p", "-t", target, "#{window_width}x#{window_height}")
                raise AssertionError(f"timed out waiting for {what}; the screen ({size.strip()}) was:\n{text}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([*self.argv, "kill-server"], capture_output=True, timeout=20)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = Tmux(tmp_path)
    try:
        yield server
    finally:
        server.close()


def test_dashboard_in_a_real_terminal_shows_the_team_and_promotes_through_the_keyboard(tmp_path: Path, tmux: Tmux) -> None:
    run = Run(tmp_path / "run", [{"name": "alice"}, {"name": "bob"}, {"name": "printer", "command": PRINTER}])
    run.start(wait_for=["alice", "bob"])
    try:
        alice, bob = run.puppet("alice"), run.puppet("bob")
        alice.call("status.set", text="writing the tmux check")
        cid = alice.call("memory.remember", kind="discovery", text="The terminal check drives tmux with send-keys.")["id"]
        bob.call("memory.corroborate", id=cid, evidence="I looked: the terminal check uses tmux send-keys to drive the terminal.")
        command = shlex.join(
            # The shell tmux starts may export COLUMNS/LINES from the pane's first, default size;
            # Textual (through shutil) would believe them over the terminal.
            ["env", "-u", "CONCLAVE_TICKET", "-u", "CONCLAVE_SOCKET", "-u", "CONCLAVE_STATE_DIR", "-u", "COLUMNS", "-u", "LINES", "TERM=xterm-256color",
             *conclave_argv("dashboard", "--repo", str(run.repo), "--state-dir", str(run.state), "--refresh", "0.3")]
        )
        tmux("new-session", "-d", "-s", "dash", "-x", "200", "-y", "50", f"{command}; echo dashboard exited $?; sleep 60")
        screen = tmux.wait_for("dash", lambda s: all(w in s for w in ("broker running", "writing the tmux check", "printer:", "q Quit")), "the agents pane")
        assert "1 Agents" in screen
        # The printer's escapes (a window title, a screen clear) never reach the terminal.
        tmux("send-keys", "-t", "dash", "Down", "Down")
        tmux.wait_for("dash", lambda s: "output of printer:" in s and "printer line" in s, "the printer's output")
        assert "pwned" not in tmux("display-message", "-p", "-t", "dash", "#{pane_title}")
        # The claims pane: the biography and the trust graph of the selected claim.
        tmux("send-keys", "-t", "dash", "4")
        screen = tmux.wait_for("dash", lambda s: f"trust graph of claim {cid}" in s, "the claim's trust graph")
        assert "blind, counted" in screen and "[bob]" in screen
        tmux("send-keys", "-t", "dash", "p")
        tmux.wait_for("dash", lambda s: f"Promote claim #{cid} to trusted?" in s, "the confirmation dialog")
        tmux("send-keys", "-t", "dash", "-l", "seen in tmux")
        tmux("send-keys", "-t", "dash", "Enter")
        tmux.wait_for("dash", lambda s: f"claim #{cid} is now trusted" in s, "the promotion to be said")
        shown = run.op("memory.show", id=cid)
        assert shown["tier"] == "trusted" and shown["promotions"][0]["reason"] == "seen in tmux"
        tmux("send-keys", "-t", "dash", "q")
        tmux.wait_for("dash", lambda s: "dashboard exited 0" in s, "the dashboard to quit cleanly")
    finally:
        run.close()


def test_tmux_would_show_a_title_escape_that_reached_it(tmp_path: Path, tmux: Tmux) -> None:
    """Control for the title check above: the same escape, printed straight to the terminal, does retitle it."""
    tmux("new-session", "-d", "-s", "raw", "-x", "80", "-y", "10", "printf '\\033]2;pwned\\033\\\\'; sleep 30")
    deadline = time.monotonic() + 10
    while "pwned" not in tmux("display-message", "-p", "-t", "raw", "#{pane_title}"):
        assert time.monotonic() < deadline, "tmux never took the title escape"
        time.sleep(0.1)


def test_in_a_120x40_then_80x24_terminal_every_column_and_every_agent_stays_on_screen(tmp_path: Path, tmux: Tmux) -> None:
    """What the newcomer saw in a real terminal: at 120x40 a long status pushed `waits for` and `unread`
    off the right edge, and at 80x24 three agent rows showed.  The same terminal, resized by tmux."""
    names = ["alice", "bob", "carol", "dave", "erin", "frank"]
    run = Run(tmp_path / "run", [{"name": n} for n in names])
    run.start()
    waiter = None
    try:
        alice, bob, carol = run.puppet("alice"), run.puppet("bob"), run.puppet("carol")
        alice.call("status.set", text="refactoring the tokenizer's error recovery so that partial input keeps its positions")
        alice.call("lock.acquire", resources=["src/tokenizer/recovery.py"])
        carol.call("msg.send", to="alice", body="tell me when recovery.py is free")
        carol.call("msg.send", to="operator", body="The integration tests on the arm64 runner time out; raise the limit?")
        waiter = threading.Thread(target=lambda: bob.call("lock.acquire", resources=["src/tokenizer/recovery.py"], wait=120))
        waiter.start()
        run.wait_until(lambda: run.op("lock.list")["waiting"], what="bob in the wait line")
        command = shlex.join(
            ["env", "-u", "CONCLAVE_TICKET", "-u", "CONCLAVE_SOCKET", "-u", "CONCLAVE_STATE_DIR", "-u", "COLUMNS", "-u", "LINES", "TERM=xterm-256color",
             *conclave_argv("dashboard", "--repo", str(run.repo), "--state-dir", str(run.state), "--refresh", "0.3")]
        )
        tmux("new-session", "-d", "-s", "dash", "-x", "120", "-y", "40", f"{command}; sleep 60")
        screen = tmux.wait_for("dash", lambda s: "broker running" in s and "src/tokenizer/" in s and " bob:" in s, "the agents pane at 120x40")
        assert "waits for" in screen and "unread" in screen
        alice_line = next(line for line in screen.splitlines() if " alice:" in line)
        assert alice_line.rstrip().endswith(" 1")  # carol's unread mail, on alice's own line
        bob_line = next(line for line in screen.splitlines() if " bob:" in line)
        assert "src/tokenizer/" in bob_line  # what bob waits for, beside its name
        tmux("send-keys", "-t", "dash", "3")
        screen = tmux.wait_for("dash", lambda s: "operator's inbox (1 shown)" in s, "the inbox")
        assert "The integration tests on the arm64" in screen  # not cut at 17 characters
        # The same terminal, made small: every agent keeps a row.
        tmux("resize-window", "-t", "dash", "-x", "80", "-y", "24")
        tmux("send-keys", "-t", "dash", "1")
        screen = tmux.wait_for("dash", lambda s: all(f" {n}:" in s for n in names) and "unread" in s, "every agent at 80x24")
        assert len(screen.splitlines()[0]) <= 80
    finally:
        with contextlib.suppress(ConclaveError):
            run.puppet("alice").call("lock.release", resources=["src/tokenizer/recovery.py"])
        if waiter is not None:
            waiter.join(timeout=30)
        run.close()
