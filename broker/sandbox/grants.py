"""What a box may read, write, open and connect to -- and why each is safe there.

Grants are data, stated once (STYLE.md): :data:`GRANTS` is the one table.
:func:`plan` turns it into one agent's paths for ``broker.sandbox.box`` to
hand the launcher, docs/THREAT_MODEL.md shows it as :func:`render_markdown`
renders it (a test holds the two equal), and tests/containment iterates over
it: every toolchain path readable, every secret in :data:`HOME_SECRETS` not.

Home is an allow-list.  Nothing of ``$HOME`` is in a box but what toolchains
need (:data:`GRANTS` rows marked ``home``), what a preset declares
(``SandboxNeeds``) and what the team file allows.  In ``strict`` an empty
tmpfs covers ``$HOME`` and only those paths are bound back, so everything
else reads as absent (git and shells stay quiet) and caches written under
home are the agent's own; in ``landlock`` the same paths are Landlock read
rules, and everything else of home is refused (``EACCES``).

A path in a row is a template: ``~`` is ``$HOME``; ``{uid}`` the user; the
other ``{names}`` expand to what :class:`Context` holds for this spawn.
"""

from __future__ import annotations

import enum
import os
from typing import Final, Iterable, Mapping, final

import attrs

STRICT: Final = ("strict",)
LANDLOCK: Final = ("landlock",)
BOTH: Final = ("strict", "landlock")


class Access(enum.Enum):
    """What a grant lets the box do with a path."""

    #: Read and execute (Landlock READ_FILE, READ_DIR, EXECUTE).
    READ = "read"
    #: Read, write, create, remove, rename beneath it (never a device node).
    WRITE = "write"
    #: Readable, and read-only even where it lies inside a write grant (strict: a
    #: read-only bind over itself; landlock: a hole in the write grant).
    READ_ONLY = "read-only"
    #: strict: an empty tmpfs of its own over it, writable; the granted paths beneath bound back.
    PRIVATE = "private"
    #: A device node it may open and use.
    DEVICE = "device"
    #: A named socket it may connect to (governed by Landlock from ABI 9).
    CONNECT = "connect"
    #: Never readable, even when a broader grant holds it (Landlock carves it out).
    DENIED = "denied"


@final
@attrs.frozen
class Grant:
    """One row: ``paths`` get ``access`` at ``levels``; ``why`` says why that is safe there."""

    what: str
    paths: tuple[str, ...]
    access: Access
    levels: tuple[str, ...]
    why: str
    #: A toolchain path under ``$HOME``: the tests read each one from a box (the positive control).
    home: bool = False


@final
@attrs.frozen
class Secret:
    """A credential that lives under ``$HOME`` and never enters a box (no grant holds it)."""

    path: str
    holds: str


def _toolchain(what: str, paths: tuple[str, ...], why: str) -> Grant:
    return Grant(what, paths, Access.READ, BOTH, why, home=True)


#: Credentials under home.  No toolchain row holds one (a test checks); a team file's
#: ``allow_read`` that holds one has it carved out; an ``allow_write`` that holds one is refused.
HOME_SECRETS: Final = (
    Secret("~/.ssh", "ssh keys: `ssh localhost` would run anything as you, outside every box"),
    Secret("~/.gnupg", "signing and decryption keys"),
    Secret("~/.pgpass", "PostgreSQL passwords (the broker's database role, docs/DEPLOYMENT.md)"),
    Secret("~/.netrc", "passwords curl, git and pip send to servers"),
    Secret("~/.git-credentials", "git's credential store"),
    Secret("~/.config/git/credentials", "git's credential store (XDG location)"),
    Secret("~/.aws", "AWS keys"),
    Secret("~/.config/gcloud", "Google Cloud credentials"),
    Secret("~/.azure", "Azure credentials"),
    Secret("~/.config/gh", "the GitHub CLI's token"),
    Secret("~/.config/hub", "hub's GitHub token"),
    Secret("~/.docker", "container registry logins (config.json)"),
    Secret("~/.kube", "Kubernetes cluster credentials"),
    Secret("~/.npmrc", "npm registry tokens"),
    Secret("~/.pypirc", "PyPI upload tokens"),
    Secret("~/.cargo/credentials", "the crates.io token (old name)"),
    Secret("~/.cargo/credentials.toml", "the crates.io token"),
    Secret("~/.cargo/config.toml", "cargo settings, which may hold registry tokens"),
    Secret("~/.m2/settings.xml", "Maven repository passwords"),
    Secret("~/.m2/settings-security.xml", "Maven's master password"),
    Secret("~/.gradle/gradle.properties", "Gradle repository and signing credentials"),
    Secret("~/.terraform.d", "Terraform Cloud tokens"),
    Secret("~/.local/share/uv/credentials", "uv's index credentials"),
    Secret("~/.claude", "Claude Code's login (each agent gets a configuration directory of its own)"),
    Secret("~/.claude.json", "Claude Code's account settings"),
    Secret("~/.codex", "Codex's login (each agent gets a CODEX_HOME of its own)"),
    Secret("~/.password-store", "pass's encrypted passwords"),
    Secret("~/.local/share/keyrings", "the desktop keyring"),
    Secret("~/.mozilla", "Firefox profiles: cookies, saved passwords"),
    Secret("~/.config/google-chrome", "Chrome profiles: cookies, saved passwords"),
    Secret("~/.config/chromium", "Chromium profiles: cookies, saved passwords"),
    Secret("~/.screen", "GNU screen's sockets: a deputy that runs commands in your sessions"),
    Secret("~/.bash_history", "commands typed with secrets on them"),
    Secret("~/.zsh_history", "commands typed with secrets on them"),
    Secret("~/.psql_history", "SQL typed with secrets in it"),
    Secret("~/.bashrc", "shell start-up, often exporting API keys"),
    Secret("~/.profile", "shell start-up, often exporting API keys"),
    Secret("~/.zshrc", "shell start-up, often exporting API keys"),
)

#: What your own processes run or trust from home, outside every box, besides the secrets: every
#: entry of home whose name begins with a dot (shell start-up files, tools' configurations and
#: caches -- ~/.cache/pip, ~/.npm --, ~/.local's programs, editors' plugins, direnv's allow list),
#: these names, and where each toolchain row lies.  No write grant holds or lies inside one: a
#: program, a plugin or a cached wheel an agent put there would run as you at your next command.
HOME_RUN: Final = ("~/bin",)

#: System paths every box reads (root-owned, read-only to the user).
SYSTEM_READ: Final = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/srv",
    "/var/lib", "/var/cache", "/nix", "/snap", "/gnu",
)  # fmt: skip
#: The only device nodes an agent may open (not all of /dev: the person's terminals are there).
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: Terminals: in a strict box a devpts of its own (it cannot open the person's terminal, where
#: TIOCSTI would type into their shell); a Landlock-only box gets none (no pseudo-terminals there).
PTYS: Final = ("/dev/pts", "/dev/ptmx")

GRANTS: Final = (
    Grant(
        "the system", SYSTEM_READ, Access.READ, BOTH,
        "owned by root and read-only to you; every process of the machine reads them. A state directory "
        "there is refused (`conclave run`): a box that started before it was made could read it",
    ),
    Grant(
        "/proc, /sys", ("/proc", "/sys"), Access.READ, BOTH,
        "across Landlock domains the kernel refuses ptrace-class access (another process's `environ`, `mem`); "
        "`cmdline` and `status` stay readable (never put a secret on a command line)",
    ),
    Grant(
        "/run", ("/run",), Access.READ, BOTH,
        "system services' sockets and state; connecting to a named socket is not governed before Landlock ABI 9 "
        "(the residual below); `/run/user/<uid>` is not in it (next rows)",
    ),
    Grant(
        "temporary space", ("/tmp", "/dev/shm", "/run/user/{uid}"), Access.PRIVATE, STRICT,
        "an empty tmpfs of its own: the deputies' sockets there (tmux, D-Bus, ssh-agent, editors) are not; what "
        "the box is granted beneath (a work tree in /tmp, the broker's socket) is bound back",
    ),
    Grant(
        "its temporary directory", ("{temp}",), Access.WRITE, LANDLOCK,
        "a 0700 directory of its own named in TMPDIR (and XDG_CACHE_HOME beneath it), removed when it exits; "
        "the rest of /tmp and /run/user/<uid> is not granted",
    ),
    Grant("the user's runtime directory", ("/run/user/{uid}",), Access.DENIED, LANDLOCK, "the deputies' sockets live there"),
    Grant("devices", DEVICES, Access.DEVICE, BOTH, "data sinks and sources, and its own controlling terminal; not the rest of /dev"),
    Grant(
        "terminals", PTYS, Access.DEVICE, STRICT,
        "a devpts instance of its own: it makes terminals, and cannot open yours (TIOCSTI, escape sequences)",
    ),
    Grant(
        "the work tree", ("{repo}",), Access.WRITE, BOTH,
        "shared by design: what agents change there is reviewed, locked and guarded at commit, never run by conclave "
        "(what git may take from it: docs/ARCHITECTURE.md); conclave's installation inside it stays read-only",
    ),
    Grant(
        "its agent directory", ("{agent_dir}",), Access.WRITE, BOTH,
        "this spawn's identity file and generated configs; no other agent and no broker reads code from it",
    ),
    Grant(
        "the broker's socket", ("{socket}",), Access.CONNECT, BOTH,
        "every request is authenticated by ticket and peer credentials; the operator key is refused from any box",
    ),
    Grant(
        "conclave's installation", ("{installation}",), Access.READ_ONLY, BOTH,
        "agents run `conclave`; you run it next, so no box may change it (a `.pth` in site-packages runs at every "
        "interpreter start): read-only even inside the work tree, else `conclave run` refuses",
    ),
    Grant(
        "what its preset declares", ("{preset_read}",), Access.READ, BOTH,
        "the coding agent's own program (its npm tree, the agent-binaries cache): programs, no state",
    ),
    Grant(
        "what its preset writes", ("{preset_write}",), Access.WRITE, BOTH,
        "per-agent directories only (CLAUDE_CONFIG_DIR, CODEX_HOME): never a directory another agent reads",
    ),
    Grant(
        "the team file's allow_read", ("{allow_read}",), Access.READ, BOTH,
        "the operator's choice, accepted with the team file (`conclave team accept`); secrets and state "
        "directories inside are carved out; one a box could re-point with a symbolic link (beneath the work tree "
        "or a boxed agent's allow_write) is refused",
    ),
    Grant(
        "the team file's allow_write", ("{allow_write}",), Access.WRITE, BOTH,
        "the operator's choice, accepted with the team file; one that holds a secret, a state directory, "
        "conclave's installation or what your own tools run from home (a dot entry such as ~/.cache or "
        "~/.local/bin, ~/bin, a toolchain row, or where a link there leads) is refused, and so is one a box could "
        "re-point with a symbolic link (beneath the work tree or another agent's allow_write, or holding the tree)",
    ),
    Grant(
        "home", ("~",), Access.PRIVATE, STRICT,
        "an empty tmpfs over $HOME: only the rows marked home, the preset's and the team file's paths (and the "
        "work tree, its agent directory, the socket, conclave) are bound back; what it writes there is its own",
    ),
    _toolchain("user programs", ("~/.local/bin",), "pip --user, pipx, uv tool and the Claude Code installer put programs here"),
    _toolchain("user Python packages", ("~/.local/lib",), "pip --user's packages; read-only, as your next python imports them"),
    _toolchain("pipx", ("~/.local/share/pipx/venvs", "~/.local/share/pipx/shared"), "pipx's environments"),
    _toolchain("uv", ("~/.local/share/uv/python", "~/.local/share/uv/tools"), "uv's Pythons and tools (not its credentials)"),
    _toolchain("mise", ("~/.local/share/mise/installs", "~/.local/share/mise/shims"), "mise's runtimes (not its config, which may set secrets)"),
    _toolchain("pnpm, fnm", ("~/.local/share/pnpm", "~/.local/share/fnm"), "Node runtimes and global packages"),
    _toolchain("Rust", ("~/.cargo/bin", "~/.cargo/registry", "~/.cargo/git", "~/.rustup"), "toolchains and crate sources; not ~/.cargo's credentials or config"),
    _toolchain("pyenv", ("~/.pyenv",), "Python versions and shims (conclave's own interpreter may be one)"),
    _toolchain("Node version managers", ("~/.nvm", "~/.volta"), "Node versions and their global packages"),
    _toolchain("Bun, Deno", ("~/.bun/bin", "~/.deno/bin"), "runtimes (not ~/.bunfig.toml, which may hold tokens)"),
    _toolchain("Go", ("~/go/bin", "~/go/pkg/mod"), "installed commands and the module cache (read-only: a poisoned module would build into your next binary)"),
    _toolchain("SDKMAN, asdf", ("~/.sdkman/candidates", "~/.asdf", "~/.tool-versions"), "JVM and other runtimes and their versions"),
    _toolchain("Nix profile", ("~/.nix-profile",), "the user's Nix profile (links into /nix)"),
    _toolchain("Maven, Gradle caches", ("~/.m2/repository", "~/.gradle/caches", "~/.gradle/wrapper"), "downloaded artefacts; not settings.xml or gradle.properties"),
    _toolchain(
        "git's settings", ("~/.gitconfig", "~/.config/git/config", "~/.config/git/ignore", "~/.config/git/attributes"),
        "your name and email for commits, and git's behaviour; the credentials it may name are not granted",
    ),
    Grant(
        "every conclave state directory", ("{state_dirs}",), Access.DENIED, BOTH,
        "the state root (~/.local/state/conclave, $XDG_STATE_HOME/conclave) and every --state-dir a broker of this "
        "user registered there: databases, operator keys, chain keys; only its own agent directory comes back",
    ),
    Grant("home secrets", ("{home_secrets}",), Access.DENIED, BOTH, "the credentials listed below; carved out of any grant that holds one"),
)  # fmt: skip


@final
@attrs.frozen
class Context:
    """What the templates of one spawn expand to."""

    home: str | None
    uid: int
    values: Mapping[str, tuple[str, ...]] = attrs.Factory(dict)


@final
@attrs.frozen
class Plan:
    """One box's paths, by what it may do with them (absolute, de-duplicated, in table order)."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    read_only: tuple[str, ...]
    private: tuple[str, ...]
    devices: tuple[str, ...]
    connect: tuple[str, ...]
    denied: tuple[str, ...]


def expand(template: str, context: Context) -> list[str]:
    """The absolute paths one template names for ``context`` (none when it needs a home there is not).

    A template that is one ``{name}`` is a list the context holds for this spawn
    (``{home_secrets}``: :data:`HOME_SECRETS`); ``~`` is ``$HOME`` and ``{uid}`` the user.
    """
    if template.startswith("{") and template.endswith("}"):
        if template == "{home_secrets}":
            return [p for s in HOME_SECRETS for p in expand(s.path, context)]
        return list(context.values.get(template[1:-1], ()))
    if template == "~" or template.startswith("~/"):
        if not context.home or context.home == "/":
            return []
        template = context.home.rstrip("/") + template[1:]
    return [template.replace("{uid}", str(context.uid))]


def plan(level: str, context: Context) -> Plan:
    """Every path of :data:`GRANTS` for ``level``, sorted by access."""
    found: dict[Access, dict[str, None]] = {access: {} for access in Access}
    for grant in GRANTS:
        if level in grant.levels:
            for template in grant.paths:
                for path in expand(template, context):
                    found[grant.access][path] = None
    read_only = tuple(found[Access.READ_ONLY])
    return Plan(
        read=(*found[Access.READ], *read_only),
        write=tuple(found[Access.WRITE]),
        read_only=read_only,
        private=tuple(found[Access.PRIVATE]),
        devices=tuple(found[Access.DEVICE]),
        connect=tuple(found[Access.CONNECT]),
        denied=tuple(found[Access.DENIED]),
    )


def toolchains(home: str) -> list[str]:
    """Every toolchain path under ``home`` the table grants (whether it exists or not)."""
    context = Context(home=home, uid=os.getuid())
    return [p for g in GRANTS if g.home for t in g.paths for p in expand(t, context)]


def run_from_home(path: str, home: str) -> str | None:
    """The entry of ``home`` your own processes run or trust (:data:`HOME_RUN`) that ``path`` is, lies
    inside or holds -- or where a link there leads (a dot entry, a toolchain row); None when there is none."""
    real, real_home = os.path.realpath(path), os.path.realpath(home)
    context = Context(home=home, uid=os.getuid())
    rows = [*toolchains(home), *(p for t in HOME_RUN for p in expand(t, context))]
    named = {os.path.relpath(p, home).split(os.sep)[0] for p in rows}
    if real != real_home and inside(real, real_home):
        first = os.path.relpath(real, real_home).split(os.sep)[0]
        if first.startswith(".") or first in named:
            return os.path.join(home, first)
    try:
        dotted = [e.path for e in os.scandir(home) if e.name.startswith(".")]
    except OSError:
        dotted = []
    for entry in (*dotted, *rows):
        target = os.path.realpath(entry)
        if os.path.lexists(entry) and (inside(real, target) or inside(target, real)):
            return entry
    return None


def secrets(home: str) -> list[str]:
    """Every path of :data:`HOME_SECRETS` under ``home``."""
    return expand("{home_secrets}", Context(home=home, uid=os.getuid()))


def inside(path: str, base: str) -> bool:
    """Is ``path`` ``base`` or beneath it (lexically; callers pass real paths)?"""
    return path == base or path.startswith(base.rstrip("/") + "/")


_ACCESS_WORDS: Final = {
    Access.READ: "read",
    Access.WRITE: "read, write",
    Access.READ_ONLY: "read; read-only inside a write grant",
    Access.PRIVATE: "an empty tmpfs of its own",
    Access.DEVICE: "open as a device",
    Access.CONNECT: "connect",
    Access.DENIED: "never",
}


#: Where docs/THREAT_MODEL.md holds the rendered table.
DOC_MARKERS: Final = ("<!-- grants table: broker.sandbox.grants.render_markdown() -->", "<!-- end of grants table -->")


def render_markdown(grants: Iterable[Grant] = GRANTS, home_secrets: Iterable[Secret] = HOME_SECRETS) -> str:
    """The table docs/THREAT_MODEL.md shows: every grant by level, then the home secrets no grant holds."""
    lines = ["| what | paths | strict | landlock | why it is safe there |", "| --- | --- | --- | --- | --- |"]
    for grant in grants:
        cells = [_ACCESS_WORDS[grant.access] if level in grant.levels else "—" for level in ("strict", "landlock")]
        paths = ", ".join(f"`{p.replace('{uid}', '<uid>')}`" for p in grant.paths)
        lines.append(f"| {grant.what} | {paths} | {cells[0]} | {cells[1]} | {grant.why} |")
    lines += ["", "| home secret (never in a box) | what it holds |", "| --- | --- |"]
    lines += [f"| `{s.path}` | {s.holds} |" for s in home_secrets]
    return "\n".join(lines) + "\n"
