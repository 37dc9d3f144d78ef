"""Agents' logs are the broker's record: an agent can neither rewrite its log nor kill the broker through it.

Issue 22, section 3.  An agent used to get a descriptor into
``<state>/logs/<agent>-<session>.log`` for its stdout and stderr.  With it, it
truncated its own log and wrote a false history that ``conclave logs`` showed,
and it filled the file system until the broker died.  Now the broker reads the
agents' output through pipes and writes the logs itself (``broker.capture``):

* the rewrite has no descriptor to work with (a pipe cannot be truncated or
  seeked), and the log's path is outside every box;
* a file system that fills up under the logs is reported, the broker goes on
  (other agents' work is stored), and the log recovers by itself when space
  returns, saying how much was lost.

Both are attacks spelled out below, each with its control.  The full disk is
a small tmpfs over the logs in a user and mount namespace of the broker's
own, which works as an ordinary uid (tests/broker/test_as_user.py reruns this
file as uid 65534).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agents.harness import Run
from broker.runlog import segments
from tests.eventlog import events_of

pytestmark = pytest.mark.uid_independent("an agent rewriting its log, a full file system in a user namespace: the same for root and uid 65534")

REWRITE = textwrap.dedent(
    r"""
    import errno, glob, json, os, sys
    print("step 1: read the parser", flush=True)
    print("step 2: the tests fail in test_parser.py", flush=True)
    tried = {}
    def attempt(name, fn):
        try:
            fn()
            tried[name] = "done"
        except OSError as exc:
            tried[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    # With a descriptor into the log, these rewrite history.
    attempt("ftruncate", lambda: os.ftruncate(1, 0))
    attempt("lseek", lambda: os.lseek(1, 0, os.SEEK_SET))
    attempt("reopen", lambda: os.close(os.open("/proc/self/fd/1", os.O_WRONLY | os.O_TRUNC)))
    # By its path, through the state directory the broker named.
    logs = os.path.join(os.environ["CONCLAVE_STATE_DIR"], "logs")
    mine = glob.glob(os.path.join(logs, "*.log"))
    attempt("open_by_path", lambda: os.close(os.open(mine[0] if mine else os.path.join(logs, "x.log"), os.O_WRONLY | os.O_TRUNC)))
    os.write(1, b"FORGED: all tests pass, nothing else happened\n")
    sys.stderr.write(json.dumps(tried) + "\n")
    """
)


def test_an_agent_cannot_rewrite_its_own_log(tmp_path):
    """Attack: the agent truncates its stdout, seeks back, reopens it through /proc with O_TRUNC, and
    opens its log by path, then writes a false history.  Its log -- and `conclave logs` -- still show
    what it really printed, in order, with the forgery where it was printed.  Control: the same
    program given a descriptor into a file (what the broker used to hand every agent) rewrites it."""
    control = tmp_path / "control.log"
    with open(control, "wb") as out:
        subprocess.run([sys.executable, "-c", REWRITE], stdout=out, stderr=subprocess.PIPE, check=True,
                       env={**os.environ, "CONCLAVE_STATE_DIR": str(tmp_path / "nowhere")})  # fmt: skip
    assert control.read_text() == "FORGED: all tests pass, nothing else happened\n"  # history gone: the attack works on a file

    run = Run(tmp_path / "run", [{"name": "liar", "command": [sys.executable, "-c", REWRITE]}])
    run.start(wait_for=[])
    try:
        summary = run.wait_exit(timeout=120)
    finally:
        run.close()
    assert summary is not None and summary["exit_code"] == 0, run.stderr
    (log,) = (run.state / "logs").glob("liar-*.log")
    lines = log.read_text().splitlines()
    # Everything it printed, in the order it printed it: the forgery comes after the history, not instead of it.
    assert lines[:3] == ["step 1: read the parser", "step 2: the tests fail in test_parser.py", "FORGED: all tests pass, nothing else happened"]
    tried = json.loads(lines[3])
    assert tried["ftruncate"] == "EINVAL" and tried["lseek"] == "ESPIPE"  # a pipe: nothing to cut, nowhere to seek
    assert tried["reopen"] == "done"  # the same pipe again: more output, not a new file
    assert tried["open_by_path"] in ("EACCES", "ENOENT", "EPERM"), tried  # the state directory is outside its box
    shown = run.cli("logs")
    assert shown.returncode == 0, shown.stderr
    assert "step 1: read the parser" in shown.stdout and shown.stdout.index("step 2") < shown.stdout.index("FORGED")


FLOOD = textwrap.dedent(
    r"""
    import os, sys, time
    stop = sys.argv[1]
    i = 0
    while not os.path.exists(stop):
        sys.stdout.write("".join(f"flood {i + k:07d} " + "y" * 50 + "\n" for k in range(200)))
        sys.stdout.flush()
        i += 200
        time.sleep(0.01)
    print("flood stopped", flush=True)
    """
)
TMPFS = 1 << 20


def _namespace_prefix(logs: Path) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("unshare (util-linux) is needed to give the broker a small file system of its own; install util-linux")
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"this machine refuses an unprivileged user and mount namespace ({probe.stderr.strip()}); the full-disk test needs one")
    mount = f'mount -t tmpfs -o size={TMPFS},mode=0700 tmpfs "$0" && exec "$@"'
    return [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", mount, str(logs)]


def test_a_full_file_system_under_the_logs_is_reported_survived_and_recovered_from(tmp_path):
    """Attack: an agent prints without end while the file system under the logs is full.  The
    broker does not die: it reports the disk as full (an event naming the log and the error),
    another agent's memory write is stored meanwhile, and when space returns the log is written
    again, with a marker and an event counting what was lost.  Control: the disk really is full
    -- a write of the test's own into it fails with ENOSPC -- until the ballast goes."""
    stop = tmp_path / "run" / "repo" / "stop-flood"
    state = tmp_path / "run" / "state"
    (state / "logs").mkdir(parents=True, mode=0o700)
    team = [{"name": "flood", "command": [sys.executable, "-c", FLOOD, str(stop)]}, {"name": "bob"}]
    run = Run(tmp_path / "run", team, wrap=_namespace_prefix(state / "logs"))
    run.start(wait_for=["bob"])
    try:
        assert run.process is not None
        inside = Path(f"/proc/{run.process.pid}/root") / str(state / "logs").lstrip("/")  # the broker's view of its logs
        run.wait_until(lambda: any(inside.glob("flood-*.log")), timeout=30, what="the flood's log")
        ballast = inside / "ballast"
        with open(ballast, "wb") as f:
            try:
                f.write(b"\0" * TMPFS)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        run.wait_until(lambda: events_of(state, "agent.output_disk_full"), timeout=30, what="the broker to report the full disk")
        (full,) = events_of(state, "agent.output_disk_full")
        assert full["subject"].startswith("flood:") and "disk full under" in full["error"] and full["errno"] == errno.ENOSPC
        with pytest.raises(OSError) as refused:  # control: it is full for anyone
            with open(inside / "probe", "wb") as f:
                f.write(b"\0" * 65536)
        assert refused.value.errno == errno.ENOSPC
        # The broker goes on: another agent is answered and its write is stored.
        bob = run.puppet("bob")
        claim = bob.call("memory.remember", kind="discovery", text="The parser keeps its state in a module-level integer.")
        assert claim["tier"] == "unverified" and bob.call("whoami")["agent"] == "bob"
        ballast.unlink()
        (inside / "probe").unlink(missing_ok=True)
        # The flood ends as the space returns: flooding on, it would fill the file system again (a second loss)
        # before this test had read the first recovery, at any load that slows the test more than the flood.
        stop.touch()
        run.wait_until(lambda: events_of(state, "agent.output_recovered"), timeout=30, what="the log to be written again")
        (recovered,) = events_of(state, "agent.output_recovered")
        assert recovered["lost_bytes"] > 0 and recovered["lost_lines"] > 0
        (name,) = [p.name for p in inside.glob("flood-*.log")]
        text = b"".join(p.read_bytes() for p in segments(inside, name)).decode(errors="replace")
        assert f"[conclave: {recovered['lost_bytes']} bytes ({recovered['lost_lines']} lines) of output were lost here: disk full under" in text
        journal = [json.loads(x) for x in (inside / "run-1.jsonl").read_text().splitlines()]
        assert any(n["kind"] == "output_recovered" for n in journal)
        run.wait_until(lambda: "flood stopped" in b"".join(p.read_bytes() for p in segments(inside, name)).decode(errors="replace"),
                       timeout=30, what="the flood to stop")  # fmt: skip
        bob.exit()
        summary = run.wait_exit(timeout=60)
    finally:
        stop.touch()
        run.close()
    assert summary is not None and summary["exit_code"] == 0, run.stderr
    flood = next(a for a in summary["agents"] if a["agent"] == "flood")
    assert flood["output"]["lost_bytes"] == recovered["lost_bytes"] and "lost to a full disk" in flood["status"]
    (exit_event,) = [e for e in events_of(state, "agent.exit") if e["subject"].startswith("flood:")]
    assert exit_event["output"]["lost_bytes"] == recovered["lost_bytes"]
