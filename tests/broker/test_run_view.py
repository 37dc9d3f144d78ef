"""`conclave run` as the operator watches it: the agents' output prefixed with
their principals, the run's events in words, honest exit codes, and the same
streams read back by `conclave logs` from another terminal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agents.harness import Run, make_repo, operator_command
from broker.entry import conclave_argv

SESSION = r"[0-9a-f]{12}"


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}


def setup(tmp_path: Path, team: str) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path)
    team_file = tmp_path / "team.toml"
    team_file.write_text(team)
    return repo, team_file, tmp_path / "state"


def run_argv(repo: Path, team: Path, state: Path, *extra: str) -> list[str]:
    return conclave_argv("run", "--team", str(team), "--repo", str(repo), "--state-dir", str(state), "--grace", "1", *extra)


def cli(state: Path, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return operator_command(conclave_argv(*args, "--state-dir", str(state), "--repo", str(repo)), env=env(), timeout=60)


def line(out: str, who: str, mark: str, text: str) -> re.Match[str]:
    """The stream line from ``who`` (an agent name, or conclave) with ``mark`` (| output, > event) starting with ``text``."""
    prefix = re.escape(who) + (f":{SESSION}" if who != "conclave" else "")
    found = re.search(rf"^{prefix} +{re.escape(mark)} {re.escape(text)}.*$", out, re.MULTILINE)
    assert found, f"no line `{who} {mark} {text}...` in:\n{out}"
    return found


def journal(state: Path, run: int = 1) -> list[dict]:
    path = state / "logs" / f"run-{run}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


STORY = """
[[agent]]
name = "holder"
# Holds the lock until the waiter is in line (lock list names it), then long enough for the run to announce the wait.
command = ["sh", "-c", "conclave lock acquire data.txt > /dev/null; echo holding; for i in $(seq 100); do conclave lock list --json | grep -q waiter && break; sleep 0.2; done; sleep 4.5"]

[[agent]]
name = "waiter"
command = ["sh", "-c", "sleep 0.5; conclave lock acquire data.txt --wait 30 > /dev/null; echo got it; conclave msg send --to operator --subject 'waiter done' 'all yours' > /dev/null"]

[[agent]]
name = "flaky"
command = ["sh", "-c", "echo trying; exit 3"]
restart = "on-failure"
max_restarts = 1

[[agent]]
name = "ghost"
command = ["sh", "-c", "no-such-program-anywhere"]

[[agent]]
name = "painter"
command = ["sh", "-c", "printf 'paint \\\\033[2J\\\\033[31mred \\\\342\\\\200\\\\256rev [bold]x[/]\\\\n'; printf 'no newline at the end'"]
"""


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    repo, team, state = setup(tmp_path_factory.mktemp("story"), STORY)
    out = operator_command(run_argv(repo, team, state), env=env(), timeout=120)
    return out, repo, state


def test_the_run_streams_each_agents_output_under_its_principal(story):
    out, _, state = story
    stream = out.stdout
    holding = line(stream, "holder", "|", "holding")
    line(stream, "waiter", "|", "got it")
    line(stream, "painter", "|", "paint \\x1b[2J\\x1b[31mred \\u202erev [bold]x[/]")
    line(stream, "painter", "|", "no newline at the end")  # a last line without its newline is shown at exit
    assert "\x1b" not in stream and "\u202e" not in stream, "agent output reached the terminal raw"
    # Every output line comes after its principal's spawn and before its exit.
    spawned = line(stream, "holder", ">", "started (pid")
    ended = line(stream, "holder", ">", "exit 0")
    assert spawned.start() < holding.start() < ended.start()
    # The log keeps the bytes exactly; the view only spelled them out.
    painter_log = next((state / "logs").glob("painter-*.log")).read_bytes()
    assert painter_log == b"paint \x1b[2J\x1b[31mred \xe2\x80\xaerev [bold]x[/]\nno newline at the end"


def test_the_run_shows_its_events_in_words(story):
    out, _, state = story
    stream = out.stdout
    line(stream, "conclave", ">", "run 1 on ")
    line(stream, "flaky", ">", "exit 3; restarting (attempt 2 of 2 next)")
    line(stream, "flaky", ">", "started (pid")
    line(stream, "flaky", ">", "exit 3 (attempt 2 of 2, gave up)")
    line(stream, "ghost", ">", "exit 127: command not found")
    line(stream, "waiter", ">", "waiting ")
    assert re.search(rf"waiting \d+ s for data\.txt \(exclusive\), #1 in line; held by holder:{SESSION}  \[conclave lock list\]", stream)
    line(stream, "waiter", ">", "mail to the operator, message 1 (thread t1): waiter done")
    line(stream, "conclave", ">", "run 1 ended: every agent has exited; 2 failed")
    # The journal records the same events, for `conclave logs` and for the record.
    kinds = [n["kind"] for n in journal(state)]
    assert kinds[0] == "run" and kinds[-1] == "end" and kinds.count("spawn") == 6 and kinds.count("exit") == 6
    assert {"lock_wait", "mail"} <= set(kinds)


def test_a_failed_agent_makes_the_run_exit_1_and_the_summary_says_who(story):
    out, _, _ = story
    assert out.returncode == 1, out.stderr
    assert re.search(rf"2 failed: (flaky:{SESSION}, ghost:{SESSION}|ghost:{SESSION}, flaky:{SESSION}); exit code 1", out.stdout), out.stdout
    assert "exit 127: command not found [FAILED]" in out.stdout
    # Control: the agents that did their work are not failures.
    assert re.search(r"holder:\S+ +│ - +│ exit 0 ", out.stdout)


def test_logs_reads_the_same_streams_afterwards(story):
    out, repo, state = story
    shown = cli(state, repo, "logs")
    assert shown.returncode == 0, shown.stderr
    ours = [ln.split("| ", 1)[1] for ln in shown.stdout.splitlines() if " | " in ln]
    streamed = [ln.split("| ", 1)[1] for ln in out.stdout.splitlines() if re.match(rf"^\w+:{SESSION} +\| ", ln)]
    assert sorted(ours) == sorted(streamed) and len(ours) >= 6
    one = cli(state, repo, "logs", "waiter")
    assert one.returncode == 0 and "got it" in one.stdout and "holding" not in one.stdout
    assert "run 1 ended" in one.stdout  # the run's own events stay in an agent's view
    unknown = cli(state, repo, "logs", "nobody")
    assert unknown.returncode == 2 and "no agent named nobody in run 1" in unknown.stderr and "holder" in unknown.stderr
    as_json = json.loads(cli(state, repo, "logs", "painter", "--json").stdout)
    outputs = [e["text"] for e in as_json if e["type"] == "output"]
    assert outputs[0] == "paint \x1b[2J\x1b[31mred \u202erev [bold]x[/]"  # --json carries the exact text
    missing = cli(state, repo, "logs", "--run", "7")
    assert missing.returncode == 2 and "runs recorded: 1" in missing.stderr


def test_quiet_shows_only_the_first_line_and_the_summary(tmp_path):
    repo, team, state = setup(tmp_path, '[[agent]]\nname = "a"\ncommand = ["sh", "-c", "echo chatter; exit 2"]\n')
    out = operator_command(run_argv(repo, team, state, "--quiet"), env=env(), timeout=60)
    assert out.returncode == 1
    assert out.stdout.startswith("conclave: broker for") and "chatter" not in out.stdout and " | " not in out.stdout
    assert "exit 2 [FAILED]" in out.stdout
    # The journal and the log are written all the same.
    assert [n["kind"] for n in journal(state)] == ["run", "spawn", "exit", "end"]
    assert next((state / "logs").glob("a-*.log")).read_text() == "chatter\n"


def test_a_run_where_every_agent_succeeds_exits_0_and_json_says_so(tmp_path):
    repo, team, state = setup(tmp_path, '[[agent]]\nname = "a"\ncommand = ["true"]\n\n[[agent]]\nname = "b"\ncommand = ["sh", "-c", "echo hi"]\n')
    out = operator_command(run_argv(repo, team, state, "--json"), env=env(), timeout=60)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)  # --json: one document, no stream around it
    assert summary["exit_code"] == 0 and summary["failed"] == [] and summary["run"] == 1
    assert {a["status"] for a in summary["agents"]} == {"exit 0"} and not any(a["failed"] for a in summary["agents"])


def wait_for_spawns(state: Path, count: int, *, run: int = 1, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while sum(1 for n in journal(state, run) if n["kind"] == "spawn") < count:
        assert time.monotonic() < deadline, "agents did not start"
        time.sleep(0.05)


def test_ctrl_c_says_what_the_grace_period_does_and_exits_130(tmp_path):
    team = (
        '[[agent]]\nname = "calm"\ncommand = ["sleep", "60"]\n\n'
        "[[agent]]\nname = \"stubborn\"\ncommand = [\"sh\", \"-c\", \"trap 'echo ignoring TERM' TERM; echo ready; while true; do sleep 0.1; done\"]\n"
    )
    repo, team_file, state = setup(tmp_path, team)
    process = subprocess.Popen(run_argv(repo, team_file, state), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    wait_for_spawns(state, 2)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    line(out, "conclave", ">", "Ctrl-C (SIGINT): stopping. SIGTERM sent to 2 agent(s); SIGKILL in 1 s to any still running")
    line(out, "stubborn", ">", "killed by SIGKILL (stopped by the broker at shutdown)")
    line(out, "calm", ">", "killed by SIGTERM (stopped by the broker at shutdown)")
    # Agents the broker stopped are not failures: the run's code says it was interrupted.
    line(out, "conclave", ">", "run 1 ended: stopped by SIGINT")
    assert "[FAILED]" not in out


def test_sigterm_exits_143_and_conclave_stop_exits_5(tmp_path):
    repo, team_file, state = setup(tmp_path, '[[agent]]\nname = "calm"\ncommand = ["sleep", "60"]\n')
    process = subprocess.Popen(run_argv(repo, team_file, state, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    wait_for_spawns(state, 1)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 143 and json.loads(out)["stopped_by"] == "SIGTERM" and json.loads(out)["exit_code"] == 143
    process = subprocess.Popen(run_argv(repo, team_file, state, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    wait_for_spawns(state, 1, run=2)
    assert cli(state, repo, "stop").returncode == 0
    out, _ = process.communicate(timeout=60)
    summary = json.loads(out)
    assert process.returncode == 5 and summary["stopped_by"] == "operator" and summary["run"] == 2


def test_a_terminal_that_never_reads_does_not_hold_up_the_broker(tmp_path):
    """The operator's terminal stops reading (Ctrl-S, a stuck link).  The agents'
    output fills it; the broker must still answer requests and finish the run,
    shed agents' lines from the view only -- never its own events -- saying how
    many and where the full record is, and keep every line in the log."""
    import pty

    lines = 300_000
    team = (
        f'[[agent]]\nname = "flood"\ncommand = ["sh", "-c", "seq {lines}; conclave whoami"]\n\n'
        '[[agent]]\nname = "asker"\ncommand = ["sh", "-c", "sleep 1; for i in 1 2 3 4 5; do conclave whoami > /dev/null || exit 9; done; echo asked"]\n'
    )
    repo, team_file, state = setup(tmp_path, team)
    leader, follower = pty.openpty()  # a real terminal, whose reader never reads
    process = subprocess.Popen(run_argv(repo, team_file, state), stdout=follower, stderr=subprocess.PIPE, env=env())
    os.close(follower)
    try:
        deadline = time.monotonic() + 90
        while not any(n["kind"] == "end" for n in journal(state)):
            assert time.monotonic() < deadline, "the run did not finish while its terminal was not reading"
            assert process.poll() is None
            time.sleep(0.1)
        exits = {n["principal"].split(":")[0]: n["text"] for n in journal(state) if n["kind"] == "exit"}
        assert exits == {"flood": "exit 0", "asker": "exit 0"}
        shown = bytearray()
        os.set_blocking(leader, False)
        while process.poll() is None or _readable(leader):
            try:
                shown += os.read(leader, 1 << 16)
            except BlockingIOError:
                time.sleep(0.05)
            except OSError:  # the terminal's other end closed
                break
        assert process.wait(timeout=60) == 0
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    assert b"line(s) not shown: the terminal fell behind; every line is in the logs (conclave logs --run 1; files in " in shown
    # The broker's own events were never shed: the run's end is on the terminal.
    assert b"run 1 ended: every agent has exited" in shown
    flood_log = next((state / "logs").glob("flood-*.log")).read_text().splitlines()
    assert flood_log[:lines] == [str(i) for i in range(1, lines + 1)] and flood_log[lines].startswith("flood:")


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0.2)[0])


def test_a_file_gets_every_line_of_a_burst_in_order(tmp_path):
    """Issue 23: a run written to a file lost 13,000 of 20,000 lines.  To a file (or a pipe,
    or CI) the view drops nothing: 100,000 lines from 8 agents at once arrive whole, each
    agent's in its order, with every event of the run -- and each agent's exit after its
    last line."""
    import sys

    from agents.harness import toml_value

    per_agent = 12_500
    script = "import sys\nfor n in range({count}): sys.stdout.write(f'{agent} {{n}}\\n')"
    team = "".join(
        f'[[agent]]\nname = "burst{i}"\ncommand = {toml_value([sys.executable, "-c", script.format(count=per_agent, agent=i)])}\n\n' for i in range(8)
    )
    repo, team_file, state = setup(tmp_path, team)
    out_file = tmp_path / "run.out"
    with open(out_file, "wb") as sink:
        done = subprocess.run(run_argv(repo, team_file, state), stdout=sink, stderr=subprocess.PIPE, env=env(), timeout=300)
    assert done.returncode == 0, done.stderr
    text = out_file.read_text()
    assert "not shown" not in text
    for i in range(8):
        mine = re.findall(rf"^burst{i}:{SESSION} +\| {i} (\d+)$", text, re.MULTILINE)
        assert [int(n) for n in mine] == list(range(per_agent)), f"burst{i}: {len(mine)} of {per_agent} lines, or out of order"
        last = text.rindex(f"| {i} {per_agent - 1}\n")
        assert last < line(text, f"burst{i}", ">", "exit 0").start()
    line(text, "conclave", ">", "run 1 ended: every agent has exited")


def follow_from_before(run: Run, *, pause: float, why: str) -> tuple[int, str, str]:
    """Start `conclave logs -f` on ``run``'s state directory, wait ``pause`` seconds (it must still be
    waiting: ``why``), start the run; what the follower printed once the run is over."""
    follower = subprocess.Popen(
        conclave_argv("logs", "-f", "--state-dir", str(run.state), "--repo", str(run.repo)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()
    )
    try:
        time.sleep(pause)
        assert follower.poll() is None, why
        run.start(wait_for=[])
        out, err = follower.communicate(timeout=60)
    finally:
        run.close()
        if follower.poll() is None:
            follower.kill()
    return follower.returncode, out, err


def test_logs_follow_waits_for_a_run_and_ends_with_it(tmp_path):
    run = Run(tmp_path, [{"name": "talker", "command": ["sh", "-c", "echo one; sleep 1.5; echo two"]}])
    code, out, err = follow_from_before(run, pause=0.5, why="logs -f must wait for a run to start")
    assert code == 0, err
    assert out.startswith("waiting for a run to start")
    one, two, ended = line(out, "talker", "|", "one"), line(out, "talker", "|", "two"), line(out, "talker", ">", "exit 0")
    assert one.start() < two.start() < ended.start()
    line(out, "conclave", ">", "run 1 ended: every agent has exited")


def test_a_waiting_logs_follow_stops_on_ctrl_c_even_started_with_sigint_ignored(tmp_path):
    """`logs -f` waits "until Ctrl-C" for a run; a background job of a script inherits SIGINT ignored, and
    Python then installs no handler: before `ctrl_c_stops` it waited for ever.  Control: the same follower
    is still waiting a moment on (it is the signal that ends it)."""
    repo = make_repo(tmp_path / "repo")
    follower = subprocess.Popen(
        conclave_argv("logs", "-f", "--state-dir", str(tmp_path / "state"), "--repo", str(repo)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert follower.stdout is not None and follower.stdout.readline().startswith("waiting for a run to start")
        time.sleep(0.3)
        assert follower.poll() is None
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=10)
        assert follower.returncode == 0 and "Traceback" not in out + err, (follower.returncode, out, err)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()


def test_logs_reads_only_log_files_never_where_a_link_or_the_journal_points(story, tmp_path):
    """Attack: with write access to logs/, a process swaps its log for a symlink to
    a secret, or writes a journal line whose log is ``../../secret``; `conclave logs`
    run by the operator must print neither (and never block on a FIFO)."""
    import shutil

    _, repo, state = story
    copy = tmp_path / "state"
    shutil.copytree(state, copy, symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("the operator's private key\n")
    painter_log = next((copy / "logs").glob("painter-*.log"))
    painter_log.unlink()
    painter_log.symlink_to(secret)
    with open(copy / "logs" / "run-1.jsonl", "a") as journal_file:
        journal_file.write(json.dumps({"at": "2030-01-01T00:00:00+00:00", "kind": "spawn", "text": "forged", "principal": "evil:0a1b2c3d4e5f", "log": "../../secret.txt"}) + "\n")
    os.mkfifo(copy / "logs" / "lurker-abcdef.log")
    with open(copy / "logs" / "run-1.jsonl", "a") as journal_file:
        journal_file.write(json.dumps({"at": "2030-01-01T00:00:00+00:00", "kind": "spawn", "text": "forged", "principal": "lurker:abcdef", "log": "lurker-abcdef.log"}) + "\n")
    out = cli(copy, repo, "logs")
    assert out.returncode == 0, out.stderr
    assert "private key" not in out.stdout
    # Control: the same command shows the logs that are ordinary files.
    assert "holding" in out.stdout and "got it" in out.stdout


def test_a_reader_that_goes_away_leaves_the_run_and_its_exit_code_alone(tmp_path: Path) -> None:
    """`conclave run | head -1`: the reader closes the pipe at once; the agents still finish,
    and the exit code is the run's own (0 here; 1 for a failed agent), not the broken pipe's."""
    for code, expected in ((0, 0), (3, 1)):
        where = tmp_path / f"exit{code}"
        where.mkdir()
        team = f"""
[[agent]]
name = "chatty"
command = ["sh", "-c", "for i in $(seq 1 30); do echo line $i; sleep 0.02; done; conclave msg send --to operator done > /dev/null; exit {code}"]
"""
        repo, team_file, state = setup(where, team)
        process = subprocess.Popen(run_argv(repo, team_file, state), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
        assert process.stdout is not None
        process.stdout.readline()
        process.stdout.close()  # the reader is gone
        assert process.wait(timeout=60) == expected, process.stderr.read() if process.stderr else ""
        # The agent ran to its end: its mail is there.
        inbox = cli(state, repo, "msg", "inbox", "--json")
        assert [m["body"] for m in json.loads(inbox.stdout)] == ["done"], inbox.stderr


def test_logs_shows_every_line_after_a_five_megabyte_one(tmp_path):
    """Issue 23: a 5 MB line hid the lines after it from `conclave logs` and `logs --json`.
    The long line is cut and marked, never swallowed, and every line after it is shown;
    the log file keeps all of it."""
    import sys

    from agents.harness import toml_value

    script = "import sys\nsys.stdout.write('before\\n' + 'x' * 5_000_000 + '\\n')\nfor i in range(3): print('after', i)"
    repo, team_file, state = setup(tmp_path, f'[[agent]]\nname = "long"\ncommand = {toml_value([sys.executable, "-c", script])}\n')
    ran = operator_command(run_argv(repo, team_file, state), env=env(), timeout=120)
    assert ran.returncode == 0, ran.stderr
    for shown in (ran.stdout, cli(state, repo, "logs").stdout):  # the run view, and `conclave logs` afterwards
        texts = [ln.split("| ", 1)[1] for ln in shown.splitlines() if re.match(rf"^long:{SESSION} +\| ", ln)]
        assert texts[0] == "before" and texts[2:] == ["after 0", "after 1", "after 2"], texts[:1] + [t[:80] for t in texts[1:]]
        assert texts[1].startswith("xxxx") and texts[1].endswith("more characters in the log)") and len(texts[1]) < 10_000
    as_json = json.loads(cli(state, repo, "logs", "--json").stdout)
    outputs = [e for e in as_json if e["type"] == "output"]
    assert [e["text"] for e in outputs if not e.get("cut")] == ["before", "after 0", "after 1", "after 2"]
    (cut,) = [e for e in outputs if e.get("cut")]
    assert set(cut["text"]) == {"x"} and len(cut["text"]) == 1 << 16
    log = next((state / "logs").glob("long-*.log")).read_bytes()
    assert log == b"before\n" + b"x" * 5_000_000 + b"\nafter 0\nafter 1\nafter 2\n"  # the log keeps every byte


def test_logs_follow_started_between_runs_follows_the_next_run(tmp_path):
    """Issue 23: `conclave logs -f` started after one run ended printed that run and exited.
    Started before the next run, it waits for it and follows it to its end."""
    first = Run(tmp_path, [{"name": "early", "command": ["sh", "-c", "echo from run one"]}])
    first.start(wait_for=[])
    assert first.process is not None and first.process.wait(timeout=60) == 0
    first.close()
    second = Run(tmp_path, [{"name": "late", "command": ["sh", "-c", "echo from run two; sleep 1; echo still run two"]}], reuse=True)
    code, out, err = follow_from_before(second, pause=1.0, why="logs -f must wait for the next run, not end with the last one")
    assert code == 0, err
    assert out.startswith("run 1 has ended (conclave logs --run 1 shows it); waiting for the next run")
    assert "from run one" not in out
    one, two = line(out, "late", "|", "from run two"), line(out, "late", "|", "still run two")
    assert one.start() < two.start() < line(out, "conclave", ">", "run 2 ended: every agent has exited").start()
