"""Is the person's repository laid out the ordinary way, and what in the tree does git trust?

``conclave run`` checks this before anything starts (:func:`check`), and
refuses -- exit 2, one line saying why and how to fix it -- when:

* ``.git`` is not a real directory (a ``gitdir:`` file of a linked worktree
  or submodule, a symbolic link), or holds ``commondir`` or a ``reftable``;
* the configuration sets ``core.worktree``, ``core.bare``, a repository
  format past 1, or an extension other than ``objectFormat`` and
  ``refStorage = files`` (``worktreeConfig``, partial clones, ...): an
  agent's git directory is built for the ordinary layout only;
* the person's effective configuration names a path *inside the work tree*
  that git will run or read as configuration, and that path does not exist
  (an agent could create it), or a submodule the index names has no
  directory in the tree.

Such a path that does exist is **protected**: read-only in every box
(strict: bound read-only over itself, each directory on its way pinned so
it cannot be renamed aside; landlock: left out of the write grants).  The
keys looked at (:data:`PATH_KEYS`, :data:`COMMAND_KEYS`): ``core.hooksPath``
(a ``.husky``), ``include.path`` and ``includeIf.*.path`` (and any file the
configuration was read from), ``core.fsmonitor`` (a program),
``core.attributesFile``, ``core.excludesFile``, and every key whose value is
a command -- drivers (``filter.*.clean/smudge/process``, ``diff.*.textconv``,
``diff.*.command``, ``merge.*.driver``), pagers, editors,
``core.sshCommand``, ``gpg.program``, ``credential.helper``, ``!`` aliases
-- for each word of it that is a path.  And each submodule's ``.git`` (or the
empty directory of one not checked out): the person's ``git status`` runs git
inside every submodule it finds, with that repository's configuration.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path
from typing import Final, Iterable, final

import attrs

from broker.sandbox import gitrun
from broker.sandbox.nested import nested_repositories

#: Keys whose value is a path git reads as configuration or runs from.
PATH_KEYS: Final = {"core.hookspath": "hooks", "core.attributesfile": "attributes", "core.excludesfile": "ignore rules", "core.fsmonitor": "a program"}
#: Keys whose value is a command line git runs (a pattern over the lower-cased key).
COMMAND_KEYS: Final = re.compile(
    r"^(filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver|core\.(pager|editor|sshcommand|askpass)"
    r"|pager\..+|sequence\.editor|gpg(\..+)?\.program|credential(\..+)?\.helper|alias\..+|diff\.external|interactive\.difffilter"
    r"|difftool\..+\.cmd|mergetool\..+\.cmd|web\.browser|browser\..+\.(cmd|path)|core\.gitproxy|sendemail\..*cmd|uploadpack\.packobjectshook)$"
)
#: Extensions an agent's git directory can be built for.
SUPPORTED_EXTENSIONS: Final = {"objectformat": None, "refstorage": "files"}
BOOL_WORDS: Final = {"true", "false", "yes", "no", "on", "off", "1", "0", ""}


class GitLayoutError(ValueError):
    """The repository is not laid out as conclave needs; the message says why and how to fix it."""


@final
@attrs.frozen
class Layout:
    """The person's repository as conclave runs on it."""

    repo: Path
    git_dir: Path
    #: Paths inside the work tree git trusts (hooks, configuration, programs): read-only in every box.
    protected: tuple[Path, ...] = ()
    #: ``sha1`` or ``sha256``.
    object_format: str = "sha1"
    #: The configuration keys an agent's git directory copies: ``key -> value``.
    copied: tuple[tuple[str, str], ...] = ()
    #: ``core.hooksPath`` as configured (None: ``.git/hooks``).
    hooks_path: str | None = None

    @property
    def objects(self) -> Path:
        return self.git_dir / "objects"

    @property
    def hash_size(self) -> int:
        return 32 if self.object_format == "sha256" else 20


def check(repo: Path) -> Layout:
    """The layout of the repository at ``repo`` (its work tree's top).

    Raises:
        GitLayoutError: naming what is unusual and how to fix it.
    """
    git = repo / ".git"
    try:
        st = os.lstat(git)
    except FileNotFoundError:
        raise GitLayoutError(f"{repo} has no .git directory; run conclave at the top of an ordinary clone (git init or git clone)") from None
    if stat.S_ISLNK(st.st_mode):
        raise GitLayoutError(f"{git} is a symbolic link; conclave needs the repository's own .git directory there (move the real one in place)")
    if not stat.S_ISDIR(st.st_mode):
        raise GitLayoutError(
            f"{git} is a file (a linked worktree or a submodule's checkout); run conclave in the main checkout of the repository instead"
        )
    for name, why in (("commondir", "it borrows another repository's refs and config"), ("reftable", "its refs are a reftable")):
        if os.path.lexists(git / name):
            raise GitLayoutError(f"{git / name} exists: {why}; conclave supports the ordinary layout only -- run it in an ordinary clone")
    entries = _config(git)
    values = {key: value for _scope, _origin, key, value in entries}
    version = values.get("core.repositoryformatversion", "0")
    if version not in ("0", "1"):
        raise GitLayoutError(f"core.repositoryformatversion is {version}; conclave supports versions 0 and 1")
    if values.get("core.worktree"):
        raise GitLayoutError(f"core.worktree is set ({values['core.worktree']}); unset it (git config --unset core.worktree) or run in an ordinary clone")
    if values.get("core.bare", "false").lower() in ("true", "yes", "on", "1"):
        raise GitLayoutError("core.bare is true; conclave runs agents on a repository with a work tree")
    for key, value in values.items():
        if key.startswith("extensions."):
            name = key.split(".", 1)[1]
            if name not in SUPPORTED_EXTENSIONS or (SUPPORTED_EXTENSIONS[name] and value.lower() != SUPPORTED_EXTENSIONS[name]):
                raise GitLayoutError(f"the repository uses extensions.{name} = {value}; conclave supports objectFormat and refStorage = files only")
    protected = _protected(repo, git, entries)
    protected += [p for p in _submodules(repo, git) if p not in protected]
    protected += [p for p in _nested(repo) if p not in protected]
    copied = tuple((k, values[k]) for k in ("core.filemode", "core.symlinks", "core.ignorecase", "user.name", "user.email") if k in values)
    return Layout(repo, git, tuple(protected), values.get("extensions.objectformat", "sha1").lower(), copied, values.get("core.hookspath") or None)


def _config(git: Path) -> list[tuple[str, str, str, str]]:
    """The effective configuration: ``(scope, origin, key, value)`` in the order git reads it."""
    out = gitrun.run(git, None, ["config", "--list", "--show-origin", "--show-scope", "-z"], check=False)
    if out.returncode != 0:
        raise GitLayoutError(f"git cannot read the configuration of {git}: {out.stderr.decode(errors='replace').strip()}")
    fields = out.stdout.split(b"\0")
    entries = []
    for i in range(0, len(fields) - 2, 3):
        scope, origin, item = (f.decode(errors="surrogateescape") for f in fields[i : i + 3])
        key, _, value = item.partition("\n")
        if scope != "command":  # the broker's own -c options (gitrun.SAFE_OPTIONS), not the person's
            entries.append((scope, origin, key, value))
    return entries


def _protected(repo: Path, git: Path, entries: Iterable[tuple[str, str, str, str]]) -> list[Path]:
    found: dict[Path, None] = {}

    def guard(raw: str, key: str, what: str, base: Path) -> None:
        path = _resolve(raw, base)
        if path is None or not _inside(path, repo) or _inside(path, git):
            return
        if os.path.realpath(path) == os.path.realpath(repo):
            raise GitLayoutError(f"{key} names the work tree itself ({raw!r}): agents write there, so git would trust what they write; point it elsewhere")
        if not os.path.lexists(path):
            raise GitLayoutError(
                f"{key} names {raw!r} -- {what} inside the work tree ({path}), which does not exist, so an agent could create it "
                f"and git would trust it; create it (it is then made read-only for agents) or unset {key}"
            )
        found[path] = None

    for _scope, origin, key, value in entries:
        if origin.startswith("file:"):
            source = Path(origin[5:])
            guard(str(source), f"a configuration file ({key})", "configuration", repo)
            base = source.parent
        else:
            base = repo
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            guard(value, key, "configuration to include", base)
        elif key in PATH_KEYS:
            if key == "core.fsmonitor" and value.strip().lower() in BOOL_WORDS:
                continue
            guard(value, key, PATH_KEYS[key], repo)
        elif COMMAND_KEYS.match(key):
            for word in _words(value.removeprefix("!")):
                if "/" in word or word.startswith((".", "~")):
                    guard(word, key, "a program git runs", repo)
    return list(found)


def _nested(repo: Path) -> list[Path]:
    """The person's own repositories in the work tree when the run starts (a clone under ``vendor/``, say): each
    one's ``.git``, or a directory laid out as a bare repository.  The person's git run inside one obeys its
    configuration, so a box that wrote ``core.fsmonitor`` into it, or put a repository of its own in its place,
    ran code as the person; repositories made during the run are the sweep's (``gitviews.quarantine``)."""
    return [repo / rel for rel in sorted(nested_repositories(repo))]


def _submodules(repo: Path, git: Path) -> list[Path]:
    """What of each submodule's checkout git trusts: its ``.git`` (a ``gitdir:`` file or a git
    directory), or the empty directory of one not checked out.

    The person's ``git status`` (and ``diff``, ``commit``) runs git inside every submodule
    the index names whose ``.git`` it finds -- with that repository's configuration, hooks
    and fsmonitor.  An agent that pointed the ``.git`` file at a repository of its own, or
    put one into an empty submodule directory, would have its code run by the person.

    Raises:
        GitLayoutError: a submodule's directory is missing (an agent could create it).
    """
    out = gitrun.run(git, None, ["ls-files", "--stage", "-z"], check=False)
    if out.returncode != 0:
        raise GitLayoutError(f"git cannot read the index of {git}: {out.stderr.decode(errors='replace').strip()}")
    found = []
    for record in out.stdout.split(b"\0"):
        meta, _, name = record.partition(b"\t")
        if not meta.startswith(b"160000 "):
            continue
        rel = name.decode(errors="surrogateescape")
        where = repo / rel
        if os.path.lexists(where / ".git"):
            found.append(where / ".git")
        elif where.is_dir() and not where.is_symlink():
            found.append(where)
        else:
            raise GitLayoutError(
                f"the submodule {rel} has no directory in the work tree, so an agent could create it and the person's git would "
                f"run its configuration; check it out (git submodule update --init -- {rel}) or create the empty directory {where}"
            )
    return found


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _resolve(raw: str, base: Path) -> Path | None:
    raw = raw.strip()
    if not raw:
        return None
    if raw.startswith("~"):
        raw = os.path.expanduser(raw)
    if raw.startswith("%(prefix)/"):
        return None
    return Path(os.path.normpath(base / raw))


def _inside(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or beneath it, spelled as given or with links resolved."""
    roots = {os.path.normpath(root), os.path.realpath(root)}
    candidates = {os.path.normpath(path), os.path.realpath(path)}
    return any(c == r or c.startswith(r.rstrip("/") + "/") for c in candidates for r in roots)
