"""The real Claude Code and Codex CLI binaries the end-to-end tests drive, pinned.

Both install from the npm registry as native binaries.  They go into a cache
directory *outside* the repository, one directory per pinned pair, and are
reused by every later run (``npm --prefer-offline`` also reuses npm's own
tarball cache).  ``make agent-binaries`` installs them; the tests install them
themselves when they are missing, and fail -- never skip -- saying why when
that cannot be done (no npm, no registry).

    python -m tests.agents.realbin            # install if missing, print the paths

The cache is ``$CONCLAVE_AGENT_BINARIES`` if set, else
``$XDG_CACHE_HOME/conclave/agent-binaries`` (``~/.cache/...``).  It holds
programs, not state: nothing a test run writes goes there.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final, NamedTuple

CLAUDE_CODE: Final = ("@anthropic-ai/claude-code", "2.1.332")
CODEX: Final = ("@openai/codex", "0.171.0")
ENV_CACHE: Final = "CONCLAVE_AGENT_BINARIES"
INSTALL_TIMEOUT: Final = 900


class AgentBinariesError(RuntimeError):
    """The pinned binaries are not there and could not be installed; the message says why."""


class Binaries(NamedTuple):
    root: Path  #: the npm prefix
    bin: Path  #: node_modules/.bin: put it on PATH and the presets find `claude` and `codex`
    claude: Path
    codex: Path
    claude_version: str
    codex_version: str


def cache_root() -> Path:
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or "/nonexistent", ".cache")
    return Path(base) / "conclave" / "agent-binaries"


def prefix() -> Path:
    return cache_root() / f"claude-code-{CLAUDE_CODE[1]}_codex-{CODEX[1]}"


def _versions(root: Path) -> tuple[str, str] | None:
    """Both binaries' --version, if both are installed and answer as pinned."""
    modules = root / "node_modules"
    claude = modules / ".bin" / "claude"
    codex = modules / ".bin" / "codex"
    if not (claude.exists() and codex.exists()):
        return None
    try:
        out = [subprocess.run([str(b), "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout.strip()
               for b in (claude, codex)]
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out[0] != f"{CLAUDE_CODE[1]} (Claude Code)" or out[1] != f"codex-cli {CODEX[1]}":
        return None
    return out[0], out[1]


def ensure() -> Binaries:
    """The pinned binaries, installed first if they are missing.

    Raises:
        AgentBinariesError: npm is missing, the registry cannot be reached, or
            the installed binaries do not report the pinned versions.
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
                    f"installed {CLAUDE_CODE[0]}@{CLAUDE_CODE[1]} and {CODEX[0]}@{CODEX[1]} into {root}, but "
                    "`claude --version` / `codex --version` do not report those versions; remove that directory and retry"
                )
    bindir = root / "node_modules" / ".bin"
    return Binaries(root, bindir, bindir / "claude", bindir / "codex", *versions)


def _install(root: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise AgentBinariesError(
            "the real-agent tests need npm (Node.js >= 18) to install Claude Code and Codex CLI from the npm registry; "
            "install Node.js, then run `make agent-binaries`"
        )
    specs = [f"{name}@{version}" for name, version in (CLAUDE_CODE, CODEX)]
    argv = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", *specs]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AgentBinariesError(f"`{' '.join(argv)}` did not finish in {INSTALL_TIMEOUT} s; is the npm registry reachable?") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        unreachable = any(code in tail for code in ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "network"))
        why = "the npm registry could not be reached" if unreachable else "npm install failed"
        raise AgentBinariesError(f"{why}, so the real-agent tests cannot run: `{' '.join(argv)}` exited {done.returncode}:\n{tail}")


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
