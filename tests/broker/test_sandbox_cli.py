"""What `conclave run` and `conclave doctor` say about boxes, and what they refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agents.harness import make_repo
from broker.sandbox import machine as sandbox_machine
from tests.conclave_run import conclave as conclave_command
from tests.conclave_run import conclave_run, operator_env

MACHINE = sandbox_machine.probe()


def conclave(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A `conclave` command in a process of its own, in ``cwd`` (forked warm: tests/conclave_run.py)."""
    return conclave_command(*args, cwd=cwd)


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
    # The memory's embedder, and the trained prefilter probe whose weights are this model's.
    memory = report["features"]["memory"]
    assert memory["working"] is True and memory["probe"] is True, memory
    assert "the trained prefilter probe is on" in flat
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
    env = operator_env()
    env.update(TMUX="/tmp/tmux-0/default,1,0", DBUS_SESSION_BUS_ADDRESS="unix:path=/run/user/0/bus", SSH_AUTH_SOCK="/tmp/ssh-x/agent.1",
               VSCODE_IPC_HOOK_CLI="/run/user/0/vscode.sock", KEEP_ME="yes",
               PGPASSWORD="the-brokers-password", PGPASSFILE="/home/someone/broker.pgpass")  # the broker's own credentials
    # Exec'd, not forked from the suite's warm interpreter: the environment a fresh `conclave run` starts with, whole.
    out = subprocess.run([sys.executable, "-I", "-m", "broker.cli", "run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = dict(line.split("=", 1) for line in report.read_text().splitlines() if "=" in line)
    assert not {"TMUX", "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "VSCODE_IPC_HOOK_CLI", "PGPASSWORD", "PGPASSFILE"} & set(seen)
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


def test_a_work_tree_that_is_conclaves_own_source_is_refused_while_any_agent_is_boxed(tmp_path: Path) -> None:
    """Developing conclave with conclave, from an install whose source is the work tree itself: no box
    can let agents write the tree and keep conclave read-only, so `conclave run` says so and how to fix it."""
    import shutil

    from agents.harness import source_venv

    root = Path(__file__).resolve().parents[2]
    repo = make_repo(tmp_path)
    for package in ("store", "broker", "memory", "locks", "agents", "scenarios"):
        shutil.copytree(root / package, repo / package)
    import trio

    python = source_venv(tmp_path / "v", repo, packages=Path(trio.__file__).resolve().parents[1])  # its sys.path names the work tree itself
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}

    def run(body: str, state: str) -> subprocess.CompletedProcess[str]:
        path = team(tmp_path, body)
        argv = [str(python), "-I", "-m", "broker.cli", "run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / state)]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    out = run('[[agent]]\nname = "alice"\ncommand = ["true"]\n', "s1")
    assert out.returncode == 2 and "conclave's own installation" in out.stderr and "Install conclave outside the work tree" in out.stderr, out.stderr
    # Control: with every agent unboxed there is nothing a box could promise, and it runs.
    out = run('[[agent]]\nname = "alice"\ncommand = ["true"]\nsandbox = "off"\n', "s2")
    assert out.returncode == 0, out.stderr


def test_a_state_dir_inside_what_every_box_reads_is_refused(tmp_path: Path) -> None:
    """/srv, /opt, /var/lib and the toolchains under home are read by every box, including boxes that
    started before a state directory there was made (Landlock's grants are fixed at start)."""
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    (home / ".cargo" / "bin").mkdir(parents=True)
    path = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\n')
    env = operator_env(HOME=str(home))

    def run(state: Path) -> subprocess.CompletedProcess[str]:
        return conclave_run("--team", str(path), "--repo", str(repo), "--state-dir", str(state), env=env)

    for state in (Path("/srv") / f"conclave-refused-{os.getpid()}", home / ".cargo" / "bin" / "state"):
        out = run(state)
        assert out.returncode == 2 and "which every agent's box may read" in out.stderr, (state, out.stderr)
        assert not state.exists()  # refused before anything was made
    # Control: a state directory of its own elsewhere runs.
    assert run(tmp_path / "state").returncode == 0


def test_a_box_whose_grants_would_hold_something_trusted_is_refused(tmp_path: Path) -> None:
    """allow_write holding your home, a credential, another project's state directory or what your own tools
    run from home (a dot entry such as pip's cache or ~/.local/bin, ~/bin, and where a link there leads); allow_read reaching
    into a state directory a broker registered: refused at start, naming the path.  (An allow_read that
    holds another project's state directory is granted with it carved out: tests/containment/test_grants.py.)"""
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    # Where your own shell finds programs: ~/.local/bin is a link to a directory outside home.
    (tmp_path / "programs").mkdir()
    (home / ".local").mkdir()
    (home / ".local" / "bin").symlink_to(tmp_path / "programs")
    env = operator_env(HOME=str(home), XDG_STATE_HOME=str(tmp_path / "xdg"))
    other = tmp_path / "shared" / "other-state"

    def run(body: str, state: str) -> subprocess.CompletedProcess[str]:
        path = team(tmp_path, '[[agent]]\nname = "alice"\ncommand = ["true"]\n' + body)
        return conclave_run("--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / state), env=env)

    # Another project's broker registers its state directory.
    assert run('sandbox = "off"\n', str(other.relative_to(tmp_path))).returncode == 0
    refusals = {
        f'allow_write = ["{home}"]\n': "holds your home directory",
        f'allow_write = ["{home / ".aws"}"]\n': "which holds credentials",
        f'allow_write = ["{tmp_path / "shared"}"]\n': "would let it write the state directory",
        f'allow_read = ["{other / "logs"}"]\n': "would let it reach the state directory",
        # A wheel planted in pip's cache, a program on your PATH: run as you at your next command.
        f'allow_write = ["{home / ".cache" / "pip"}"]\n': "your own shell and tools run or trust",
        f'allow_write = ["{home / "bin"}"]\n': "your own shell and tools run or trust",
        f'allow_write = ["{tmp_path / "programs"}"]\n': "your own shell and tools run or trust",
    }
    for body, words in refusals.items():
        out = run(body, "s1")
        assert out.returncode == 2 and words in out.stderr, (body, out.stderr)
    # Control: a directory beside them is fine.
    (tmp_path / "data").mkdir()
    (home / "projects" / "data").mkdir(parents=True)
    body = f'allow_write = ["{tmp_path / "data"}", "{home / "projects" / "data"}"]\nallow_read = ["{home / ".cargo"}"]\n'
    out = run(body, "s2")
    assert out.returncode == 0, out.stderr


def test_a_write_grant_a_box_could_re_point_is_refused(tmp_path: Path) -> None:
    """An allow_write beneath the work tree or beneath another agent's allow_write, or one holding the
    tree: a box that writes around it could put a symbolic link in its place, and the next box built
    from it (a restart, a child) would write where the link leads (the attack, carried out:
    tests/containment/test_grants.py::test_a_box_built_from_a_re_pointed_write_grant_writes_where_the_link_leads).
    Refused at start, naming the path; the same grants side by side run."""
    repo = make_repo(tmp_path / "work")
    (repo / "build").mkdir()
    shared = tmp_path / "shared"
    (shared / "inner").mkdir(parents=True)
    env = operator_env()

    def run(bob: str, alice: str = "", state: str = "s") -> subprocess.CompletedProcess[str]:
        body = f'[[agent]]\nname = "alice"\ncommand = ["true"]\n{alice}[[agent]]\nname = "bob"\ncommand = ["true"]\n{bob}'
        path = team(tmp_path, body)
        return conclave_run("--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / state), env=env)

    refusals = {
        ('allow_write = ["build"]\n', ""): "lies inside the work tree",
        (f'allow_write = ["{shared / "inner"}"]\n', f'allow_write = ["{shared}"]\n'): "lies inside agent 'alice'",
        (f'allow_write = ["{repo.parent}"]\n', ""): "holds the work tree",
        (f'allow_read = ["{shared / "inner"}"]\n', f'allow_write = ["{shared}"]\n'): "allow_read",
    }
    for (bob, alice), words in refusals.items():
        out = run(bob, alice)
        assert out.returncode == 2 and words in out.stderr, (bob, alice, out.stderr)
    # Control: the same directory granted to both, and one beside the tree, run; an agent that is not
    # boxed writes everything anyway, so its grant holds nothing back.
    controls = [(f'allow_write = ["{shared}"]\n', f'allow_write = ["{shared}"]\n'), (f'allow_write = ["{shared / "inner"}"]\n', f'sandbox = "off"\nallow_write = ["{shared}"]\n')]
    for n, (bob, alice) in enumerate(controls):
        out = run(bob, alice, state=f"ok{n}")
        assert out.returncode == 0, (bob, alice, out.stderr)


FORGE_PYC = """
import importlib.util, os, struct, sys
# The attack: a .pyc of other code, its header claiming the real source's time and size, so your
# next `python` in the tree runs it; git ignores __pycache__, so `git status` stays clean.
source = os.stat("mod.py")
evil = compile("import pathlib; pathlib.Path('RAN').write_text('the agent ran as you')\\nVALUE = 'forged'\\n", "mod.py", "exec")
import marshal
header = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(source.st_mtime) & 0xFFFFFFFF, source.st_size & 0xFFFFFFFF)
os.makedirs("__pycache__", exist_ok=True)
with open(importlib.util.cache_from_source("mod.py"), "wb") as f:
    f.write(header + marshal.dumps(evil))
os.utime(importlib.util.cache_from_source("mod.py"), (0, 0))  # an old time does not hide it: ctime moves
open("README.md", "a").write("a tracked change, which git shows\\n")
"""


def test_ignored_files_an_agent_changed_are_listed_after_the_run(tmp_path: Path) -> None:
    """Review does not see what git ignores: a boxed agent forges a .pyc (your next `python` in the tree
    runs it; `git status` shows only its tracked edit).  The run's summary names every ignored file changed
    during the run; ignored files nobody touched, and tracked changes (git shows those), are not named (the controls)."""
    repo = make_repo(tmp_path, {".gitignore": "__pycache__/\n.venv/\n", "mod.py": "VALUE = 'reviewed'\n", "README.md": "scratch\n"})
    (repo / ".venv").mkdir()
    (repo / ".venv" / "old.pth").write_text("")  # ignored, and untouched during the run
    import time

    time.sleep(0.2)
    path = team(tmp_path, f'[[agent]]\nname = "alice"\ncommand = ["{sys.executable}", "-I", "-c", {json.dumps(FORGE_PYC)}]\n')
    out = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreviewed"] == ["__pycache__/mod.cpython-311.pyc".replace("311", f"{sys.version_info[0]}{sys.version_info[1]}")]
    # The attack, as the person meets it: git shows the tracked change only, and their python runs the agent's code.
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == " M README.md\n"
    ran = subprocess.run([sys.executable, "-c", "import mod; print(mod.VALUE)"], cwd=repo, capture_output=True, text=True)
    assert ran.stdout.strip() == "forged" and (repo / "RAN").exists(), ran.stderr
    # The human summary says so.
    (repo / "RAN").unlink()
    human = conclave("run", "--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / "s"))
    assert human.returncode == 0, human.stderr
    assert "1 file(s) git ignores changed in the work tree during the run" in human.stdout and "__pycache__/mod." in human.stdout
    assert "old.pth" not in human.stdout and "README.md" not in human.stdout


def test_path_entries_agents_can_write_are_dropped_for_the_broker_and_its_agents(tmp_path: Path) -> None:
    """The attack: your PATH names a directory of the work tree (direnv's `PATH_add bin`, an npm bin, `.`);
    an agent puts a `git` there, and the broker -- unboxed -- runs it, as does every other agent's `git
    status` in its own box.  conclave run drops such entries (and says so); the control: the same
    program in a PATH directory no box writes is found and run, by the broker and by the agent."""
    repo = make_repo(tmp_path)
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    ran = tmp_path / "ran"

    def plant(directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        fake = directory / "git"
        fake.write_text(f'#!/bin/sh\necho "$*" >> {ran}\nexec {real_git} "$@"\n')
        fake.chmod(0o755)

    tools = tmp_path / "tools"  # a directory of programs no box writes (its box may read it)
    path = team(tmp_path, f'[[agent]]\nname = "bob"\ncommand = ["sh", "-c", "command -v git > where.txt"]\nallow_read = ["{tools}"]\n')
    for where, state, dropped in [(repo / "bin", "s1", True), (tools, "s2", False)]:
        plant(where)
        env = operator_env()
        env["PATH"] = f"{where}{os.pathsep}{env['PATH']}"
        out = conclave_run("--team", str(path), "--repo", str(repo), "--state-dir", str(tmp_path / state), env=env)
        assert out.returncode == 0, out.stderr
        agent_found = (repo / "where.txt").read_text().strip()
        if dropped:
            assert f"PATH without '{where}'" in out.stdout, out.stdout
            assert not ran.exists(), ran.read_text()  # the broker never ran the planted git
            assert agent_found != str(where / "git"), agent_found
        else:
            assert ran.exists() and "PATH without" not in out.stdout  # control: an entry no box writes is kept and used
            assert agent_found == str(where / "git")
        (where / "git").unlink()


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
