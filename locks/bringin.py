"""Bringing an agent's commits into the person's repository, under the git lock.

A boxed agent commits in a git directory of its own
(:mod:`broker.sandbox.gitdir`); conclave's ``reference-transaction`` hook
there asks the broker, before the agent's branch moves, to bring the commit
in (``git.bring_in``).  The broker trusts nothing but the commit id and the
branch name, and holds :attr:`GitViews.lock` throughout.  In order:

1. the new objects are copied into the person's store, verified
   (:mod:`broker.sandbox.gitcopy`): read in a Landlock domain that sees only
   the two object stores, written by ``unpack-objects --strict``, then
   checked for connectivity in the person's repository alone (a commit
   refused below leaves only unreachable objects, which ``git gc`` prunes);
2. the agent must hold the ``git`` lock exclusively;
3. every new commit's changes (against its first parent) are read from the
   person's store: the agent needs an exclusive lock covering each path
   (the same rule as ``lock.check_commit``; every missing lock is named at
   once), and some changes are refused
   whatever the locks -- a gitlink (a nested repository, mode 160000), a
   ``.gitmodules``, a ``.gitattributes`` line that sets a ``filter``,
   ``diff`` or ``merge`` driver (or ``binary``, ``working-tree-encoding``, a
   macro), a path with a ``.git`` component, the team file;
4. refused too while the work tree holds a repository that was not there
   when the run started, or the agent's index marks entries
   ``skip-worktree``, ``assume-unchanged`` or ``intent-to-add``;
5. the person's branch moves with ``update-ref NEW OLD`` (compare and
   swap).  When it moved meanwhile (the person committed), a series without
   merges whose paths the new tip did not touch since the agent's base is
   **replayed** onto it path by path (a temporary index; author, committer,
   dates and message kept), else refused;
6. the person's index follows for the paths committed (``read-tree -m -i``,
   when the person has that branch checked out), and so does every other
   agent's git directory whose branch had nothing pending.

Every refusal is a ``git.refused`` event, a line in the run's output and in
its summary.  An unboxed agent commits in the person's repository itself; the
hook conclave installs there asks ``git.check`` (the same checks, nothing
copied or moved).  The operator is never refused.
"""

from __future__ import annotations

import concurrent.futures
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Final, Iterable, final

import attrs
import trio

from broker.core import Call
from broker.errors import ConclaveError, ErrorCode
from broker.literal import visible
from broker.sandbox import gitcopy, gitfiles, gitrun
from broker.sandbox.gitdir import AgentGitDir
from broker.sandbox.gitviews import GitNote, GitViews
from locks.table import LockTable

#: A branch name git would accept (``git check-ref-format``), conservatively.
BRANCH: Final = re.compile(r"^refs/heads/(?!.*(?:\.\.|@\{|//|/\.|\.lock(?:/|$)))[^\x00-\x20\x7f~^:?*\[\\]+(?<![./])$")
OBJECT_ID: Final = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
GITLINK: Final = "160000"
#: Attributes that hand a file to a program, or change what ``git diff`` and ``git status`` show.
DRIVER_ATTRIBUTES: Final = frozenset({"filter", "diff", "merge", "working-tree-encoding", "binary"})
#: Most paths listed in one refusal.
SHOWN: Final = 20


@attrs.frozen
class Update:
    ref: str
    new: str


@attrs.frozen
class UpdatesArgs:
    updates: list[Update]


@attrs.frozen
class NoArgs:
    pass


@final
@attrs.frozen
class Change:
    path: str
    old_mode: str
    new_mode: str
    new_oid: str


@final
@attrs.frozen
class Commit:
    oid: str
    parents: tuple[str, ...]
    changes: tuple[Change, ...]


@final
@attrs.define
class Facts:
    """What one branch update would bring in, read from the person's store."""

    ref: str
    new: str
    tip: str | None
    commits: list[Commit]
    problems: list[str] = attrs.Factory(list)
    #: The commit is already on the person's branch (the agent moved back): nothing is brought in, no lock needed.
    behind: bool = False

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(c.path for commit in self.commits for c in commit.changes))

    def descends_from(self, tip: str) -> bool | None:
        """Whether the new commit descends from ``tip``, when the new commits alone say so (None: ask git).
        They are everything ``new`` reaches that no branch does, so ``tip`` is their boundary parent
        exactly when it is an ancestor."""
        if tip == self.new:
            return True
        new = {c.oid for c in self.commits}
        boundary = {p for c in self.commits for p in c.parents if p not in new}
        return True if tip in boundary else None


class Refusal(Exception):
    """A bring-in that may not happen; ``code`` is the wire error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- the ops' bodies -----------------------------------------------------------------------------


def views_of(call: Call) -> GitViews:
    git = call.core.extensions.get("git")
    if not isinstance(git, GitViews):
        raise ConclaveError(ErrorCode.UNAVAILABLE, "this broker keeps no git directories (no live run on a git repository)")
    return git


async def bring_in(call: Call, table: LockTable, args: UpdatesArgs) -> dict[str, Any]:
    """Bring each branch update of the calling agent's git directory into the person's repository."""
    git = views_of(call)
    view = git.dirs.get(call.principal.session)
    if view is None:
        raise ConclaveError(
            ErrorCode.FORBIDDEN,
            f"{call.principal.key} has no git directory of its own (only agents in a strict box commit; "
            "in a landlock box git is read-only, unboxed agents commit in the repository itself)",
        )
    wanted = _checked(args.updates)
    messages: list[str] = []
    settle = False
    async with git.lock:
        for update in wanted:
            started = time.perf_counter()
            try:
                facts = await trio.to_thread.run_sync(_analyse_copy, git, view, update)
                checked = time.perf_counter()
                if not facts.behind:
                    _judge(git, table, call, facts, index_flags=view.index_flags())
                judged = time.perf_counter()
                outcome = await trio.to_thread.run_sync(_apply, git, view, facts)
            except Refusal as exc:
                _refused(call, table, git, update, str(exc))
                raise ConclaveError(exc.code, str(exc)) from None
            done = time.perf_counter()
            # Where the time went (docs/BENCHMARKS.md): copy and analysis, the lock table, moving the branches.
            outcome["ms"] = {"copy_and_read": round((checked - started) * 1000, 1), "judge": round((judged - checked) * 1000, 1),
                             "apply": round((done - judged) * 1000, 1)}  # fmt: skip
            # Written behind, with the lock history (the journal): the agent's commit does not wait for the store.
            table.journal.add("git.brought_in", actor=call.principal.key, subject=update.ref, payload=outcome)
            messages.append(outcome["message"])
            settle = settle or outcome["settle"]
    return {"messages": messages, "settle": settle}


async def check(call: Call, table: LockTable, args: UpdatesArgs) -> dict[str, Any]:
    """Whether a branch update made in the person's own repository may go ahead (its hook asks).

    The operator always may.  An unboxed agent's update gets the same checks as a bring-in.
    """
    if call.principal.is_operator:
        return {"messages": []}
    git = views_of(call)
    async with git.lock:
        for update in _checked(args.updates):
            try:
                facts = await trio.to_thread.run_sync(_analyse, git, update)
                if not facts.behind:
                    _judge(git, table, call, facts, index_flags=git.person_index_flags())
            except Refusal as exc:
                _refused(call, table, git, update, str(exc))
                raise ConclaveError(exc.code, str(exc)) from None
            table.journal.add("git.allowed", actor=call.principal.key, subject=update.ref, payload={"new": update.new, "commits": len(facts.commits)})
    return {"messages": []}


async def settle(call: Call) -> dict[str, Any]:
    """The calling agent's branch after a replayed bring-in: onto the commit the broker made of it."""
    git = views_of(call)
    view = git.dirs.get(call.principal.session)
    if view is not None:
        async with git.lock:
            await trio.to_thread.run_sync(lambda: view.follow(git.person_tips(), git.scratch))
    return {"messages": []}


def _refused(call: Call, table: LockTable, git: GitViews, update: Update, why: str) -> None:
    payload = {"ref": update.ref, "new": update.new, "why": why[:4000]}
    table.journal.add("git.refused", actor=call.principal.key, subject=update.ref, payload=payload)
    git.note(GitNote("refused", call.principal.key, f"commit {update.new[:12]} for {update.ref} refused: {why}", payload))


def _checked(updates: Iterable[Update]) -> list[Update]:
    out = []
    for update in updates:
        if not BRANCH.match(update.ref):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"not a branch name git would accept: {visible(update.ref)!r}")
        if not OBJECT_ID.match(update.new):
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"not an object id: {visible(update.new)!r}")
        out.append(update)
    if not out:
        raise ConclaveError(ErrorCode.INVALID_ARGS, "name at least one branch update")
    return out


def _lock_words(principal: str, missing: list[dict[str, Any]]) -> str:
    lines = [f"{principal} lacks these locks:"]
    for m in missing[:SHOWN]:
        held = f"; held by {', '.join(m['held_by'])}" if m["held_by"] else ""
        lines.append(f"  {visible(m['resource'])}  ({m['why']}{held})")
    if len(missing) > SHOWN:
        lines.append(f"  ... and {len(missing) - SHOWN} more")
    names = " ".join(visible(m["resource"]) for m in missing[:SHOWN])
    lines.append(f"take them first: conclave exec --lock ... -- git commit ..., or conclave lock acquire {names}")
    return "\n".join(lines)


# -- reading what an update brings (worker thread) -----------------------------------------------


def _analyse_copy(git: GitViews, view: AgentGitDir, update: Update) -> Facts:
    tips = git.person_tips()
    try:
        gitcopy.copy(git.layout, git.reader, view.objects, [update.new], tips.values())
    except gitrun.GitFailed as exc:
        raise Refusal(ErrorCode.REJECTED, f"commit {update.new[:12]} was not brought in: {exc}") from None
    return _analyse(git, update, tips)


def _analyse(git: GitViews, update: Update, tips: dict[str, str] | None = None) -> Facts:
    layout = git.layout
    tips = tips if tips is not None else git.person_tips()
    # Connectivity (the whole object walk) and the commits' changes read at once: both only read the store.
    # A missing object fails both; the walk's refusal, which names it, is the one given.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        walk = pool.submit(gitcopy.connected, layout, [update.new], tips.values())
        try:
            commits = _commits(git, update.new, tips.values())
        except Refusal:
            if walk.exception() is None:
                raise
    failed = walk.exception()
    if isinstance(failed, gitrun.GitFailed):
        raise Refusal(ErrorCode.REJECTED, str(failed)) from None
    if failed is not None:
        raise failed
    facts = Facts(update.ref, update.new, tips.get(update.ref), commits)
    if not commits and facts.tip is not None and _is_ancestor(git, update.new, facts.tip):
        facts.behind = True
        return facts
    facts.problems = _content_problems(git, facts)
    added = sorted(git.added_repositories())
    if added:
        facts.problems.append(
            "the work tree holds repositories that were not there when the run started (git would run their configuration): "
            + ", ".join(visible(p) for p in added[:SHOWN])
            + "; remove them first"
        )
    return facts


#: ``git log`` as plumbing: every option that configuration could change what it prints, set here.
#: (``--ignore-submodules=none``: a ``diff.ignoreSubmodules`` of the person's would hide a gitlink.)
LOG: Final = (
    "-c", "log.showRoot=true", "-c", "log.showSignature=false", "-c", "core.quotePath=false", "-c", "diff.relative=false",
    "log", "--no-color", "--no-decorate", "--no-ext-diff", "--no-textconv", "--no-renames", "--no-abbrev", "--raw", "-z",
    "--ignore-submodules=none", "--diff-merges=first-parent", "--format=%x00%H %P", "--reverse", "--topo-order",
)  # fmt: skip


def _commits(git: GitViews, new: str, tips: Iterable[str]) -> list[Commit]:
    """Every commit ``new`` reaches that no branch does, oldest first, each with its changes against
    its first parent -- read from the person's store, in one ``git log``.

    Raises:
        Refusal: ``new`` is no commit (a tree, a blob: a branch names a commit).
    """
    done = gitrun.run(git.layout.git_dir, None, [*LOG, new, "--not", *tips, "--"], check=False)
    if done.returncode != 0:
        raise Refusal(ErrorCode.REJECTED, f"{new[:12]} is not a commit: {done.stderr.decode(errors='replace').strip()[-200:]}")
    commits: list[Commit] = []
    oid, parents, changes = "", (), []  # type: ignore[var-annotated]
    tokens = done.stdout.split(b"\0")
    i = 0
    while i < len(tokens):
        token = tokens[i].lstrip(b"\n")
        if token.startswith(b":"):
            old_mode, new_mode, _old, new_oid, _status = token[1:].decode().split(" ")
            changes.append(Change(tokens[i + 1].decode(errors="surrogateescape"), old_mode, new_mode, new_oid))
            i += 2
            continue
        if token:
            if oid:
                commits.append(Commit(oid, parents, tuple(changes)))
            oid, *rest = token.decode().split(" ")
            parents, changes = tuple(p for p in rest if p), []
        i += 1
    if oid:
        commits.append(Commit(oid, parents, tuple(changes)))
    return commits


def _content_problems(git: GitViews, facts: Facts) -> list[str]:
    problems: list[str] = []
    attributes: list[tuple[str, str]] = []
    team = git.team_file
    for commit in facts.commits:
        for change in commit.changes:
            shown = visible(change.path)
            parts = change.path.split("/")
            if change.new_mode == GITLINK:
                problems.append(f"{shown} is a gitlink (a nested repository, mode 160000): git would run its configuration")
            if any(_is_dot_git(p) for p in parts):
                problems.append(f"{shown} has a path component git reserves (.git)")
            name = parts[-1].lower()
            if name == ".gitmodules":
                problems.append(f"{shown} is a .gitmodules: submodules are not brought in")
            if name == ".gitattributes" and change.new_mode != "000000":
                attributes.append((change.path, change.new_oid))
            if team is not None and change.path == team:
                problems.append(f"{shown} is the team file: it decides every agent's box and powers, so no agent may commit it")
    for path, oid in attributes:
        for line in _driver_lines(git, oid):
            problems.append(f"{visible(path)} sets what git runs or shows ({visible(line)!r}): attributes naming drivers are not brought in")
    return list(dict.fromkeys(problems))


def _is_dot_git(part: str) -> bool:
    """``.git`` as git on any filesystem would read it (case, trailing dots and spaces, the 8.3 name);
    the spellings HFS+ folds are fsck's (the strict unpack refuses them)."""
    return part.lower().rstrip(". ") in (".git", "git~1")


def _driver_lines(git: GitViews, oid: str) -> list[str]:
    data = gitrun.run(git.layout.git_dir, None, ["cat-file", "blob", oid]).stdout.decode(errors="replace")
    found = []
    for raw in data.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[attr]"):
            found.append(line)
            continue
        words = line.split()[1:] if not line.startswith('"') else line[line.find('"', 1) + 1 :].split()
        for word in words:
            name = word.lstrip("-!").split("=", 1)[0].lower()
            if name in DRIVER_ATTRIBUTES:
                found.append(line)
                break
    return found


# -- judging (event loop: the lock table) --------------------------------------------------------


def _judge(git: GitViews, table: LockTable, call: Call, facts: Facts, *, index_flags: set[tuple[str, str]]) -> None:
    """Refuse, naming every missing lock and every problem at once."""
    staged, missing = table.resolve_paths(facts.paths)
    report = table.check_commit(call.principal, staged)
    missing = ([] if report["allowed"] else report["missing"]) + missing
    problems = list(facts.problems)
    if index_flags:
        listed = ", ".join(f"{visible(path)} ({flag})" for path, flag in sorted(index_flags)[:SHOWN])
        problems.append(
            f"the index marks entries so that git status and git diff look away from them: {listed}; "
            "clear them (git update-index --no-assume-unchanged / --no-skip-worktree PATH, git reset PATH) and commit again"
        )
    words = [_lock_words(call.principal.key, missing)] if missing else []
    words += [f"refused: {p}" for p in problems]
    if words:
        raise Refusal(ErrorCode.LOCKED if missing else ErrorCode.REJECTED, "\n".join(words))


# -- moving the person's branch (worker thread) --------------------------------------------------


def _apply(git: GitViews, view: AgentGitDir, facts: Facts) -> dict[str, Any]:
    layout = git.layout
    tip = gitfiles.read_one_ref(git.person_fd, facts.ref)
    if tip != facts.tip:
        raise Refusal(ErrorCode.CONFLICT, f"{facts.ref} moved while the commit was checked; commit again")
    replayed = False
    if tip is None:
        final = facts.new
    elif facts.descends_from(tip) or _is_ancestor(git, tip, facts.new):
        final = facts.new
    elif facts.behind:
        view.remember(facts.ref, facts.new)
        # Nothing to bring: the agent's branch goes back to a commit the person has; once it has, it follows the tip.
        return {"new": facts.new, "final": tip, "commits": 0, "replayed": False, "settle": True, "message": f"{facts.new[:12]} is already on {facts.ref}"}
    else:
        final = _replay(git, facts, tip)
        replayed = True
    done = gitrun.run(layout.git_dir, None, ["update-ref", "-m", "conclave: brought in", facts.ref, final, tip or ""], check=False)
    if done.returncode != 0:
        raise Refusal(ErrorCode.CONFLICT, f"{facts.ref} moved while the commit was brought in; commit again")
    if gitfiles.head_branch(git.person_fd) == facts.ref:
        # An unborn branch moves from the empty tree: the person's index takes the commit's files.
        base = tip or gitrun.text(layout.git_dir, None, ["hash-object", "-t", "tree", "--stdin"], stdin=b"")
        moved = gitrun.run(layout.git_dir, layout.repo, ["read-tree", "-m", "-i", base, final], check=False)
        if moved.returncode != 0:
            git.note(GitNote("index", "operator", f"your index was not updated for {facts.ref} (it has staged changes on the same paths): "
                                                  f"{moved.stderr.decode(errors='replace').strip()[-200:]}; `git status` shows them"))  # fmt: skip
    if replayed:
        view.replayed.setdefault(facts.ref, {})[facts.new] = final
    view.remember(facts.ref, facts.new)
    view.remember(facts.ref, final)
    git.follow_all(skip=view.session)
    count = len(facts.commits)
    how = f"replayed onto {tip[:12]} (the branch had moved) as {final[:12]}" if replayed else f"now at {final[:12]}"
    return {"new": facts.new, "final": final, "tip": tip, "commits": count, "replayed": replayed, "settle": replayed,
            "message": f"brought {count} commit(s) into {facts.ref}: {how}"}  # fmt: skip


def _is_ancestor(git: GitViews, old: str, new: str) -> bool:
    return gitrun.run(git.layout.git_dir, None, ["merge-base", "--is-ancestor", old, new], check=False).returncode == 0


def _replay(git: GitViews, facts: Facts, tip: str) -> str:
    """The agent's commits made again on top of ``tip``, path by path; their authors, committers, dates and
    messages kept.

    Raises:
        Refusal: a merge among them, a base that is not an ancestor of ``tip``, or a path both sides changed.
    """
    layout = git.layout
    series = facts.commits
    if not series:
        raise Refusal(ErrorCode.CONFLICT, f"{facts.ref} is at {tip[:12]} and {facts.new[:12]} does not descend from it: "
                                          "moving the branch there would drop the person's commits")  # fmt: skip
    if any(len(c.parents) != 1 for c in series):
        raise Refusal(ErrorCode.CONFLICT, f"{facts.ref} moved since your commits' base, and they include a merge: "
                                          "update your branch (git merge or rebase onto it) and commit again")  # fmt: skip
    base = series[0].parents[0]
    if not _is_ancestor(git, base, tip):
        raise Refusal(ErrorCode.CONFLICT, f"your commits are not based on {facts.ref}'s history; rebase them onto it first")
    touched = {c.path for commit in series for c in commit.changes}
    moved = set(gitrun.text(layout.git_dir, None, ["diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none", "--name-only", base, tip]).split("\0")) - {""}
    both = sorted(touched & moved)
    if both:
        raise Refusal(ErrorCode.CONFLICT, f"{facts.ref} has commits after your commits' base that changed the same paths "
                                          "(the person's, or ones already brought in: an amend or a rebase of those cannot be): "
                                          + ", ".join(visible(p) for p in both[:SHOWN])
                                          + f"; update your branch (git rebase {facts.ref.removeprefix('refs/heads/')}) and commit again")  # fmt: skip
    current = tip
    with tempfile.TemporaryDirectory(dir=git.scratch) as work:
        env = {"GIT_INDEX_FILE": str(Path(work) / "index")}
        gitrun.run(layout.git_dir, None, ["read-tree", current], extra_env=env)
        for commit in series:
            info = "".join(
                f"0 {'0' * len(c.new_oid)}\t{c.path}\n" if c.new_mode == "000000" else f"{c.new_mode} {c.new_oid}\t{c.path}\n" for c in commit.changes
            )
            gitrun.run(layout.git_dir, None, ["update-index", "--index-info"], stdin=info.encode(errors="surrogateescape"), extra_env=env)
            tree = gitrun.text(layout.git_dir, None, ["write-tree"], extra_env=env)
            who, message = _commit_text(git, commit.oid)
            current = gitrun.text(layout.git_dir, None, ["commit-tree", tree, "-p", current, "-F", "-"], stdin=message, extra_env={**env, **who})
    return current


def _commit_text(git: GitViews, oid: str) -> tuple[dict[str, str], bytes]:
    raw = gitrun.run(git.layout.git_dir, None, ["cat-file", "commit", oid]).stdout
    header, _, message = raw.partition(b"\n\n")
    who: dict[str, str] = {}
    for line in header.decode(errors="surrogateescape").splitlines():
        role, _, value = line.partition(" ")
        if role in ("author", "committer"):
            match = re.match(r"^(.*) <(.*)> (\d+ [+-]\d{4})$", value)
            if match:
                prefix = "GIT_AUTHOR" if role == "author" else "GIT_COMMITTER"
                who.update({f"{prefix}_NAME": match[1], f"{prefix}_EMAIL": match[2], f"{prefix}_DATE": match[3]})
    return who, message

