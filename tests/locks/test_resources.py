"""Normalizing what a caller names, and deciding overlap both ways.

Pure functions over a real directory tree the test made (symlinks included);
the broker-level tests in this package drive the same code through the wire.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from locks import globs
from locks.beneath import NotPlain, open_beneath
from locks.resources import Kind, Normalizer, ResourceError, covers, overlaps
from locks.watch import DirectoryWatch


@pytest.fixture(params=[True, False], ids=["openat2", "by-hand"])
def fast(request: pytest.FixtureRequest) -> bool:
    """Both ways of asking the kernel where a path is (see locks.beneath)."""
    return request.param


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "sub").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a\n")
    (root / "real.py").write_text("r\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "escape")  # a directory link that leaves the repository
    os.symlink("/etc/passwd", root / "passwd")  # a file link that leaves it
    os.symlink("real.py", root / "alias.py")  # a link that stays inside
    os.symlink("src", root / "code")  # a directory link that stays inside
    return root


@pytest.mark.parametrize(
    "text, key, kind",
    [
        ("src/a.py", "src/a.py", Kind.PATH),
        ("./src//a.py", "src/a.py", Kind.PATH),
        ("src/", "src/**", Kind.GLOB),  # a directory means everything under it
        ("src", "src/**", Kind.GLOB),
        ("newdir/", "newdir/**", Kind.GLOB),  # a trailing slash for one that does not exist yet
        ("newfile", "newfile", Kind.PATH),
        ("src/**/*.py", "src/**/*.py", Kind.GLOB),
        ("src/**/**/x", "src/**/x", Kind.GLOB),
        ("git", "git", Kind.NAMED),
        ("name://release-notes", "name://release-notes", Kind.NAMED),
        ("name://d\u00e9ploiement", "name://d\u00e9ploiement", Kind.NAMED),  # accents, in NFC, are fine
        ("slot://llm-api", "slot://llm-api", Kind.SLOT),
    ],
)
def test_resources_are_normalized(repo: Path, fast: bool, text: str, key: str, kind: Kind) -> None:
    r = Normalizer(repo, fast=fast).resource(text)
    assert (r.key, r.kind) == (key, kind)


def test_absolute_path_inside_the_repo_becomes_relative(repo: Path, fast: bool) -> None:
    assert Normalizer(repo, fast=fast).resource(str(repo / "src" / "a.py")).key == "src/a.py"


@pytest.mark.parametrize(
    "text, why",
    [
        ("../x", "'..'"),
        ("src/../../x", "'..'"),
        ("/etc/passwd", "outside the repository"),
        ("escape/file", "symlink"),
        ("passwd", "symlink"),
        ("escape/**", "symlink"),
        (".git/index", "git resource"),
        (".", "repository root"),
        ("", "empty"),
        ("src/[a", "unclosed"),
        ("src/a**b", "whole path segment"),
        ("src/[z-a]", "backwards"),
        ("name://has space", "without spaces"),
        ("name://de\u200bploy", "U\\+200B .ZERO WIDTH SPACE. at character 3"),  # looks like name://deploy
        ("name://\u202edeploy", "RIGHT-TO-LEFT OVERRIDE"),
        ("name://de\u0301ploiement", "NFC form"),  # looks like name://déploiement
        ("a\x01b", "control character"),
    ],
)
def test_bad_resources_are_refused_with_the_reason(repo: Path, fast: bool, text: str, why: str) -> None:
    with pytest.raises(ResourceError, match=why.replace("[", r"\[").replace("(", r"\(")):
        Normalizer(repo, fast=fast).resource(text)


def test_a_symlink_inside_the_repo_conflicts_with_its_target(repo: Path, fast: bool) -> None:
    n = Normalizer(repo, fast=fast)
    link, target = n.resource("alias.py"), n.resource("real.py")
    assert link.aliases == ("real.py",)
    assert overlaps(link, target) and overlaps(target, link)
    # Positive control: an unrelated file does not.
    assert not overlaps(link, n.resource("src/a.py"))
    # A directory link: code/a.py is src/a.py.
    assert overlaps(n.resource("code/*.py"), n.resource("src/a.py"))


# (a, b, overlap?) -- checked in both orders.
OVERLAPS = [
    ("src/a.py", "src/a.py", True),
    ("src", "src/a.py", True),  # a directory covers what is under it
    ("src/", "src/sub/deep.py", True),
    ("src/**", "src", True),  # ... and itself (a submodule's gitlink)
    ("src/a.py", "src/a.pyc", False),
    ("src/a", "src/ab", False),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/a.txt", False),
    ("src/*.py", "lib/a.py", False),
    ("*.md", "README.md", True),
    ("*.md", "docs/README.md", False),  # * never crosses a slash
    ("**/*.md", "docs/README.md", True),
    ("src/**", "src/x/y/z.c", True),
    ("src/**", "tests/**", False),
    ("src/*", "src/sub/deep.py", False),  # * is one level: write src/** for all
    ("src/*", "src/sub", True),
    ("src/**/test_*.py", "src/pkg/x_test.py", False),  # a file has nothing under it
    ("**/*.py", "README.md", False),
    ("src/a*", "src/*b", True),  # both match src/ab
    ("src/a*.py", "src/*.txt", False),
    ("src/[abc].py", "src/[!abc].py", False),
    ("src/[a-c].py", "src/[!ab].py", True),  # both match src/c.py
    ("src/?", "src/ab", False),
    ("src/**/test_*.py", "src/test_x.py", True),
    ("src/**/test_*.py", "src/pkg/x_test.py", False),
    ("docs/*.md", "docs/**/index.*", True),
    ("a/*/c", "a/b/*", True),
    ("a/*/c", "a/b/d", False),
    ("git", "git", True),
    ("git", "name://git", False),
    ("name://x", "name://x", True),
    ("name://x", "name://y", False),
    ("slot://x", "slot://x", False),  # slots count; they never conflict by name
]


@pytest.mark.parametrize("a, b, expected", OVERLAPS)
def test_overlap_is_decided_both_ways(repo: Path, a: str, b: str, expected: bool) -> None:
    n = Normalizer(repo)
    ra, rb = n.resource(a), n.resource(b)
    assert overlaps(ra, rb) is expected
    assert overlaps(rb, ra) is expected


def test_overlap_errs_on_conflict_when_the_search_is_too_big(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each segment of one ends in d, of the other in a: they never meet, and the search proves it...
    a, b = globs.compile_pattern("/".join(["*a*b*c*d"] * 8)), globs.compile_pattern("/".join(["*d*c*b*a"] * 8))
    assert globs._intersects(a, b) is False
    # ...but with too small a budget to finish, the answer is "conflict", never "free".
    monkeypatch.setattr(globs, "PRODUCT_LIMIT", 5)
    assert globs._intersects(a, b) is True


def test_a_staged_path_is_covered_only_by_a_matching_lock(repo: Path) -> None:
    n = Normalizer(repo)
    path = n.path("src/sub/x.py")
    assert covers(n.resource("src/**"), path)
    assert covers(n.resource("src"), path)
    assert covers(n.resource("src/*/*.py"), path)
    assert not covers(n.resource("src/*"), path)
    assert not covers(n.resource("src/*.py"), path)
    assert not covers(n.resource("git"), path)
    # A literal path with glob characters matches only itself.
    odd = n.path("data/[1].txt")
    assert covers(n.resource("data/"), odd)
    assert not overlaps(odd, n.resource("data/1.txt"))


def _kernel_has_openat2() -> bool:
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (5, 6)


@pytest.mark.skipif(not _kernel_has_openat2(), reason="openat2 needs Linux 5.6")
def test_the_one_call_look_refuses_every_symlink_on_the_way(repo: Path) -> None:
    beneath = open_beneath(str(repo))
    assert beneath is not None  # this kernel has openat2: the fast path is the one tested above
    # Controls: plain names are answered.
    assert beneath.is_directory("") and beneath.is_directory("src") and beneath.is_directory("src/sub")
    assert not beneath.is_directory("src/a.py") and not beneath.is_directory("src/missing.py")
    assert not beneath.is_directory("real.py/x") and not beneath.is_directory("missing/x")
    # Any symlink, on the way or as the last name, inside or out: the slow way.
    for through_a_link in ("escape", "escape/file", "passwd", "alias.py", "code", "code/a.py", "code/sub"):
        with pytest.raises(NotPlain):
            beneath.is_directory(through_a_link)


def test_both_ways_of_looking_agree_on_every_shape_of_path(repo: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside" / "not-yet", repo / "dangling")  # leads out, to nothing yet
    (repo / "src" / "sub" / "deep.txt").write_text("d\n")
    texts = [
        "src/a.py", "src", "src/", "src/sub/deep.txt", "src/sub/missing/x", "missing/a/b", "real.py/x",
        "alias.py", "code/a.py", "code/sub/deep.txt", "code/**", "escape/x", "passwd", "dangling",
        "dangling/x", "src/**/*.py", "**/*.txt", "*.py", str(repo / "src" / "a.py"),
    ]  # fmt: skip
    fast, by_hand = Normalizer(repo, fast=True), Normalizer(repo, fast=False)

    def outcome(n: Normalizer, text: str, literal: bool) -> object:
        try:
            return n.path(text) if literal else n.resource(text)
        except ResourceError as exc:
            return f"refused: {exc}"

    refused = 0
    for text in texts:
        for literal in (False, True):
            a, b = outcome(fast, text, literal), outcome(by_hand, text, literal)
            assert a == b, (text, literal)
            refused += isinstance(a, str)
    assert 0 < refused < len(texts)  # both kinds of answer were compared


def test_a_path_seen_before_is_looked_at_again_every_time(repo: Path, tmp_path: Path, fast: bool) -> None:
    """The normalizer keeps the parse of plain paths, never the filesystem's answer."""
    n = Normalizer(repo, fast=fast)
    (repo / "x").mkdir()
    (repo / "x" / "a.txt").write_text("a\n")
    (repo / "f.txt").write_text("f\n")
    for _ in range(2):  # the second round is answered from what was kept
        assert n.resource("x/a.txt") == n.resource("x/a.txt") and n.resource("x/a.txt").kind is Kind.PATH
        assert (n.resource("later").key, n.resource("later").kind) == ("later", Kind.PATH)
        assert n.resource("f.txt").aliases == ()
    # The directory becomes a symlink that leads out: refused now.
    (repo / "x").rename(tmp_path / "moved")
    os.symlink(tmp_path / "moved", repo / "x")
    with pytest.raises(ResourceError, match="symlink"):
        n.resource("x/a.txt")
    # What was missing is now a directory: everything under it.
    (repo / "later").mkdir()
    assert (n.resource("later").key, n.resource("later").kind) == ("later/**", Kind.GLOB)
    # A file replaced by a link inside the repository: both names now.
    (repo / "f.txt").unlink()
    os.symlink("real.py", repo / "f.txt")
    assert n.resource("f.txt").aliases == ("real.py",)


def test_a_change_deep_on_the_way_is_seen(repo: Path, tmp_path: Path, fast: bool) -> None:
    n = Normalizer(repo, fast=fast)
    deep = repo / "d1" / "d2"
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("f\n")
    for _ in range(2):
        assert n.resource("d1/d2/f.txt").kind is Kind.PATH
        assert n.resource("d1/d2/new/x").kind is Kind.PATH
    (deep / "f.txt").write_text("changed contents\n")  # contents are not names: nothing to look at again
    assert n.resource("d1/d2/f.txt").kind is Kind.PATH
    (deep / "new" / "x").mkdir(parents=True)  # created two levels below the last watched directory
    assert (n.resource("d1/d2/new/x").key, n.resource("d1/d2/new/x").kind) == ("d1/d2/new/x/**", Kind.GLOB)
    deep.rename(tmp_path / "away")  # d2 leaves; in its place a symlink out of the repository
    os.symlink(tmp_path / "away", deep)
    with pytest.raises(ResourceError, match="symlink"):
        n.resource("d1/d2/f.txt")


def test_the_watch_reports_names_not_contents(tmp_path: Path) -> None:
    watch = DirectoryWatch.open()
    assert watch is not None
    (tmp_path / "sub").mkdir()
    (tmp_path / "file").write_text("a\n")
    assert watch.watch(str(tmp_path)) and watch.watch(str(tmp_path / "sub"))
    assert not watch.changed()
    (tmp_path / "file").write_text("new contents\n")
    assert not watch.changed()  # control: writing a file moves no name
    (tmp_path / "sub" / "new").write_text("n\n")
    assert watch.changed() and not watch.changed()  # reported once
    (tmp_path / "file").rename(tmp_path / "renamed")
    assert watch.changed()
    os.symlink(tmp_path, tmp_path / "link")
    assert watch.changed()
    assert not watch.watch(str(tmp_path / "link"))  # never through a symlink
    assert not watch.watch(str(tmp_path / "renamed"))  # nor a file


def test_a_hard_link_cannot_be_locked_by_any_of_its_names(repo: Path, fast: bool) -> None:
    """Attack: a second name for a file (os.link) is a second path to one inode;
    a lock on either name would not cover the other.  Every name is refused,
    saying why and how to break the link -- directly, literally (a staged
    path) and through a symlink.  Control: distinct files parse as themselves
    and do not overlap."""
    os.link(repo / "src" / "a.py", repo / "twin.py")
    os.symlink("twin.py", repo / "to-twin.py")
    n = Normalizer(repo, fast=fast)
    for text in ("src/a.py", "twin.py", "./twin.py", str(repo / "twin.py"), "to-twin.py"):
        with pytest.raises(ResourceError, match="hard link") as refused:
            n.resource(text)
        assert "2 names" in str(refused.value) and "cp " in str(refused.value)
        with pytest.raises(ResourceError, match="hard link"):
            n.path(text)
    # Control: two ordinary files lock as themselves, independently.
    a, b = n.resource("real.py"), n.resource("src/sub/new.py")
    assert (a.key, b.key) == ("real.py", "src/sub/new.py") and not overlaps(a, b)
    # A glob names files by pattern, not by inode: it parses (the guard catches a hard link it covers, see docs/LOCKS.md).
    assert n.resource("src/**").key == "src/**"
    # Breaking the link as the refusal says makes both names lockable, as two files.
    os.unlink(repo / "twin.py")
    assert Normalizer(repo, fast=fast).resource("src/a.py").key == "src/a.py"


def test_a_hard_link_made_after_a_name_was_looked_at_is_still_refused(repo: Path, fast: bool) -> None:
    """Attack: the lock table keeps the parse of plain paths while nothing moved
    in their directories -- but a hard link made elsewhere moves nothing in the
    file's own directory.  The new name is refused, and where no watch exists
    (no inotify) the old name is looked at again too."""
    n = Normalizer(repo, fast=fast)
    assert n.resource("src/a.py").key == "src/a.py"
    (repo / "elsewhere").mkdir()
    os.link(repo / "src" / "a.py", repo / "elsewhere" / "b.py")
    with pytest.raises(ResourceError, match="hard link"):
        n.resource("elsewhere/b.py")
    blind = Normalizer(repo, fast=fast)
    os.unlink(repo / "elsewhere" / "b.py")
    assert blind.resource("src/a.py").key == "src/a.py"  # kept as plain
    blind._watch = None  # as on a machine without inotify
    os.link(repo / "src" / "a.py", repo / "elsewhere" / "b.py")
    with pytest.raises(ResourceError, match="hard link"):
        blind.resource("src/a.py")
