"""An agent's own git directory: where a boxed agent commits, instead of the person's.

Agents never write the person's git directory.  For each spawn in a
``strict`` box the broker makes ``<state>/gitdirs/<session>/`` (a path whose
every component the agent cannot reach) and the launcher binds it over
``<repo>/.git`` in the agent's mount namespace, with the person's
``.git/objects`` bound read-only inside it at ``shared-objects``.  What the
agent does to it -- hooks, config, ``commondir``, ``info/``, index flags,
replace refs, rebase todo lists -- changes only its own git.

:func:`create` writes it, with directory descriptors, ``O_NOFOLLOW`` and
``O_EXCL`` (:mod:`broker.sandbox.gitfiles`):

* ``HEAD``, a copy of the person's; ``packed-refs`` with the person's refs
  (never ``refs/replace/*``); empty ``refs/heads``, ``refs/tags``;
* ``config`` written from scratch: the repository format,
  ``filemode``/``symlinks``/``ignorecase`` and ``user.name``/``user.email``
  copied, ``core.hooksPath`` at its own hooks, ``gc.auto = 0``,
  ``commit.gpgsign = false``;
* ``objects/info/alternates`` naming ``../shared-objects``: the person's
  objects as the agent sees them (read-only);
* ``info/exclude`` copied; the index copied (stat data kept, so the first
  ``git status`` is fast), or made with ``read-tree`` when the person's is
  split;
* conclave's ``reference-transaction`` hook (``broker.githook``).

:class:`AgentGitDir` keeps it following the person's branch: a branch that
has nothing pending (it shows a commit the broker knows is the person's)
is moved to the person's tip, under git's own ref and index locks, with the
index updated for the paths that changed (``read-tree -m -i``).  A branch
the agent moved itself is left alone: those commits are pending until they
are brought in, or reported when the agent exits.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Final, final

from broker.sandbox import gitfiles, gitrun
from broker.sandbox.gitlayout import Layout

#: Where the person's objects appear inside an agent's git directory (a read-only bind in its box).
SHARED_OBJECTS: Final = "shared-objects"
#: The person's submodules' git directories (``.git/modules``), where they exist: a read-only bind in
#: the box, so the agent's ``git status`` can look inside a checked-out submodule (its ``.git`` file
#: names ``../../.git/modules/...``).  The agent cannot commit there.
SUBMODULES: Final = "modules"
#: Object ids a branch is remembered to have shown without anything pending (the newest are kept).
KNOWN_LIMIT: Final = 512


class Busy(Exception):
    """The agent's git holds a lock the broker needs; try again on the next look."""


@final
class AgentGitDir:
    """One agent's git directory, as the broker keeps it.

    ``known[branch]`` holds the commits that branch may show with nothing
    pending (the person's tips it was given, and the agent's commits that were
    brought in); ``replayed[branch]`` maps an agent's commit to the commit the
    broker made of it on a branch that had moved.  ``baseline`` are the index
    flags the person's own index had when it was copied (not the agent's doing).
    """

    def __init__(self, path: Path, session: str, layout: Layout, fd: int, baseline: frozenset[tuple[str, str]]) -> None:
        self.path = path
        self.session = session
        self.layout = layout
        self.fd = fd
        self.baseline = baseline
        self.known: dict[str, list[str]] = {}
        self.replayed: dict[str, dict[str, str]] = {}
        self.dirty = False
        #: Why the last look could not follow (logged once, not every look).
        self.stuck = ""

    @property
    def objects(self) -> Path:
        return self.path / "objects"

    def remember(self, ref: str, oid: str) -> None:
        seen = self.known.setdefault(ref, [])
        if oid in seen:
            seen.remove(oid)
        seen.append(oid)
        del seen[:-KNOWN_LIMIT]

    def ref(self, ref: str) -> str | None:
        return gitfiles.read_one_ref(self.fd, ref)

    def refs(self) -> dict[str, str]:
        """Its branches as it shows them now."""
        return {k: v for k, v in gitfiles.read_refs(self.fd, skip=())[0].items() if k.startswith("refs/heads/")}

    def pending(self) -> dict[str, str]:
        """Branches the agent moved to commits the broker never brought in: ``ref -> tip``."""
        return {
            ref: oid
            for ref, oid in self.refs().items()
            if oid not in self.known.get(ref, ()) and oid not in self.replayed.get(ref, {})
        }

    def index_flags(self) -> set[tuple[str, str]]:
        """Flags in its index that hide a change, beyond those the person's index already had."""
        return gitfiles.new_flags(self.fd, self.baseline, hash_size=self.layout.hash_size)

    def follow(self, tips: dict[str, str], scratch: Path) -> list[str]:
        """Move every branch with nothing pending to the person's tip; return what could not be done yet.

        Raises nothing: a lock the agent's git holds (:class:`Busy`) leaves the branch for the next look,
        and a link where the broker would write is never written through.
        """
        left: list[str] = []
        head = gitfiles.head_branch(self.fd)
        for ref, tip in tips.items():
            shown = self.ref(ref)
            if shown == tip:
                self.remember(ref, tip)
                continue
            if shown is not None and shown not in self.known.get(ref, ()) and shown not in self.replayed.get(ref, {}):
                continue  # the agent's own commits (or something that is no ref at all): pending
            try:
                self.move(ref, shown, tip, scratch, reindex=ref == head)
            except Busy as exc:
                left.append(f"{ref}: {exc}")
            except OSError as exc:
                # A link or a file where a directory of refs should be: the agent's own doing; its branch stays.
                left.append(f"{ref}: {exc.strerror or exc} (not written through)")
        self.dirty = bool(left)
        return left

    def move(self, ref: str, shown: str | None, tip: str, scratch: Path, *, reindex: bool) -> None:
        """Point ``ref`` from ``shown`` to ``tip`` under git's lock, the index following when ``reindex``.

        Raises:
            Busy: the agent's git holds the ref's or the index's lock, or moved the ref meanwhile.
        """
        head, _, name = ref.rpartition("/")
        parent = gitfiles.open_dir_beneath(self.fd, head, create=True)
        try:
            try:
                lock = gitfiles.Locked(parent, name)
            except FileExistsError:
                raise Busy("its git holds the branch's lock") from None
            with lock:
                if self.ref(ref) != shown:
                    raise Busy("it moved meanwhile")
                if reindex and shown is not None:
                    self._reindex(shown, tip, scratch)
                lock.write(tip.encode() + b"\n")
                lock.commit()
        finally:
            os.close(parent)
        self.remember(ref, tip)

    def _reindex(self, old: str, new: str, scratch: Path) -> None:
        """Its index after the branch moves from ``old`` to ``new``: the paths that changed take the new
        entries, staged work elsewhere stays (``read-tree -m -i``, on a copy in the broker's own directory)."""
        try:
            lock = gitfiles.Locked(self.fd, "index")
        except FileExistsError:
            raise Busy("its git holds index.lock") from None
        with lock:
            data = gitfiles.read_at(self.fd, "index", limit=gitfiles.LARGE)
            with tempfile.TemporaryDirectory(dir=scratch) as work:
                index = Path(work) / "index"
                if data is not None:
                    index.write_bytes(data)
                args = ["read-tree", "-m", "-i", old, new] if data is not None else ["read-tree", new]
                done = gitrun.run(self.layout.git_dir, self.layout.repo, args, extra_env={"GIT_INDEX_FILE": str(index)}, check=False)
                if done.returncode != 0:
                    # Its staged work conflicts with the move: keep its index, say nothing is lost.
                    raise Busy(f"its staged changes conflict with the new commit ({done.stderr.decode(errors='replace').strip()[-200:]})")
                lock.write(index.read_bytes())
            lock.commit()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


def has_submodules(layout: Layout) -> bool:
    """The person's git directory keeps submodules' git directories (a real directory, not a link)."""
    try:
        return stat.S_ISDIR(os.lstat(layout.git_dir / SUBMODULES).st_mode)
    except OSError:
        return False


def create(layout: Layout, root: Path, session: str, *, hook: str, agent_git: Path, baseline: frozenset[tuple[str, str]]) -> AgentGitDir:
    """Make the git directory for one spawn at ``root/session``.

    ``agent_git`` is where the agent will see it (``<repo>/.git`` in its box); ``baseline`` the
    hiding flags the person's index has now (copied with it: not the agent's doing).

    Raises:
        OSError: the directory exists already or cannot be written (the spawn is refused).
    """
    os.makedirs(root, mode=0o700, exist_ok=True)
    parent = gitfiles.open_dir(root)
    try:
        os.mkdir(session, 0o700, dir_fd=parent)
        fd = gitfiles.open_dir(session, dir_fd=parent)
    finally:
        os.close(parent)
    path = root / session
    person = gitfiles.open_dir(layout.git_dir)
    try:
        branches = _fill(fd, person, layout, path, hook=hook, agent_git=agent_git)
    except BaseException:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        os.close(person)
    view = AgentGitDir(path, session, layout, fd, baseline)
    for ref, oid in branches.items():
        view.remember(ref, oid)
    return view


def _fill(fd: int, person: int, layout: Layout, path: Path, *, hook: str, agent_git: Path) -> dict[str, str]:
    """Write everything but the directory itself; return the branches it was given."""
    head = gitfiles.read_at(person, "HEAD")
    if head is None or not (head.startswith(b"ref: refs/") or gitfiles.OID.match(head.strip())):
        raise OSError(22, f"{layout.git_dir / 'HEAD'} is not a ref or an object id")
    gitfiles.create_at(fd, "HEAD", head)
    gitfiles.create_at(fd, "config", config_text(layout, agent_git).encode())
    refs, symbolic = gitfiles.read_refs(person)
    packed = "".join(f"{oid} {name}\n" for name, oid in sorted(refs.items()))
    gitfiles.create_at(fd, "packed-refs", ("# pack-refs with: sorted \n" + packed).encode(errors="surrogateescape"))
    for top in ("refs/heads", "refs/tags", "objects/info", "objects/pack", "info", "hooks", SHARED_OBJECTS):
        os.close(gitfiles.open_dir_beneath(fd, top, create=True))
    if has_submodules(layout):
        os.mkdir(SUBMODULES, 0o700, dir_fd=fd)
    for name, target in symbolic.items():
        head_dir, _, leaf = name.rpartition("/")
        sub = gitfiles.open_dir_beneath(fd, head_dir, create=True)
        try:
            gitfiles.create_at(sub, leaf, f"ref: {target}\n".encode(errors="surrogateescape"))
        finally:
            os.close(sub)
    objects_info = gitfiles.open_dir_beneath(fd, "objects/info")
    try:
        gitfiles.create_at(objects_info, "alternates", f"../{SHARED_OBJECTS}\n".encode())
    finally:
        os.close(objects_info)
    exclude = gitfiles.read_beneath(person, "info/exclude")
    if exclude is not None:
        info = gitfiles.open_dir_beneath(fd, "info")
        try:
            gitfiles.create_at(info, "exclude", exclude)
        finally:
            os.close(info)
    hooks = gitfiles.open_dir_beneath(fd, "hooks")
    try:
        from broker.githook import HOOK

        gitfiles.create_at(hooks, HOOK, hook.encode(), mode=0o755)
    finally:
        os.close(hooks)
    _copy_index(fd, person, layout, path)
    return {k: v for k, v in refs.items() if k.startswith("refs/heads/")}


def _copy_index(fd: int, person: int, layout: Layout, path: Path) -> None:
    """The person's index, copied as it is -- unless it is split (its entries live in a shared file
    the copy would not have): then ``read-tree HEAD`` makes a whole one."""
    with os.scandir(person) as entries:
        split = any(e.name.startswith("sharedindex.") for e in entries)
    if not split:
        data = gitfiles.read_at(person, "index", limit=gitfiles.LARGE)
        if data is not None:  # none yet (nothing ever staged): git makes one when it needs it
            gitfiles.create_at(fd, "index", data)
        return
    if gitrun.run(layout.git_dir, layout.repo, ["rev-parse", "-q", "--verify", "HEAD^{tree}"], check=False).returncode == 0:
        gitrun.run(layout.git_dir, layout.repo, ["read-tree", "HEAD"], extra_env={"GIT_INDEX_FILE": str(path / "index")})


def config_text(layout: Layout, agent_git: Path) -> str:
    """An agent's git configuration, from scratch: nothing of the person's but what git needs to read
    the same work tree the same way, and who commits."""
    copied = dict(layout.copied)
    core = {"repositoryformatversion": "1" if layout.object_format != "sha1" else "0"}
    for key in ("filemode", "symlinks", "ignorecase"):
        if f"core.{key}" in copied:
            core[key] = copied[f"core.{key}"]
    core.update({"bare": "false", "logallrefupdates": "true", "hooksPath": str(agent_git / "hooks")})
    sections: dict[str, dict[str, str]] = {"core": core}
    if layout.object_format != "sha1":
        sections["extensions"] = {"objectformat": layout.object_format}
    user = {k.split(".", 1)[1]: v for k, v in copied.items() if k.startswith("user.")}
    if user:
        sections["user"] = user
    sections["gc"] = {"auto": "0"}
    sections["maintenance"] = {"auto": "false"}  # no `git maintenance run --auto` after every commit
    sections["commit"] = {"gpgsign": "false"}
    sections["tag"] = {"gpgsign": "false"}
    lines = ["# written by conclave for one agent's spawn; the person's configuration is not here"]
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"\t{key} = {_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _value(value: str) -> str:
    if "\n" in value or "\0" in value:
        raise OSError(22, "a configuration value with a newline cannot be copied")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
