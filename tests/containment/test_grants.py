"""Trusted things never lie inside a box's grants: the table, attacked row by row.

``broker.sandbox.grants`` is the one statement of what a box may read and
write.  These tests iterate over it from real boxes (``strict`` and
``landlock``), with an unboxed agent of the same uid as the control that
shows each attack would otherwise work:

* every credential in ``HOME_SECRETS`` is unreadable, and every toolchain
  path the table grants is readable (the positive control) -- and not
  writable, since the person runs those programs next;
* another project's state directory, at the default place and at a
  ``--state-dir`` its broker registered, is unreadable;
* a process inside any conclave box or agent tree, of another broker, is
  refused the operator key it holds, and the kernel mechanism behind each
  reason (user namespace, Landlock scope, broker ancestry) refuses on its
  own; the operator's own process is accepted.

They run as whoever runs the suite and again as uid 65534
(``tests/broker/test_as_user.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.harness import Run, puppet_command
from broker.sandbox import grants
from broker.sandbox import machine as sandbox_machine
from tests.containment.test_attacks import PROBE

pytestmark = pytest.mark.uid_independent("what each box may read and write: Landlock and mounts; no cgroup, process limit or capability on the path")

MACHINE = sandbox_machine.probe()
#: The levels that box an agent here, with the agent that runs at each.
BOXED = {"alice": "strict", "dave": "landlock"}
#: Table paths that are files in a real home (the rest are directories).
FILES = frozenset({
    ".gitconfig", "config", "ignore", "attributes", ".tool-versions", ".pgpass", ".netrc", ".git-credentials", "credentials",
    ".npmrc", ".pypirc", "credentials.toml", "config.toml", "settings.xml", "settings-security.xml", "gradle.properties",
    ".claude.json", ".bash_history", ".zsh_history", ".psql_history", ".bashrc", ".profile", ".zshrc",
})  # fmt: skip


def plant(path: Path, text: str) -> Path:
    """Make a table path as a real home has it; return the file whose bytes a reader gets."""
    if path.name in FILES:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path
    path.mkdir(parents=True, exist_ok=True)
    (path / "probe").write_text(text)
    return path / "probe"


def agents_at_every_level(**extra: Any) -> list[dict[str, Any]]:
    for level in BOXED.values():
        if MACHINE.offers(level) is not None:
            pytest.fail(f"this machine offers no {level} box ({MACHINE.offers(level)}); the grants cannot be tested here")
    return [{"name": name, "sandbox": level, **extra} for name, level in BOXED.items()] + [{"name": "carol", "sandbox": "off", **extra}]


@pytest.fixture(scope="module")
def home_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One broker whose agents' home holds every toolchain path and every secret of the table."""
    root = tmp_path_factory.mktemp("grants")
    home = root / "home"
    home.mkdir()
    toolchains = {p: plant(Path(p), f"# toolchain {p}\n") for p in grants.toolchains(str(home))}
    secrets = {p: plant(Path(p), f"# SECRET {p}\n") for p in grants.secrets(str(home))}
    (home / ".gitconfig").write_text("[user]\n\tname = someone\n\temail = someone@example.invalid\n")
    toolchains[str(home / ".gitconfig")] = home / ".gitconfig"
    saved = {k: os.environ.get(k) for k in ("HOME",)}
    os.environ["HOME"] = str(home)
    run = Run(root / "run", agents_at_every_level())
    try:
        run.start()
        yield {"run": run, "home": home, "toolchains": toolchains, "secrets": secrets}
    finally:
        run.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def attempt(run: Run, agent: str, what: str, target: str | Path) -> dict[str, Any]:
    out = run.puppet(agent).sh(sys.executable, "-I", "-c", PROBE, what, str(target))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


BATCH = textwrap.dedent(
    """
    import errno, json, sys
    def result(fn, path):
        try:
            return {"ok": True, "data": fn(path)}
        except OSError as exc:
            return {"ok": False, "error": errno.errorcode.get(exc.errno, str(exc.errno))}
    def read(path):
        with open(path, "rb") as f:
            return f.read(64).decode("utf-8", "replace")
    def write(path):
        with open(path, "a") as f:
            f.write("planted\\n")
    actions = {"read": read, "write": write}
    print(json.dumps([result(actions[what], path) for what, path in json.loads(sys.argv[1])]))
    """
)


def leaked(result: dict[str, Any]) -> bool:
    """Did a read get a planted secret's bytes?  (A strict box may show an emptied file instead of none.)"""
    return result["ok"] and "SECRET" in (result.get("data") or "")


def attempts(run: Run, agent: str, what: str, targets: list[Path]) -> list[dict[str, Any]]:
    """``what`` on every one of ``targets``, from one process of ``agent`` (one result each, in order)."""
    out = run.puppet(agent).sh(sys.executable, "-I", "-c", BATCH, json.dumps([[what, str(t)] for t in targets]))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_no_toolchain_grant_holds_a_secret() -> None:
    """The table's own consistency: a toolchain row that held a credential would grant it."""
    home = "/home/someone"
    for secret in grants.secrets(home):
        for granted in grants.toolchains(home):
            assert not grants.inside(secret, granted), f"{granted} would grant {secret}"


def test_every_home_secret_is_unreadable_from_every_box(home_run: dict[str, Any]) -> None:
    run = home_run["run"]
    paths, files = list(home_run["secrets"]), list(home_run["secrets"].values())
    for agent in BOXED:
        for path, got in zip(paths, attempts(run, agent, "read", files)):
            assert not got["ok"] and got["error"] in ("ENOENT", "EACCES"), (agent, path, got)
    # Control: unboxed, the same uid reads every one -- the box is what keeps them out.
    assert all(got["ok"] for got in attempts(run, "carol", "read", files))


def test_every_toolchain_path_is_readable_and_none_is_writable(home_run: dict[str, Any]) -> None:
    run = home_run["run"]
    paths, files = list(home_run["toolchains"]), list(home_run["toolchains"].values())
    for agent in BOXED:
        for path, got in zip(paths, attempts(run, agent, "read", files)):
            assert got["ok"], (agent, path, got)
        # Read-only: a poisoned toolchain would run as the person next.
        for path, got in zip(paths, attempts(run, agent, "write", files)):
            assert not got["ok"], (agent, path, got)
        assert not any(b"planted" in f.read_bytes() for f in files), agent
    # Control: unboxed, the same write lands.
    target = files[0]
    assert attempt(run, "carol", "write", target)["ok"] and b"planted" in target.read_bytes()


def test_the_rest_of_home_is_private_in_strict_and_closed_in_landlock(home_run: dict[str, Any]) -> None:
    """A strict box writes caches into a home of its own; nothing of it reaches the person's home."""
    run, home = home_run["run"], home_run["home"]
    assert attempt(run, "alice", "write", home / ".cache-of-alice")["ok"]
    assert not (home / ".cache-of-alice").exists()
    assert attempt(run, "dave", "write", home / ".cache-of-dave")["error"] == "EACCES"
    assert not (home / ".cache-of-dave").exists()
    # A landlock box's caches go to its own temporary directory instead.
    env = run.puppet("dave").sh("sh", "-c", 'echo "$XDG_CACHE_HOME"').stdout.strip()
    assert env.startswith(run.puppet("dave").sh("sh", "-c", 'echo "$TMPDIR"').stdout.strip())
    # Control: unboxed, home is the person's.
    assert attempt(run, "carol", "write", home / ".cache-of-carol")["ok"] and (home / ".cache-of-carol").exists()


# -- state directories -----------------------------------------------------------------------------


def test_another_projects_state_dirs_are_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Project Q's agents try project P's operator key: at the default place (under the state root),
    and at a --state-dir P's broker registered inside a directory Q's agents may read."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("data the team may read\n")
    # Q starts first: a --state-dir registered later is kept out of every box built after it.
    q = Run(tmp_path / "q", agents_at_every_level(may_spawn=1, allow_read=[str(shared)]))
    p_default = Run(tmp_path / "p", [{"name": "pat", "sandbox": "off"}], default_state=True)
    p_custom = Run(tmp_path / "p2", [{"name": "pam", "sandbox": "off"}], state=shared / "p2-state")
    try:
        q.start()
        p_default.start()
        p_custom.start()
        keys = [p_default.state / "operator.key", p_custom.state / "operator.key"]
        assert str(p_default.state).startswith(str(home / ".local" / "state" / "conclave"))
        for name in ("alice", "dave", "carol"):
            child = q.spawn_puppet(name, "late")  # a box built after P's brokers registered their state
            for key in keys:
                got = attempt_child(child, "read", key)
                if name == "carol":
                    assert got["ok"], key  # control: unboxed, P's key is a file of the uid
                else:
                    assert not got["ok"] and got["error"] in ("ENOENT", "EACCES"), (name, key, got)
            # Control: the rest of the granted directory is readable from the box.
            assert attempt_child(child, "read", shared / "notes.txt")["ok"], name
    finally:
        for run in (q, p_default, p_custom):
            run.close()


def attempt_child(puppet: Any, what: str, target: str | Path) -> dict[str, Any]:
    out = puppet.sh(sys.executable, "-I", "-c", PROBE, what, str(target))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- the operator key from inside another broker's box ---------------------------------------------

OPERATOR_ATTEMPT = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = {path!r}
    {prelude}
    from broker.client import BlockingClient
    from broker.errors import ConclaveError
    try:
        with BlockingClient.for_operator({socket!r}, operator_key=open({key!r}).read().strip()) as client:
            print(json.dumps({{"role": client.identity["role"]}}))
    except ConclaveError as exc:
        print(json.dumps({{"refused": exc.code.value, "message": exc.message}}))
    """
)


def operator_attempt(key: Path, socket: Path, prelude: str = "") -> str:
    return OPERATOR_ATTEMPT.format(path=sys.path, prelude=prelude, socket=str(socket), key=str(key))


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """P's broker, and Q's agents holding P's key (copied in: they cannot read it) and a way to P's socket."""
    root = tmp_path_factory.mktemp("two-projects")
    p = Run(root / "p", [{"name": "pat", "sandbox": "off"}])
    q = Run(root / "q", agents_at_every_level())
    try:
        p.start()
        q.start()
        key = q.repo / "stolen-operator.key"
        shutil.copy(p.state / "operator.key", key)
        # A hard link to P's socket inside Q's tree: the same socket, wherever P's state lives.
        socket = q.repo / "p.sock"
        os.link(p.socket_path(), socket)
        yield {"p": p, "q": q, "key": key, "socket": socket}
    finally:
        q.close()
        p.close()


def test_a_box_of_another_broker_is_refused_the_operator_key_it_holds(two_projects: dict[str, Any], tmp_path: Path) -> None:
    q, key, socket = two_projects["q"], two_projects["key"], two_projects["socket"]
    script = tmp_path / "attempt.py"
    script.write_text(operator_attempt(key, socket))
    expected = {
        "alice": ("user namespace", "abstract socket", "descends from pid"),  # strict
        "dave": ("abstract socket", "descends from pid"),  # landlock
        "carol": ("descends from pid",),  # off: only its broker ancestry gives it away
    }
    for agent, reasons in expected.items():
        # The script itself is in /tmp (private in strict): run it from the tree Q's agents share.
        inside = q.repo / "attempt.py"
        shutil.copy(script, inside)
        out = q.puppet(agent).sh(sys.executable, "-I", str(inside))
        got = json.loads(out.stdout or "{}")
        assert got.get("refused") == "auth_failed", (agent, out.stdout, out.stderr)
        for reason in reasons:
            assert reason in got["message"], (agent, reason, got["message"])
        if agent != "alice":
            assert "user namespace" not in got["message"], got["message"]
    # Control: the operator's own process, with the same key through the same link, is the operator.
    import subprocess

    control = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=60)
    assert json.loads(control.stdout) == {"role": "operator"}, control.stderr


def test_each_kernel_mark_of_a_box_refuses_the_key_on_its_own(two_projects: dict[str, Any], tmp_path: Path) -> None:
    """Outside every broker's tree, a process that is only in a new user namespace, or only in a
    Landlock domain scoped on abstract sockets, is refused -- each mechanism stands alone."""
    import subprocess

    p = two_projects["p"]
    sandbox = str(Path(grants.__file__).parent)
    key, socket = p.state / "operator.key", p.socket_path()
    namespace = f"sys.path.insert(0, {sandbox!r}); import namespaces; namespaces.enter()"
    scoped = (
        f"sys.path.insert(0, {sandbox!r}); import landlock; "
        "landlock.apply(landlock.Policy(read=['/'], write=['/tmp', '/dev'] + [p for p in sys.path if p], devices=['/dev/null']))"
    )
    cases = {"user namespace": namespace}
    if MACHINE.landlock_abi >= 6:
        cases["abstract socket"] = scoped
    for reason, prelude in cases.items():
        script = tmp_path / f"{reason.replace(' ', '-')}.py"
        script.write_text(operator_attempt(key, socket, prelude))
        out = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=60)
        got = json.loads(out.stdout or "{}")
        assert got.get("refused") == "auth_failed" and reason in got["message"], (reason, out.stdout, out.stderr)
        assert "descends from" not in got["message"], got["message"]
    # Control: the same script with no restriction first is the operator.
    plain = tmp_path / "plain.py"
    plain.write_text(operator_attempt(key, socket))
    out = subprocess.run([sys.executable, "-I", str(plain)], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == {"role": "operator"}, out.stderr


def test_the_threat_models_table_is_the_one_the_code_uses() -> None:
    """docs/THREAT_MODEL.md shows the grants as the code states them: rendered from the same table."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "THREAT_MODEL.md").read_text()
    start, end = grants.DOC_MARKERS
    assert start in doc and end in doc, "docs/THREAT_MODEL.md lost its grants table markers"
    shown = doc.split(start, 1)[1].split(end, 1)[0].strip()
    assert shown == grants.render_markdown().strip(), "regenerate it: python -c 'from broker.sandbox import grants; print(grants.render_markdown())'"


def test_an_allow_read_of_all_of_home_still_keeps_every_secret_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator may grant all of home (allow_read = ["~"]): the secrets are carved out of it all the same."""
    home = tmp_path / "home"
    secrets = [plant(Path(p), f"# SECRET {p}\n") for p in grants.secrets(str(home))]
    (home / "notes.txt").write_text("the person's notes\n")
    (home / ".gitconfig").write_text("[user]\n\tname = someone\n\temail = someone@example.invalid\n")
    monkeypatch.setenv("HOME", str(home))
    run = Run(tmp_path / "run", agents_at_every_level(allow_read=[str(home)]))
    try:
        run.start()
        for agent in BOXED:
            got = attempts(run, agent, "read", [home / "notes.txt", *secrets])
            assert got[0]["ok"], (agent, got[0])  # the grant holds: the rest of home is readable
            for path, result in zip(secrets, got[1:]):
                assert not leaked(result), (agent, path, result)  # absent, refused, or emptied (bound over by /dev/null)
        # Control: unboxed, the secrets are files of the uid.
        assert all(leaked(r) for r in attempts(run, "carol", "read", secrets))
    finally:
        run.close()


def test_a_home_reached_through_a_symbolic_link_is_private_all_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$HOME may be a link (/home -> /usr/home): the work tree inside it still comes back, the secrets still do not."""
    real = tmp_path / "real-home"
    (real / ".cargo" / "bin").mkdir(parents=True)
    (real / ".cargo" / "bin" / "tool").write_text("# a toolchain\n")
    secret = plant(real / ".pgpass", "# SECRET the database password\n")
    (tmp_path / "home").symlink_to(real)
    (tmp_path / "nvm").mkdir()  # a toolchain that is itself a link out of home
    (tmp_path / "nvm" / "node").write_text("# node\n")
    (real / ".nvm").symlink_to(tmp_path / "nvm")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    run = Run(tmp_path / "home" / "project", agents_at_every_level())  # the work tree under home, named through the link
    try:
        run.start()
        for agent in BOXED:
            home = tmp_path / "home"
            secret_read, tool_read, node_read = attempts(run, agent, "read", [home / ".pgpass", home / ".cargo" / "bin" / "tool", home / ".nvm" / "node"])
            assert not leaked(secret_read) and tool_read["ok"] and node_read["ok"], (agent, secret_read, tool_read, node_read)
            # its work tree came back (README.md exists: a landlock box makes nothing new at the top of the tree)
            assert attempt(run, agent, "write", run.repo / "README.md")["ok"], agent
        assert leaked(attempts(run, "carol", "read", [secret])[0])  # control: unboxed, it is a file of the uid
    finally:
        run.close()


def test_a_box_built_from_a_re_pointed_write_grant_writes_where_the_link_leads(tmp_path: Path) -> None:
    """Why no write grant may lie where a box writes (``conclave run`` refuses it:
    tests/broker/test_sandbox_cli.py::test_a_write_grant_a_box_could_re_point_is_refused): a box
    is built from a grant's path at each spawn, and follows a symbolic link found there.  The
    attack: a box able to write around its grant (an ``allow_write = ["build"]`` inside the work
    tree) replaces the directory with a link to ``~/.local/bin`` and spawns a child; the child's box
    writes a program into the person's PATH.  Here the test replaces the grant for the box, as the
    refused team file would have let it, and each boxed parent's child writes through the link."""
    person_bin = tmp_path / "home" / ".local" / "bin"  # stands for the person's PATH
    person_bin.mkdir(parents=True)
    grants_of = {name: tmp_path / f"scratch-{name}" for name in BOXED}
    for path in grants_of.values():
        path.mkdir()
    agents = [{**a, "may_spawn": 1, "allow_write": [str(grants_of[a["name"]])]} for a in agents_at_every_level() if a["name"] in BOXED]
    run = Run(tmp_path / "run", agents)
    try:
        run.start()
        for name, grant in grants_of.items():
            # Before: the parent's own box cannot write the person's PATH.
            assert not attempt(run, name, "write", person_bin / f"{name}-parent")["ok"], name
            grant.rmdir()
            grant.symlink_to(person_bin)  # what a box that writes around its grant would do
            child = run.spawn_puppet(name, "child")
            got = attempt_child(child, "write", grant / f"{name}-child")
            assert got["ok"] and (person_bin / f"{name}-child").exists(), (name, got)
    finally:
        run.close()


def test_hundreds_of_registered_state_dirs_are_each_denied_and_a_linked_one_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every state directory a broker of this user ever registered is denied at every spawn, so the
    box is built from the whole history (one pass, each path resolved by the kernel): 300 registered
    directories inside a directory the agent may read, one of them registered through a symbolic link,
    each one's key refused from a landlock and a strict box; the rest of the directory stays readable."""
    from broker import paths as paths_mod
    from broker.sandbox import box, landlock

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    shared = tmp_path / "shared"
    (shared / "real").mkdir(parents=True)
    (shared / "link").symlink_to(shared / "real")
    (shared / "notes.txt").write_text("data the team may read\n")
    registered = [shared / "runs" / f"run-{i}" for i in range(300)] + [shared / "link" / "linked-run"]
    for state in registered:
        state.mkdir(parents=True)
        (state / "operator.key").write_text("a key\n")
    root = paths_mod.state_roots()[0]
    root.mkdir(parents=True)
    (root / paths_mod.STATE_REGISTRY_NAME).write_text("".join(f"{state}\n" for state in registered))
    # The kernel's resolution is realpath's, for every shape of path the registry and the grants hold.
    (shared / "dangling").symlink_to(tmp_path / "nowhere")
    for path in (shared / "link" / "linked-run", shared / "link", shared / "dangling", shared / "absent" / "x", tmp_path / "." / "shared" / "", Path("/")):
        assert landlock.resolved(str(path)) == os.path.realpath(path), path
    repo = tmp_path / "repo"
    repo.mkdir()
    probe = sandbox_machine.probe()
    for level in ("landlock", "strict"):
        assert probe.offers(level) is None, f"this machine must offer the {level} sandbox: {probe.offers(level)}"
        built = box.build(level, [sys.executable, "-I", "-c", PROBE_MANY], machine=probe, repo=repo, state=tmp_path / "own-state",
                          agent_dir=tmp_path / "agent", socket_path=tmp_path / "s.sock", session=f"many-{level}", read=[str(shared)])  # fmt: skip
        try:
            targets = [str(shared / "notes.txt"), *(str(state / "operator.key") for state in registered)]
            out = subprocess.run(built.argv, env={**os.environ, **built.env}, cwd=repo, input="\n".join(targets), capture_output=True, text=True, timeout=60)
        finally:
            built.release()
        assert out.returncode == 0, (level, out.stderr[-2000:])
        read = json.loads(out.stdout)
        assert read[str(shared / "notes.txt")] == "ok", (level, read[str(shared / "notes.txt")])  # control
        leaked = [path for path in targets[1:] if read[path] == "ok"]
        assert not leaked, (level, len(leaked), leaked[:3])


PROBE_MANY = """
import json, sys
got = {}
for path in sys.stdin.read().split("\\n"):
    try:
        open(path).read()
        got[path] = "ok"
    except OSError as exc:
        got[path] = type(exc).__name__
print(json.dumps(got))
"""
