"""The person's repository and every live agent's git directory, kept by one owner per run.

:class:`GitViews` lives in ``core.extensions["git"]`` for the life of a
running broker.  The supervisor asks it for an agent's git directory at each
strict spawn (:meth:`GitViews.create`); the lock feature's bring-in
(``locks.bringin``) copies commits in and moves the person's branch through
it; and its own task (:meth:`GitViews.run`) looks at the person's branches
every :data:`LOOK` seconds, so whoever moved one -- the person, an unboxed
agent, a bring-in -- every agent's git directory follows
(:meth:`AgentGitDir.follow`).  One :attr:`lock` orders every write to refs
and indexes.

It also keeps what the run's summary lists about git (:attr:`notes`):
refused bring-ins, and commits an agent left behind.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Final, Iterable, final

import attrs
import trio

from broker.githook import script
from broker.sandbox import gitcopy, gitfiles, gitrun
from broker.sandbox.gitdir import AgentGitDir, create
from broker.sandbox.gitlayout import Layout
from broker.sandbox.nested import identity, nested_repositories, quarantine

log = logging.getLogger("conclave.git")

#: Seconds between looks at the person's branches.
LOOK: Final = 0.25
#: Where the commits an agent left are kept in the person's repository.
LEFT_REFS: Final = "refs/conclave/left"


@final
@attrs.frozen
class GitNote:
    """Something about git the run's summary lists: a refused bring-in, commits left behind."""

    kind: str  # "refused" (a bring-in), "left" (commits at an exit), "index" (the person's index could not follow)
    principal: str
    text: str
    detail: dict[str, Any] = attrs.Factory(dict)


def _make_inert(root: Path, found: Iterable[str], why: str, *, shown: Callable[[str], str]) -> list[GitNote]:
    """:func:`quarantine` each of ``found`` (relative to ``root``); a note for each one renamed, its paths as ``shown``."""
    done = []
    for rel in sorted(found):
        try:
            renamed = quarantine(root, rel)
        except OSError as exc:
            log.error("could not make the repository %s inert: %s", root / rel, exc)
            continue
        if renamed is not None:
            done.append(GitNote("quarantined", "broker", f"{shown(rel)}: {why} was made inert: renamed to {shown(renamed)}",
                                {"found": shown(rel), "renamed": shown(renamed)}))  # fmt: skip
    return done


@final
class GitViews:
    """The person's repository as the broker keeps it, and each boxed agent's git directory."""

    def __init__(self, layout: Layout, state: Path, *, python: str, team_file: str | None = None) -> None:
        self.layout = layout
        #: The team file's path in the work tree (None when it lives outside): no agent commits it.
        self.team_file = team_file
        self.state = state
        self.python = python
        self.root = state / "gitdirs"
        self.scratch = self.root / ".scratch"
        self.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.dirs: dict[str, AgentGitDir] = {}
        self.notes: list[GitNote] = []
        self.lock = trio.Lock()
        #: Told about each note as it is made (the run view shows it).
        self.on_note: Callable[[GitNote], None] | None = None
        self.person_fd = gitfiles.open_dir(layout.git_dir)
        self.tips = gitfiles.branch_tips(self.person_fd)
        #: Each repository in the tree when the run started, and what it was (device, inode): one put in its place
        #: during the run is new, whatever its path.
        self.nested_at_start = {rel: identity(layout.repo, rel) for rel in nested_repositories(layout.repo)}
        self._flags_key: tuple[int, int, int] | None = None
        self._flags: frozenset[tuple[str, str]] = frozenset()
        #: The hiding flags the person's index had when the run started (an unboxed agent's are new).
        self.person_flags = self._flags_now()
        #: The boxed reader of agents' objects (started on first use, kept for the run).
        self.reader = gitcopy.reader(layout, self.root, self.scratch)

    # -- spawns and exits --------------------------------------------------------------------

    def create(self, session: str) -> AgentGitDir:
        """The git directory for a strict spawn (bound over ``<repo>/.git`` in its box).

        Raises:
            OSError: it cannot be made; the spawn is refused.
        """
        hook = script("agent", python=self.python, state=str(self.state))
        view = create(self.layout, self.root, session, hook=hook, agent_git=self.layout.git_dir, baseline=self._flags_now())
        self.dirs[session] = view
        return view

    async def retire(self, session: str, principal: str) -> GitNote | None:
        """The agent exited: keep what it committed and never brought in, then remove its git directory.

        Pending commits are copied (verified) into the person's repository under
        ``refs/conclave/left/<agent>/<session>/<branch>``; if that fails the directory is kept where it is.
        """
        view = self.dirs.pop(session, None)
        if view is None:
            return None
        async with self.lock:
            note = await trio.to_thread.run_sync(self._retire, view, principal)
        if note is not None:
            self.note(note)
        return note

    def _retire(self, view: AgentGitDir, principal: str) -> GitNote | None:
        pending = view.pending()
        if not pending:
            view.remove()
            return None
        agent = principal.rpartition(":")[0].replace("/", "__")
        kept: dict[str, str] = {}
        try:
            gitcopy.copy(self.layout, self.reader, view.objects, pending.values(), self.tips.values())
            for ref, tip in pending.items():
                name = f"{LEFT_REFS}/{agent}/{view.session}/{ref.removeprefix('refs/heads/')}"
                gitrun.run(self.layout.git_dir, None, ["update-ref", name, tip, ""])
                kept[name] = tip
        except (gitrun.GitFailed, OSError) as exc:
            view.close()
            where = ", ".join(f"{ref} at {tip}" for ref, tip in pending.items())
            return GitNote("left", principal, f"left commits never brought in ({where}); they could not be copied ({exc}), so its git directory is kept at {view.path}",
                           {"pending": pending, "kept_in": str(view.path)})  # fmt: skip
        view.remove()
        where = "; ".join(f"{tip[:12]} kept as {name}" for name, tip in kept.items())
        return GitNote("left", principal, f"left commits it never brought in: {where} (git log NAME shows them)", {"pending": pending, "refs": kept})

    # -- repositories made in the work tree during the run ------------------------------------

    async def quarantine_new(self, *, final: bool = False) -> list[GitNote]:
        """Make inert every repository made in the work tree since the run started (:meth:`_quarantine`, on a
        worker thread); each is a note of the run, made here, on the broker's own thread.  ``final`` (every
        agent has exited): the agents' own directories too (:meth:`_quarantine_agent_dirs`)."""
        notes = await trio.to_thread.run_sync(self._quarantine)
        if final:
            notes += await trio.to_thread.run_sync(self._quarantine_agent_dirs)
        for note in notes:
            self.note(note)
        return notes

    def _quarantine(self) -> list[GitNote]:
        """Make inert every repository made in the work tree since the run started.

        The person's git, run in a directory of the tree, finds the nearest ``.git`` (or a directory laid
        out as a bare repository) and obeys its configuration -- ``core.fsmonitor`` runs a program at
        every ``git status``.  A boxed agent can make one (``git init sub``, a few files), and git lists
        no ``.git`` entry, so nothing shows it; another agent's git run there obeys it too, inside that
        agent's box.  So its ``.git`` (or a bare layout's ``HEAD``) is renamed aside: nothing is deleted,
        and git finds no repository there any more.
        """
        state = os.path.relpath(self.state, self.layout.repo)
        inside = not state.startswith("..")
        # The broker's own are not an agent's (an unboxed run's state directory in the tree).
        added = [found for found in self.added_repositories() if not (inside and (found == state or found.startswith(state + "/")))]
        why = "a repository made in the work tree during the run (the person's git, or another agent's, run inside it would obey its configuration)"
        return _make_inert(self.layout.repo, added, why, shown=lambda rel: rel)

    def added_repositories(self) -> set[str]:
        """The repositories in the tree now that were not there when the run started, or were put in the place of one."""
        now = nested_repositories(self.layout.repo)
        return {rel for rel in now if rel not in self.nested_at_start or identity(self.layout.repo, rel) != self.nested_at_start[rel]}

    def _quarantine_agent_dirs(self) -> list[GitNote]:
        """Make inert every repository in the agents' directories (``<state>/agents``).

        A box may write its agent directory, which outlives it, and a link in the work tree may lead there
        (``sub/tools -> <agent dir>/w``): the walk of the tree does not follow links, but the person's
        ``cd sub/tools && git status`` does, and git there found ``<agent dir>/w/.git`` and obeyed it.  No
        broker keeps a repository in an agent directory, so every one found there is renamed aside."""
        root = self.state / "agents"
        if not root.is_dir():
            return []
        why = "a repository in an agent's directory (a link in the work tree may lead there)"
        return _make_inert(root, nested_repositories(root), why, shown=lambda rel: str(root / rel))

    # -- notes ---------------------------------------------------------------------------------

    def note(self, note: GitNote) -> None:
        self.notes.append(note)
        if self.on_note is not None:
            self.on_note(note)

    # -- following the person's branches -----------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look at the person's branches every :data:`LOOK` seconds; make every agent's git directory follow."""
        task_status.started()
        while True:
            await trio.sleep(LOOK)
            tips = await trio.to_thread.run_sync(gitfiles.branch_tips, self.person_fd)
            if tips != self.tips or any(v.dirty for v in self.dirs.values()):
                async with self.lock:
                    await trio.to_thread.run_sync(self.follow_all)

    def follow_all(self, skip: str | None = None) -> None:
        """Every agent's git directory to the person's branches as they are now (the caller holds :attr:`lock`)."""
        self.tips = gitfiles.branch_tips(self.person_fd)
        for session, view in list(self.dirs.items()):
            if session == skip:
                continue
            left = "; ".join(view.follow(self.tips, self.scratch))
            if left and left != view.stuck:
                log.info("agent git directory %s not followed yet: %s", session, left)
            view.stuck = left

    def person_tips(self) -> dict[str, str]:
        """The person's branches now: ``refs/heads/NAME -> oid``."""
        return gitfiles.branch_tips(self.person_fd)

    def _flags_now(self) -> frozenset[tuple[str, str]]:
        """The hiding flags in the person's index now, parsed again only when the index changed."""
        try:
            st = os.stat("index", dir_fd=self.person_fd, follow_symlinks=False)
        except OSError:
            return frozenset()
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._flags_key:
            data = gitfiles.read_at(self.person_fd, "index", limit=gitfiles.LARGE)
            try:
                self._flags = frozenset(gitfiles.flagged_entries(data, hash_size=self.layout.hash_size)) if data else frozenset()
            except (gitfiles.IndexError_, ValueError):
                self._flags = frozenset()
            self._flags_key = key
        return self._flags

    def person_index_flags(self) -> set[tuple[str, str]]:
        """Flags in the person's index that hide a change and were not there when the run started
        (an unboxed agent works in the person's index)."""
        return gitfiles.new_flags(self.person_fd, self.person_flags, hash_size=self.layout.hash_size)

    def close(self) -> None:
        self.reader.close()
        for view in self.dirs.values():
            view.close()
        if self.person_fd >= 0:
            os.close(self.person_fd)
            self.person_fd = -1
        shutil.rmtree(self.scratch, ignore_errors=True)
