"""No test reaches the home pytest was started with (tests/session_home.py).

The route this closes: conclave reads the state-directory registry under
``$XDG_STATE_HOME`` *and* under ``$HOME/.local/state`` (broker/paths.py,
``state_roots``), so with only ``XDG_STATE_HOME`` moved every test's broker read
the registry of every broker the person ever ran; git took the committer's name
from the person's ``~/.gitconfig``; Claude Code and Codex wrote ``~/.claude`` and
``~/.codex``.  Each test here shows the route working (on a home the test made)
and then shut for the runner's.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from agents.harness import Run
from broker import paths
from tests import session_home
from tests.agents import realbin
from tests.session_home import RealHomeTouched, SessionHome

REGISTRY = Path(".local") / "state" / "conclave" / paths.STATE_REGISTRY_NAME


def test_home_and_every_xdg_directory_are_the_sessions_in_this_process_and_its_children(no_real_state_home: SessionHome) -> None:
    home = no_real_state_home.home
    expected = {"HOME": str(home), **{name: str(home / relative) for name, relative in session_home.XDG.items()}}
    assert {name: os.environ.get(name) for name in expected} == expected
    printed = subprocess.run(["sh", "-c", 'printf "%s\\n" "$HOME" "$XDG_CONFIG_HOME" "$XDG_CACHE_HOME" "$XDG_DATA_HOME" "$XDG_STATE_HOME"'],
                             capture_output=True, text=True, check=True).stdout.split("\n")[:5]
    assert printed == list(expected.values())
    if no_real_state_home.runner_home not in (None, "/"):
        assert not any(v.startswith(no_real_state_home.runner_home.rstrip("/") + "/") for v in printed)  # type: ignore[union-attr]
    # The agent binaries are found by the path the session names, not under this home.
    assert os.environ["CONCLAVE_AGENT_BINARIES"] and not os.environ["CONCLAVE_AGENT_BINARIES"].startswith(str(home))


def test_commits_carry_the_sessions_git_identity_and_no_other(tmp_path: Path, no_real_state_home: SessionHome) -> None:
    """git's identity in every test comes from the gitconfig the session wrote, never the runner's ~/.gitconfig."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}  # /etc/gitconfig is not a home either way; keep it out of the answer
    commit = ["git", "-C", str(repo), "-c", "user.useConfigOnly=true", "commit", "-q", "--allow-empty", "-m", "x"]
    done = subprocess.run(commit, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    author = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%an <%ae>"], capture_output=True, text=True, env=env).stdout.strip()
    assert author == "conclave-test <test@example.invalid>"
    origin = subprocess.run(["git", "config", "--global", "--show-origin", "--get", "user.email"], capture_output=True, text=True, env=env).stdout
    assert origin.split()[0] == f"file:{no_real_state_home.home / '.gitconfig'}"
    # Control on the same repository: with a home that holds no gitconfig there is no identity to take at all,
    # so the one above came from the session's file.
    bare_home = tmp_path / "bare-home"
    bare_home.mkdir()
    refused = subprocess.run(commit, capture_output=True, text=True, env={**env, "HOME": str(bare_home), "XDG_CONFIG_HOME": str(bare_home / ".config")})
    assert refused.returncode != 0 and "Please tell me who you are" in refused.stderr, refused.stderr


def test_the_product_reads_the_registry_under_home_too_and_the_guard_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack on the suite: a home whose registry names state directories the session never made.

    With only XDG_STATE_HOME moved (the session fixture before HOME was), HOME still names the
    person's home and ``known_state_dirs`` reads its registry as well; the guard turns that read
    into a loud failure, before the file is opened, although the product swallows an unreadable
    registry (``except OSError``)."""
    person = tmp_path / "person"
    (person / REGISTRY).parent.mkdir(parents=True)
    (person / REGISTRY).write_text("/srv/someone-elses-state\n")
    monkeypatch.setenv("HOME", str(person))
    # Control: unguarded, the person's registry is read beside the session's.
    assert "/srv/someone-elses-state" in paths.known_state_dirs()
    with session_home.guard(str(person), allowed=[]) as watch:
        with pytest.raises(RealHomeTouched, match=re.escape(str(person / REGISTRY))):
            paths.known_state_dirs()
    assert watch.touched == [f"open {person / REGISTRY}"]


def test_on_a_fresh_machine_the_agent_binaries_are_fetched_into_the_runners_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner whose home has no ~/.cache yet (a fresh machine): the first real-agent test makes the
    binaries' cache (realbin.ensure) while the guard is live; that is the one place under the runner's
    home the session writes, and the rest of ~/.cache stays guarded."""
    person = tmp_path / "person"
    person.mkdir()
    monkeypatch.setenv("HOME", str(person))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(realbin.ENV_CACHE, raising=False)
    base = tmp_path / "session"
    base.mkdir()
    with session_home.enter(base, allowed=[]) as home:
        cache = realbin.cache_root()
        assert cache == person / ".cache" / "conclave" / "agent-binaries"
        (cache / "pinned").mkdir(parents=True, exist_ok=True)  # what realbin.ensure does first
        assert (cache / "pinned").is_dir()
        with pytest.raises(RealHomeTouched):
            (person / ".cache" / "someone-else").mkdir()
        assert home.guard.touched == [f"os.mkdir {person / '.cache' / 'someone-else'}"]
        home.guard.touched.clear()  # expected here; the context reports only what nobody expected


def test_a_link_made_outside_the_home_may_name_a_relative_target_whatever_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout under the runner's home (the working directory) and a test that makes, in its own
    directory, a link whose relative target reads like a path under that home: the target is text in
    the link, relative to the link, and nothing under the home is touched (the guard had refused it,
    failing a preset test for every ordinary user whose checkout is in their home).
    Control: a link made under the home is refused."""
    person = tmp_path / "person"
    (person / "checkout").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(person / "checkout")
    with session_home.guard(str(person), allowed=[]) as watch:
        (elsewhere / "link").symlink_to("../@scope/pkg/bin/tool.js")
        with pytest.raises(RealHomeTouched):
            (person / "link").symlink_to(elsewhere)
    assert watch.touched == [f"os.symlink {person / 'link'}"]
    assert os.readlink(elsewhere / "link") == "../@scope/pkg/bin/tool.js" and not (person / "link").is_symlink()


def test_the_session_guard_stops_this_process_at_the_runners_home(no_real_state_home: SessionHome) -> None:
    """The session's own guard is live on the runner's home: opening its registry raises before it is opened."""
    watch = no_real_state_home.guard
    assert watch.active
    target = os.path.join(watch.home, str(REGISTRY))
    before = list(watch.touched)
    with pytest.raises(RealHomeTouched):
        open(target).close()
    assert watch.touched == [*before, f"open {target}"]
    del watch.touched[len(before):]  # expected here: the session's end reports only what nobody expected
    # Control: what the tests take on purpose stays readable -- the interpreter and the session's own home.
    assert not watch.reaches(os.path.realpath(os.__file__))
    assert not watch.reaches(str(no_real_state_home.home / ".gitconfig"))
    (no_real_state_home.home / ".gitconfig").read_text()


def test_a_broker_and_its_boxed_agent_reach_only_the_sessions_home(
    tmp_path: Path, no_real_state_home: SessionHome, start_run: Callable[..., Run]
) -> None:
    """A broker started the way every test starts one, traced with its boxed agent: it registers its state
    directory in the session's registry, its agent's git takes the session's identity, and no file under the
    runner's home is opened, listed, run or even looked up -- besides what the session names on purpose."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is needed to watch what a broker opens: install it (apt-get install strace; `make tools` does)")
    trace = tmp_path / "trace"
    # -D: the tracer is a detached grandchild, so the broker is the process the harness signals and waits for.
    run = start_run(
        [{"name": "alice"}], default_state=True,
        wrap=[strace, "-D", "-f", "-qq", "-s", "4096", "-e", "trace=%file", "-o", str(trace), "--"],
    )  # fmt: skip
    assert run.process is not None
    tracer = int(Path(f"/proc/{run.process.pid}/status").read_text().split("TracerPid:")[1].split()[0])
    tracer_fd = os.pidfd_open(tracer)
    try:
        alice = run.puppet("alice")
        assert alice.sh("git", "config", "user.email").stdout.strip() == "test@example.invalid"
        assert alice.sh("sh", "-c", 'echo "$HOME"').stdout.strip() == str(no_real_state_home.home)
        alice.exit(0)
        run.wait_exit(timeout=60)
        assert select.select([tracer_fd], [], [], 30)[0], "strace did not finish its trace within 30 s of the broker's exit"
    finally:
        os.close(tracer_fd)
    registry = no_real_state_home.home / REGISTRY
    assert os.path.realpath(run.state) in registry.read_text().splitlines()
    seen = set(re.findall(r'"(/[^"]*)"', trace.read_text()))
    # Positive control on the same trace: it saw the broker read the registry, in the session's home.
    assert str(registry) in seen
    watch = no_real_state_home.guard
    ancestors = {str(parent) for root in watch.allowed for parent in Path(root).parents}
    zip_name = f"python{sys.version_info[0]}{sys.version_info[1]}.zip"

    def on_the_way(path: str) -> bool:
        """A directory on the way to what the session names (realpath's lookups), or where the interpreter
        looks for its standard library from its own location (``getpath``: <ancestor>/lib/pythonXY.zip)."""
        return path in ancestors or (os.path.basename(path) == zip_name and os.path.dirname(os.path.dirname(path)) in ancestors)

    reached = sorted(p for p in map(os.path.normpath, seen) if watch.reaches(p) and not on_the_way(p))
    assert reached == [], f"the broker or its agent reached the runner's home {no_real_state_home.runner_home}: {reached}"
