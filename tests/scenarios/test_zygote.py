"""The scenario runner's brokers forked from a warm interpreter behave as exec'd ones (scenarios/zygote.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agents.harness import Run
from broker.entry import conclave_argv
from scenarios.zygote import Forked, Zygote


def test_a_forked_broker_answers_as_an_execd_one_and_holds_none_of_the_zygotes_descriptors(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    missing = conclave_argv("run", "--team", str(tmp_path / "no-such-team.toml"), "--repo", str(tmp_path), "--state-dir", str(tmp_path / "state"))
    with Zygote() as zygote:
        # A refusal: the same exit code and the same sentence on stderr as the exec'd broker (the control).
        forked = zygote.popen(missing, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert isinstance(forked, Forked)
        _, forked_err = forked.communicate(timeout=120)
        execd = subprocess.run(missing, capture_output=True, text=True, env=env, timeout=120)
        assert execd.returncode != 0 and "no-such-team.toml" in execd.stderr
        assert (forked.returncode, forked_err) == (execd.returncode, execd.stderr)
        # Any other `conclave` command is forked too, and answers as the exec'd one: a refusal without a broker
        # (control: the same command exec'd), and its standard input read to the end.
        whoami = conclave_argv("whoami", "--json", "--state-dir", str(tmp_path / "nobody"))
        forked_whoami = zygote.popen(whoami, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert isinstance(forked_whoami, Forked)
        assert forked_whoami.communicate(timeout=120) == (lambda done: (done.stdout, done.stderr))(
            execd_whoami := subprocess.run(whoami, capture_output=True, text=True, env=env, timeout=120))
        assert forked_whoami.returncode == execd_whoami.returncode != 0
        # What is not a conclave command on this interpreter is exec'd as before.
        other = zygote.popen([str(Path(conclave_argv()[0])), "-c", "pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert isinstance(other, subprocess.Popen)
        other.communicate(timeout=120)

        # A running broker with an agent: its descriptors are its own, none of them the zygote's socket.
        control = {os.readlink(f"/proc/{zygote.process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote.process.pid}/fd")}
        with Run(tmp_path / "run", [{"name": "alice"}], launch=zygote.popen) as run:
            assert isinstance(run.process, Forked)
            assert run.puppet("alice").call("whoami")["agent"] == "alice"
            held = {os.readlink(f"/proc/{run.process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{run.process.pid}/fd")}
            sockets = {link for link in control if link.startswith("socket:")}
            assert sockets and not (held & sockets), (held, sockets)
            # An operator's command forked by Zygote.run reads what it is given on its standard input.
            body = "a body read from standard input " * 400  # 12,800 bytes (the limit is 16,384)
            sent = zygote.run(conclave_argv("msg", "send", "--to", "alice", "-", "--repo", str(run.repo), "--state-dir", str(run.state)),
                              env=env, input=body, timeout=120)
            assert sent.returncode == 0, sent.stderr
            assert run.puppet("alice").call("msg.inbox")[-1]["body"] == body
            summary = run.stop()
        assert summary is not None and [a["agent"] for a in summary["agents"]] == ["alice"]  # its stdout, read to the end


def test_a_forked_broker_judges_and_embeds_claims_as_an_execd_one_with_the_zygotes_warm_imports(tmp_path: Path) -> None:
    """The zygote imports numpy and detect-secrets' patterns (a broker's first claim needs both) before it forks:
    a forked broker refuses a credential with the same sentence and embeds an ordinary claim as an exec'd one."""
    secret = "CI pushes tags with the token ghp_Zq3mW8xY1vB6nK0pL4sT7uH2cR9dF5gJ8aE1 from the vault."
    ordinary = "The billing module rounds invoice totals to whole cents before tax."
    answers = []
    with Zygote() as zygote:
        maps = Path(f"/proc/{zygote.process.pid}/maps").read_text()
        assert "_multiarray_umath" in maps, "the zygote did not import numpy before forking"
        for name, launch in (("forked", zygote.popen), ("execd", subprocess.Popen)):
            with Run(tmp_path / name, [{"name": "alice"}], launch=launch) as run:
                assert isinstance(run.process, Forked) == (name == "forked")
                alice = run.puppet("alice")
                refused = alice.try_call("memory.remember", kind="discovery", text=secret)
                stored = alice.try_call("memory.remember", kind="discovery", text=ordinary)
                settled = run.op("memory.settle", timeout=120)
                answers.append((refused, stored["ok"], settled["settled"], settled["embedded"], settled["error"]))
    forked, execd = answers
    assert forked[0]["error"]["code"] == "rejected" and "GitHub" in forked[0]["error"]["message"], forked
    assert "ghp_Zq3m" not in forked[0]["error"]["message"]
    assert forked[1:] == (True, True, 1, None), forked
    assert forked == execd  # the control: the exec'd broker, which imports both itself
