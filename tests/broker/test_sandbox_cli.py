"""What `conclave run` and `conclave doctor` say about boxes, and what they refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agents.harness import make_repo
from broker.sandbox import machine as sandbox_machine

MACHINE = sandbox_machine.probe()


def conclave(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return subprocess.run([sys.executable, "-I", "-m", "broker.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def team(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "team.toml"
    path.write_text(body)
    return path


def test_doctor_reports_what_the_kernel_allows(tmp_path: Path) -> None:
    out = conclave("doctor", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["landlock_abi"] == MACHINE.landlock_abi and report["user_namespaces"] == MACHINE.user_namespaces
    assert report["strongest"] == MACHINE.strongest
    assert set(report["levels"]) == {"strict", "landlock", "off"} and report["levels"]["off"] == "available"
    assert any("T2" in k for k in report["threats"]) and any("T3" in k for k in report["threats"])
    human = conclave("doctor")
    assert human.returncode == 0 and f"default sandbox: {MACHINE.strongest}" in human.stdout
    flat = " ".join(human.stdout.split())
    assert "off: NO protection against T2: an unboxed agent can ptrace your shell and make it run `conclave memory promote`" in flat
    assert report["pid_namespaces"] == MACHINE.pid_namespaces
    assert report["threats"]["leftover processes, off"].startswith(("its cgroup", "its launcher's sweep"))
    # From a directory under /tmp (which a strict box replaces) the answer is the same.
    elsewhere = conclave("doctor", "--json", cwd=tmp_path)
    assert json.loads(elsewhere.stdout)["strongest"] == MACHINE.strongest


def test_run_prints_each_agents_box_and_off_is_loud(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    path = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\n\n[[agent]]\nname = "bob"\ncommand = ["true"]\nsandbox = "off"\n')
    out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "state"))
    assert out.returncode == 0, out.stderr
    assert f"alice: sandbox {MACHINE.strongest}" in out.stdout
    assert "bob: sandbox off -- NO SANDBOX: NO protection against T2" in out.stdout
    # Said in those words: what an unboxed agent can do to the person, and that lineage is no defence there.
    flat = " ".join(out.stdout.split())
    assert "can ptrace your shell and make it run `conclave memory promote`" in flat
    assert "the lineage check is no defence at this level" in flat
    summary = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "state2"), "--json")
    boxes = {a["agent"]: a["sandbox"] for a in json.loads(summary.stdout)["agents"]}
    assert boxes == {"alice": MACHINE.strongest, "bob": "off"}


def test_a_state_dir_inside_the_work_tree_is_refused_while_any_agent_is_boxed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    boxed = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    inside = repo / ".conclave"
    out = conclave("run", "--team", str(boxed), "--repo", str(repo), "--state-dir", str(inside))
    assert out.returncode == 2 and "inside the work tree" in out.stderr and "alice" in out.stderr
    assert not inside.exists()  # refused before anything was written
    # Control: every agent unboxed, the old layout still runs (and stays out of git's way).
    unboxed = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\nsandbox = "off"\n')
    out = conclave("run", "--team", str(unboxed), "--repo", str(repo), "--state-dir", str(inside))
    assert out.returncode == 0, out.stderr
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == ""


def test_a_box_that_would_open_the_state_dir_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    state = tmp_path / "state"
    path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["true"]\nallow_read = ["{tmp_path}"]\n')
    out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(state))
    assert out.returncode == 2 and "would let it reach the state directory" in out.stderr
    # Control: a path beside the state directory is fine.
    (tmp_path / "data").mkdir()
    path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["true"]\nallow_read = ["{tmp_path / "data"}"]\n')
    assert conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(state)).returncode == 0


def test_a_level_this_machine_cannot_honour_is_refused_at_start(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    path = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\nsandbox = "sometimes"\n')
    out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "state"))
    assert out.returncode == 2 and "sandbox must be one of strict, landlock, off" in out.stderr
    missing = [level for level in ("strict", "landlock") if MACHINE.offers(level) is not None]
    for level in missing:  # on this machine both are offered; elsewhere the refusal names why
        path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["true"]\nsandbox = "{level}"\n')
        out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "state"))
        assert out.returncode == 2 and "conclave doctor" in out.stderr
    # Control: every level the machine offers runs.
    for level in ("strict", "landlock", "off"):
        if MACHINE.offers(level) is None:
            path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["true"]\nsandbox = "{level}"\n')
            out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / f"s-{level}"), "--json")
            assert out.returncode == 0 and json.loads(out.stdout)["agents"][0]["exit_code"] == 0, out.stderr


def test_deputies_variables_never_reach_an_agent(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    report = repo / "env.txt"
    path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["sh", "-c", "env > {report}"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update(TMUX="/tmp/tmux-0/default,1,0", DBUS_SESSION_BUS_ADDRESS="unix:path=/run/user/0/bus", SSH_AUTH_SOCK="/tmp/ssh-x/agent.1",
               VSCODE_IPC_HOOK_CLI="/run/user/0/vscode.sock", KEEP_ME="yes")
    out = subprocess.run([sys.executable, "-I", "-m", "broker.cli", "run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = dict(line.split("=", 1) for line in report.read_text().splitlines() if "=" in line)
    assert not {"TMUX", "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "VSCODE_IPC_HOOK_CLI"} & set(seen)
    assert seen["KEEP_ME"] == "yes" and "CONCLAVE_TICKET" in seen  # control: the rest of the environment arrives


def test_the_run_summary_counts_what_an_agent_left_behind(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    path = team(
        tmp_path,
        '[[agent]]\nname = "alice"\ncommand = ["sh", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 & exit 0"]\n\n'
        '[[agent]]\nname = "bob"\ncommand = ["true"]\n',
    )
    human = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s1"))
    assert human.returncode == 0, human.stderr
    assert "alice:" in human.stdout and "left 1 process(es) behind; killed at its exit" in human.stdout
    assert "bob:" not in human.stdout.split("exit code 0")[-1]  # control: bob left nothing, and is not named
    summary = json.loads(conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s2"), "--json").stdout)
    assert {a["agent"]: a["leftovers"] for a in summary["agents"]} == {"alice": 1, "bob": 0}


def test_what_each_level_guarantees_about_leftovers_is_said_in_words() -> None:
    """The banner and `doctor` call the launcher's sweep weaker whenever it is all there is."""
    from broker.sandbox.machine import Machine

    bare = Machine(landlock_abi=7, user_namespaces=True, user_namespaces_error=None, cgroup=None, uid=1000, pid_namespaces=False)
    assert bare.weaker("strict") and bare.weaker("landlock")
    assert bare.leftovers("landlock").startswith("WEAKER: no PID namespace or delegated cgroup")
    assert bare.process_share("landlock").startswith("none: one agent can take every process")
    # Control: a PID namespace (strict) or a delegated cgroup (any level) is not the weaker sweep.
    full = Machine(landlock_abi=7, user_namespaces=True, user_namespaces_error=None, cgroup=Path("/sys/fs/cgroup/user"), uid=1000, pid_namespaces=True)
    assert not full.weaker("strict") and "kernel kills everything it started" in full.leftovers("strict")
    assert not full.weaker("landlock") and "cgroup.kill" in full.leftovers("landlock")
    assert full.process_share("strict").startswith("max_processes (RLIMIT_NPROC in its own user namespace")
    assert Machine(landlock_abi=7, user_namespaces=True, user_namespaces_error=None, cgroup=None, uid=0).process_share("strict").startswith(
        "none: uid 0 is exempt"
    )
