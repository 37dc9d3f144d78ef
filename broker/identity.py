"""Who is on the other end of a connection, decided by the kernel, not the caller.

A :class:`Principal` is ``agent:session``.  The broker mints both halves when
it spawns a process; nothing an agent sends can name or change them.  A
connection proves it speaks for a principal with a :class:`Ticket` (random,
only its hash kept) *and* with its peer credentials: the peer's uid must be
the broker's and its pid must be the agent's process or a descendant of it.
A ticket copied out of ``/proc/<pid>/environ`` by a sibling is therefore
useless to the sibling.

The operator is the person at the terminal, and must prove it: with the
operator key (``operator.key`` in the state directory, which no boxed agent
can read), from a process of the broker's uid that is not in a live agent's
tree and does not descend from the broker (the broker is a child subreaper,
so what agents leave behind is re-parented to it).  The key is the proof;
the lineage check stands behind it.  It refuses an agent's *own*
processes, and is no defence against an unboxed one (``sandbox = "off"``),
which can act through the person's processes instead (docs/THREAT_MODEL.md).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import os
import secrets
import signal
import socket
import struct
from typing import Final, final

import attrs

#: Bits of randomness in a ticket.  DESIGN.md asks for at least 128.
TICKET_BYTES: Final = 32
OPERATOR_NAME: Final = "operator"
#: Names no agent may take: they mean something else in recipients and output.
RESERVED_NAMES: Final = frozenset({OPERATOR_NAME, "all", "broker", "system"})


class Role(str, enum.Enum):
    AGENT = "agent"
    OPERATOR = "operator"


@final
@attrs.frozen
class Principal:
    """An acting identity: ``agent:session``, issued by the broker.

    ``domain`` is the trust domain: the team agent this principal descends
    from.  An agent, its restarts and everything it spawned share a domain,
    and corroborations count once per domain (see ``memory.policy``).

    ``host`` names the broker that issued it when several brokers share one
    PostgreSQL store (``HOST/agent:session``); on one machine it is None and
    the key is ``agent:session`` as always.  The domain does not include the
    host: the same agent name on two hosts is one trust domain (the same
    role, prompt and model), so a namesake cannot vouch for its twin.
    """

    agent: str
    session: str
    role: Role
    domain: str
    parent: str | None = None
    host: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.agent or not self.session:
            raise ValueError("a principal needs both an agent name and a session id; there is no default")
        if self.host is not None and (not self.host or "/" in self.host or ":" in self.host):
            raise ValueError(f"a host name may not be empty or hold '/' or ':' (got {self.host!r})")

    @functools.cached_property
    def key(self) -> str:
        local = f"{self.agent}:{self.session}"
        return local if self.host is None else f"{self.host}/{local}"

    @property
    def is_operator(self) -> bool:
        return self.role is Role.OPERATOR

    def __str__(self) -> str:
        return self.key


def parse_principal_key(text: str) -> tuple[str, str]:
    """Split ``agent:session``.  Raises ValueError naming the expected shape."""
    agent, sep, session = text.rpartition(":")
    if not sep or not agent or not session:
        raise ValueError(f"{text!r} is not AGENT:SESSION (for example alice:7f3a9c01d2e4)")
    return agent, session


@final
@attrs.frozen
class Ticket:
    """The secret handed to a spawned process.  The broker keeps only ``digest``."""

    secret: str = attrs.field(repr=False)

    @classmethod
    def mint(cls) -> Ticket:
        return cls(secrets.token_urlsafe(TICKET_BYTES))

    @property
    def digest(self) -> str:
        return ticket_digest(self.secret)


def ticket_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def digests_match(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def new_session_id() -> str:
    return secrets.token_hex(6)


#: Linux 6.5+: a pidfd for the process that connected (not in Python 3.11's socket module).
SO_PEERPIDFD: Final = getattr(socket, "SO_PEERPIDFD", 77)


@final
@attrs.frozen
class PeerCredentials:
    """Who connected, as the kernel saw it at connect time.

    ``pidfd`` (where the kernel offers one) pins that very process, and
    ``started`` (its start time in clock ticks) is the fallback: together they
    let :meth:`still_there` tell the process that connected from a later one
    that reused its pid.
    """

    pid: int
    uid: int
    gid: int
    pidfd: int | None = None
    started: int | None = None

    def still_there(self) -> bool:
        """Is the process that connected still alive (and not replaced by a pid reuse)?"""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, 0)
            except ProcessLookupError:
                return False
            except OSError:
                pass  # no pidfd support after all: fall back to the start time
            else:
                return True
        return self.started is not None and process_start_time(self.pid) == self.started

    def close(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """Read the connecting process's pid/uid/gid from the kernel (SO_PEERCRED), and pin it."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    try:
        pidfd: int | None = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        pidfd = None
    return PeerCredentials(pid=pid, uid=uid, gid=gid, pidfd=pidfd, started=process_start_time(pid))


@functools.lru_cache(maxsize=1)
def pidfs_names_processes() -> bool:
    """Does a pidfd's inode name its process (pidfs, Linux 6.9+)?  Before, every pidfd shared one
    anonymous inode, and two could not be told apart."""
    try:
        mine, parent = os.pidfd_open(os.getpid()), os.pidfd_open(os.getppid() or 1)
    except (OSError, AttributeError):
        return False
    try:
        return os.fstat(mine).st_ino != os.fstat(parent).st_ino
    finally:
        os.close(mine)
        os.close(parent)


def pidfs_identity(pid: int) -> str | None:
    """A name for process ``pid`` that holds across PID namespaces: ``"dev:ino"`` of a pidfd for it.
    An agent in a PID namespace of its own sees the broker's pid as 0; the broker hands it this
    name instead, and it compares the server's ``SO_PEERPIDFD``.  None where pidfds name nothing."""
    if not pidfs_names_processes():
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return f"{st.st_dev}:{st.st_ino}"
    finally:
        os.close(fd)


def process_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time since boot), or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/<pid>/stat``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may itself contain ") ".
    rest = stat[stat.rindex(b")") + 2 :].split()
    return int(rest[1])


def ancestry(pid: int) -> list[int]:
    """``pid`` and its ancestors, nearest first, as far as ``/proc`` shows them."""
    return lineage(pid) or [pid]


def lineage(pid: int) -> list[int] | None:
    """``pid`` and every ancestor up to the root, nearest first.

    None when the chain cannot be read all the way (the process, or an
    ancestor, exited meanwhile): a caller deciding who may act must then
    refuse, never guess -- a gone process would otherwise look like one in
    no agent's tree.
    """
    chain = [pid]
    seen = {pid}
    current = pid
    while current > 1:
        parent = parent_pid(current)
        if parent is None:
            return None
        if parent == 0 or parent in seen:
            break
        chain.append(parent)
        seen.add(parent)
        current = parent
    return chain


def user_namespace(pid: int) -> str | None:
    """The user namespace ``pid`` runs in (``user:[4026531837]``), or None when it cannot be read.

    A strict conclave box runs in a user namespace of its own, so a peer whose
    namespace is not the broker's is inside some box (or some other container):
    the kernel decides this, not anything the process says.
    """
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return None


def no_new_privs(pid: int) -> bool | None:
    """``NoNewPrivs`` of ``pid`` (every Landlock box sets it, for good), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NoNewPrivs:"):
                    return line.split()[1] == b"1"
    except OSError:
        return None
    return None


def make_child_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to this process.

    Without it an agent could double-fork a daemon that outlives the agent,
    is adopted by init, and then connects without a ticket claiming to be the
    operator.  Returns False where prctl is unavailable.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def current_uid() -> int:
    return os.getuid()
