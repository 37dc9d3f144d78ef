"""One agent's fork bomb takes its share of processes, never the uid's (issues 21 and 22).

The attack: an agent forks without end under the person's ``ulimit -u``.  Before, it took
every process the uid may have: the person's own ``conclave agents`` could not fork, and
another agent's restart gave up.  Now each strict agent has a share (``max_processes``,
RLIMIT_NPROC in its own user namespace) and the broker keeps the rest for itself, the person
and the other agents; the run names the agent that reached its share.

uid 0 is exempt from RLIMIT_NPROC, so the broker here always runs as an ordinary uid: as
uid 65534 (setpriv) when the suite runs as root, as itself otherwise -- under ``prlimit
--nproc`` a few hundred above what that uid already runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from broker.sandbox import machine as sandbox_machine
from broker.sandbox.share import uid_tasks
from tests.ordinary_user import as_user, scratch, user_python, user_uid

pytestmark = pytest.mark.uid_independent("its broker runs as uid 65534 in both runs (root is exempt from RLIMIT_NPROC): the root copy is the same run")

MACHINE = sandbox_machine.probe()

#: Forks children that hold their slot until STOP exists; counts what it made and what was refused.
BOMB = textwrap.dedent(
    """
    import json, os, sys, time
    report, stop = sys.argv[1], sys.argv[2]
    made = refused = 0
    while not os.path.exists(stop):
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            with open(report + ".tmp", "w") as f:
                json.dump({"made": made, "refused": refused}, f)
            os.replace(report + ".tmp", report)
            time.sleep(0.05)
            continue
        if pid == 0:
            while not os.path.exists(stop):
                time.sleep(0.2)
            os._exit(0)
        made += 1
    """
)
#: Another agent: once the bomb is refused, forks a few children; fails its first attempt so the
#: broker restarts it; the restart says it ran.
CALM = textwrap.dedent(
    """
    import json, os, sys, time
    bomb, mine = sys.argv[1], sys.argv[2]
    if os.path.exists(mine):
        open(mine + ".restarted", "w").write("yes")
        sys.exit(0)
    while not (os.path.exists(bomb) and json.load(open(bomb))["refused"] > 0):
        time.sleep(0.05)
    children = []
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        children.append(pid)
    for child in children:
        os.waitpid(child, 0)
    open(mine, "w").write(json.dumps({"forked": len(children)}))
    sys.exit(1)
    """
)


@pytest.fixture(scope="module")
def user_env() -> Iterator[tuple[Path, Path]]:
    """(a directory the uid owns, the python it runs conclave with)."""
    with scratch("conclave-share-") as (base, home):
        yield home, user_python(base / "py")[0] if os.geteuid() == 0 else Path(sys.executable)


def test_a_fork_bomb_is_held_to_its_share_and_everyone_else_keeps_working(user_env: tuple[Path, Path]) -> None:
    if not (MACHINE.offers("strict") is None):
        pytest.fail(f"no strict box on this machine ({MACHINE.user_namespaces_error}): the share is RLIMIT_NPROC in the agent's user namespace")
    home, python = user_env
    root = home / "bomb"
    repo, state = root / "repo", root / "state"
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "XDG_STATE_HOME": str(home / "xdg")}

    def as_nobody(*argv: str, limit: int, **kwargs: object) -> list[str]:
        return as_user(["prlimit", f"--nproc={limit}:{limit}", *argv])

    subprocess.run(as_user(["mkdir", "-p", str(repo), str(state)]), check=True, env=env)
    subprocess.run(as_user(["git", "-C", str(repo), "init", "-q"]), check=True, env=env)
    subprocess.run(as_user(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]), check=True, env=env)
    bomb_report, calm_mark, stop = repo / "bomb.json", repo / "calm.json", repo / "stop"
    files = {"bomb.py": BOMB, "calm.py": CALM}
    for name, text in files.items():
        subprocess.run(as_user(["sh", "-c", f"cat > {repo / name}"]), input=text, text=True, check=True, env=env)
    team = textwrap.dedent(
        f"""
        [[agent]]
        name = "bomber"
        sandbox = "strict"
        max_processes = 48
        command = ["{python}", "-I", "{repo / 'bomb.py'}", "{bomb_report}", "{stop}"]

        [[agent]]
        name = "calm"
        sandbox = "strict"
        restart = "on-failure"
        max_restarts = 1
        command = ["{python}", "-I", "{repo / 'calm.py'}", "{bomb_report}", "{calm_mark}"]
        """
    )
    subprocess.run(as_user(["sh", "-c", f"cat > {root / 'team.toml'}"]), input=team, text=True, check=True, env=env)
    # The person's ulimit -u: what the uid runs now, and room for a few hundred more.
    limit = uid_tasks(user_uid()) + 400
    conclave = [str(python), "-I", "-m", "broker.cli"]
    broker = subprocess.Popen(
        as_nobody(*conclave, "run", "--team", str(root / "team.toml"), "--repo", str(repo), "--state-dir", str(state), "--json", limit=limit),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (calm_mark.exists() and bomb_report.exists()) and broker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert calm_mark.exists(), f"the bomb was never refused, or calm never forked: {broker.stderr.read() if broker.poll() is not None else ''}"
        bombed = json.loads(bomb_report.read_text())
        # The bomb holds its share (its own namespace counts the launcher, its init and itself too), no more.
        assert 40 <= bombed["made"] <= 48 and bombed["refused"] > 0, bombed
        # While it holds it: the person starts a process and asks the broker who runs...
        person = subprocess.run(
            as_nobody(*conclave, "agents", "--json", "--repo", str(repo), "--state-dir", str(state), limit=limit),
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert person.returncode == 0, person.stderr
        assert {"bomber", "calm"} <= {a["agent"] for a in json.loads(person.stdout)}
        # ...another agent forked (calm.json says 5), and its restart ran.
        assert json.loads(calm_mark.read_text()) == {"forked": 5}
        run_deadline = time.monotonic() + 30
        while not Path(str(calm_mark) + ".restarted").exists() and time.monotonic() < run_deadline:
            time.sleep(0.1)
        assert Path(str(calm_mark) + ".restarted").exists(), "calm's restart did not run"
        # The run names the agent that reached its share.
        journal = state / "logs" / "run-1.jsonl"
        run_deadline = time.monotonic() + 15
        while "reached its share" not in journal.read_text() and time.monotonic() < run_deadline:
            time.sleep(0.2)
        shares = [json.loads(line) for line in journal.read_text().splitlines() if "reached its share" in line]
        assert [s["principal"].split(":")[0] for s in shares] == ["bomber"], shares
        assert "of 48 processes" in shares[0]["text"]
    finally:
        subprocess.run(as_user(["touch", str(stop)]), env=env)
        try:
            out, err = broker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            out, err = broker.communicate()
    summary = json.loads(out)
    assert summary["exit_code"] == 0, err
    outcomes = {(o["agent"], o["attempt"]): o["status"] for o in summary["agents"]}
    assert outcomes[("calm", 2)] == "exit 0" and outcomes[("bomber", 1)] == "exit 0", outcomes
