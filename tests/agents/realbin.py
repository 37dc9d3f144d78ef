"""The real Claude Code and Codex CLI binaries the end-to-end tests drive, pinned.

Both are native programs published on the npm registry, each in a package of
its own per platform (``@anthropic-ai/claude-code-linux-x64``, and
``@openai/codex@<version>-linux-x64``); the ``claude`` and ``codex`` packages a
person installs with npm only pick the right one (Codex's through a node
script that execs it).  The tests fetch exactly those platform packages from
the registry over HTTPS -- no npm and no Node.js needed, so ``make test`` works
on a machine with only Python -- check each tarball against the integrity
hash the registry publishes, unpack them into a cache directory *outside* the
repository, and put ``claude`` and ``codex`` in its ``bin/``.  Later runs reuse
the cache and touch no network.

    python -m tests.agents.realbin            # install if missing, print the paths

The cache is ``$CONCLAVE_AGENT_BINARIES`` if set, else
``$XDG_CACHE_HOME/conclave/agent-binaries`` (``~/.cache/...``).  It holds
programs, not state: nothing a test run writes goes there.  To run the tests
offline, fill it once on a connected machine (``make agent-binaries``), copy
the directory over and point ``CONCLAVE_AGENT_BINARIES`` at it.  The registry
is ``$npm_config_registry`` (as npm reads it) or https://registry.npmjs.org/.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Final, NamedTuple

CLAUDE_CODE: Final = ("@anthropic-ai/claude-code", "2.1.332")
CODEX: Final = ("@openai/codex", "0.171.0")
ENV_CACHE: Final = "CONCLAVE_AGENT_BINARIES"
ENV_REGISTRY: Final = "npm_config_registry"
DEFAULT_REGISTRY: Final = "https://registry.npmjs.org/"
TIMEOUT: Final = 60
#: The platform packages' names for this machine's CPU (npm's `cpu` names).
#: tarfile's extraction filters came with Python 3.11.4; Debian 12's python3 is 3.11.2.
_HAS_FILTERS: Final = hasattr(tarfile, "data_filter")


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``tar`` into ``dest`` as tarfile's "data" filter does: nothing written outside ``dest``
    (absolute names, ``..``, links that lead out), no devices or FIFOs, no setuid bits, no chown.
    Without the filters (Python before 3.11.4) the same refusals are made here, before anything is written.

    Raises:
        tarfile.TarError: a member the filter refuses (nothing unpacked when checked here).
    """
    if _HAS_FILTERS:
        tar.extractall(dest, filter="data")
        return
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    members = tar.getmembers()
    for member in members:
        where = os.path.join(root, member.name)
        if os.path.isabs(member.name) or not inside(where):
            raise tarfile.ExtractError(f"{member.name!r} would be written outside {dest}")
        if member.issym() or member.islnk():
            target = os.path.join(os.path.dirname(where), member.linkname) if member.issym() else os.path.join(root, member.linkname)
            if os.path.isabs(member.linkname) or not inside(target):
                raise tarfile.ExtractError(f"{member.name!r} links outside {dest} ({member.linkname!r})")
        elif not (member.isfile() or member.isdir()):
            raise tarfile.ExtractError(f"{member.name!r} is neither a file, a directory nor a link")
        member.mode &= 0o755  # no setuid, setgid or sticky bit, nothing group- or world-writable
        member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
    tar.extractall(dest, members=members)


_CPU: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
#: Codex's vendor directory names the Rust target triple.
_TRIPLE: Final = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


class AgentBinariesError(RuntimeError):
    """The pinned binaries are not there and could not be installed; the message says why."""


class Binaries(NamedTuple):
    root: Path  #: the cache directory of this pinned pair
    bin: Path  #: put it on PATH and the presets find `claude` and `codex`
    claude: Path
    codex: Path
    claude_version: str
    codex_version: str


class Package(NamedTuple):
    """One platform package: what to fetch, and where its program lies inside the tarball's ``package/``."""

    name: str
    version: str
    program: str  #: relative to the unpacked package directory
    command: str  #: the name it gets in ``bin/``


def cache_root() -> Path:
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or "/nonexistent", ".cache")
    return Path(base) / "conclave" / "agent-binaries"


def prefix() -> Path:
    return cache_root() / f"claude-code-{CLAUDE_CODE[1]}_codex-{CODEX[1]}-{_cpu()}"


def _cpu() -> str:
    machine = platform.machine().lower()
    if sys.platform != "linux" or machine not in _CPU:
        raise AgentBinariesError(f"the real-agent tests fetch the Linux x64/arm64 builds; this is {sys.platform} {machine}")
    return _CPU[machine]


def packages() -> list[Package]:
    """The two platform packages for this machine (glibc or musl for Claude Code)."""
    cpu = _cpu()
    musl = "" if _glibc() else "-musl"
    return [
        Package(f"{CLAUDE_CODE[0]}-linux-{cpu}{musl}", CLAUDE_CODE[1], "claude", "claude"),
        # Codex publishes its platform builds as versions of the one package name.
        Package(CODEX[0], f"{CODEX[1]}-linux-{cpu}", f"vendor/{_TRIPLE[cpu]}/bin/codex", "codex"),
    ]


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


def _versions(root: Path) -> tuple[str, str] | None:
    """Both binaries' --version, if both are installed and answer as pinned."""
    claude, codex = root / "bin" / "claude", root / "bin" / "codex"
    if not (claude.exists() and codex.exists()):
        return None
    try:
        out = [subprocess.run([str(b), "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout.strip()
               for b in (claude, codex)]  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out[0] != f"{CLAUDE_CODE[1]} (Claude Code)" or out[1] != f"codex-cli {CODEX[1]}":
        return None
    return out[0], out[1]


def ensure() -> Binaries:
    """The pinned binaries, fetched first if they are missing.

    Raises:
        AgentBinariesError: the registry cannot be reached, a tarball does not
            match its published integrity hash, or the unpacked binaries do not
            report the pinned versions.
    """
    root = prefix()
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:  # two test runs install once
        fcntl.flock(lock, fcntl.LOCK_EX)
        versions = _versions(root)
        if versions is None:
            _install(root)
            versions = _versions(root)
            if versions is None:
                raise AgentBinariesError(
                    f"fetched {CLAUDE_CODE[0]}@{CLAUDE_CODE[1]} and {CODEX[0]}@{CODEX[1]} into {root}, but "
                    "`claude --version` / `codex --version` do not report those versions; remove that directory and retry"
                )
    bindir = root / "bin"
    return Binaries(root, bindir, bindir / "claude", bindir / "codex", *versions)


def registry() -> str:
    url = os.environ.get(ENV_REGISTRY) or DEFAULT_REGISTRY
    return url if url.endswith("/") else url + "/"


def _install(root: Path) -> None:
    bindir = root / "bin"
    bindir.mkdir(exist_ok=True)
    for package in packages():
        target = root / package.name.replace("/", "__") / package.version
        if not (target / package.program).exists():
            _fetch(package, target)
        link = bindir / package.command
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(target / package.program, bindir))


def _fetch(package: Package, target: Path) -> None:
    """Download one package's tarball, check it against the registry's integrity, unpack it into ``target``."""
    spec = f"{package.name}@{package.version}"
    base = registry()
    meta_url = base + urllib.parse.quote(package.name, safe="@") + "/" + urllib.parse.quote(package.version)
    meta = json.loads(_get(meta_url, spec, base))
    dist = meta.get("dist") or {}
    tarball, integrity = dist.get("tarball"), dist.get("integrity")
    if not tarball or not str(integrity).startswith("sha512-"):
        raise AgentBinariesError(f"the registry's entry for {spec} ({meta_url}) names no tarball with a sha512 integrity hash")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        archive = Path(scratch) / "package.tgz"
        digest = hashlib.sha512()
        sys.stderr.write(f"agent binaries: fetching {spec} from {base}\n")
        with open(archive, "wb") as out:
            for chunk in _stream(tarball, spec, base):
                digest.update(chunk)
                out.write(chunk)
        if base64.b64encode(digest.digest()).decode() != integrity.removeprefix("sha512-"):
            raise AgentBinariesError(f"{spec}: the tarball from {tarball} does not match the integrity hash the registry publishes; not installed")
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archive) as tar:
            _extract(tar, unpacked)  # no links out, no device nodes, no absolute paths
        program = unpacked / "package" / package.program
        if not program.is_file():
            raise AgentBinariesError(f"{spec} has no {package.program}; has the package's layout changed? (tests/agents/realbin.py)")
        program.chmod(program.stat().st_mode | 0o111)  # the data filter keeps the mode bits it can
        shutil.rmtree(target, ignore_errors=True)
        os.replace(unpacked / "package", target)


def _get(url: str, spec: str, base: str) -> bytes:
    return b"".join(_stream(url, spec, base))


def _stream(url: str, spec: str, base: str):  # type: ignore[no-untyped-def]
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            while chunk := response.read(1 << 20):
                yield chunk
    except urllib.error.HTTPError as exc:
        raise AgentBinariesError(f"the npm registry ({base}) answered {exc.code} for {spec} ({url})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentBinariesError(
            f"the npm registry could not be reached ({base}: {reason}), so the real-agent tests cannot run: {spec} is not in the cache "
            f"{cache_root()}; fill it on a connected machine (`make agent-binaries`) and point ${ENV_CACHE} at a copy"
        ) from None


def main() -> int:
    try:
        found = ensure()
    except AgentBinariesError as exc:
        sys.stderr.write(f"agent binaries: {exc}\n")
        return 1
    print(f"{found.claude_version}: {found.claude}")
    print(f"{found.codex_version}: {found.codex}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
