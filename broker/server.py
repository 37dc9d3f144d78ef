"""The wire server: one actor per connection on the broker's Unix socket.

A connection first says ``hello`` (with its ticket, or with the operator key
to be the operator); the registry decides who it is from that proof and the
kernel's peer credentials.  From then on every request is stamped with that
principal.  One bad request gets an error reply and the connection goes on;
only a line that breaks framing (too long, or left half-sent) closes it.
Nothing a client does can crash the broker -- nor use up its descriptors:
:class:`ConnectionQuota` caps the connections each agent's process tree and
each other process may hold open (counted from accept, before ``hello``),
and keeps a reserve no agent can reach, so a flood from one agent leaves
the operator and the other agents room to connect.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

import attrs
import trio

from broker import wire
from broker.errors import ConclaveError, ErrorCode
from broker.identity import PeerCredentials, Principal, peer_credentials
from broker.core import Call
from broker.router import dispatch

if TYPE_CHECKING:
    from broker.core import BrokerCore

log = logging.getLogger("conclave.server")

#: How long a connection may take to say hello.
HELLO_TIMEOUT: Final = 10.0
#: How long a line may stay half-sent before the connection is closed
#: (``CONCLAVE_PARTIAL_LINE_TIMEOUT`` in the broker's environment overrides it).
PARTIAL_LINE_TIMEOUT: Final = float(os.environ.get("CONCLAVE_PARTIAL_LINE_TIMEOUT", "30"))
READ_CHUNK: Final = 65536
#: Connections one live agent (its whole process tree) may hold open at once.
MAX_CONNECTIONS_PER_AGENT: Final = 128
#: Connections one process in no live agent's tree (the operator's commands, a leftover) may hold at once.
MAX_CONNECTIONS_PER_PROCESS: Final = 32
#: Descriptors kept for the broker's own work (the store, logs, spawns), whatever its clients do.
RESERVED_DESCRIPTORS: Final = 256
#: Connection slots agents together can never take: the operator's, and other processes'.
OUTSIDE_AGENTS: Final = 64


@attrs.frozen
class Hello:
    """The first request: an agent's ticket, or the operator key (never both, never neither)."""

    ticket: str | None = None
    operator_key: str | None = None
    client: str | None = None
    #: The token the operator's client said on the broker's abstract socket (broker.operator_probe).
    probe: str | None = None


async def bind(path: Path) -> trio.SocketListener:
    """Bind the socket with mode 0600, replacing a stale socket file."""
    if path.exists() or path.is_symlink():
        path.unlink()
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(256)
    return trio.SocketListener(sock)


@final
class ConnectionQuota:
    """How many connections each source holds, and whether one more may be accepted.

    A source is the live agent whose process tree the peer is in (decided from the
    kernel's peer pid and ``/proc`` ancestry, like authentication), or else the peer
    process itself.  Each connection costs the broker two descriptors (the socket and
    the peer's pidfd); the total is held below the descriptor limit less a reserve.
    """

    def __init__(self, descriptors: int | None = None) -> None:
        limit = descriptors if descriptors is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.capacity = max(OUTSIDE_AGENTS + MAX_CONNECTIONS_PER_AGENT, (limit - RESERVED_DESCRIPTORS) // 2)
        self.held: Counter[str] = Counter()
        self.by_agents = 0
        self.refused = 0

    @property
    def total(self) -> int:
        return sum(self.held.values())

    def admit(self, source: str, *, agent: bool) -> str | None:
        """Count one more connection for ``source``; None, or why it is refused (a sentence)."""
        if agent and self.held[source] >= MAX_CONNECTIONS_PER_AGENT:
            why = (
                f"agent {source.removeprefix('agent ')} already holds {MAX_CONNECTIONS_PER_AGENT} connections to the broker "
                "(the most one agent may); close some before opening more"
            )
        elif agent and self.by_agents >= self.capacity - OUTSIDE_AGENTS:
            why = f"agents hold {self.by_agents} connections, all the broker gives them; close some before opening more"
        elif not agent and self.held[source] >= MAX_CONNECTIONS_PER_PROCESS:
            why = f"{source} already holds {MAX_CONNECTIONS_PER_PROCESS} connections to the broker (the most one process may)"
        elif self.total >= self.capacity:
            why = f"the broker holds {self.total} connections, all its descriptors allow; try again when some have closed"
        else:
            self.held[source] += 1
            self.by_agents += agent
            return None
        self.refused += 1
        return why

    def release(self, source: str, *, agent: bool) -> None:
        self.held[source] -= 1
        if self.held[source] <= 0:
            del self.held[source]
        self.by_agents -= agent


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (at most 65536): the broker holds
    a connection per client.  Returns the limits as they were (children get the old soft one back)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY and hard < 65536 else 65536
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError):
            pass
    return soft, hard


async def serve(core: BrokerCore, listener: trio.SocketListener, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    quota = ConnectionQuota()
    core.extensions["connection_quota"] = quota

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await Connection(core, stream, quota).run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # a bug in one connection must not end the broker
            log.exception("connection failed")
        finally:
            await stream.aclose()

    await trio.serve_listeners(handle, [listener], task_status=task_status)


class _LineReader:
    """Lines from a connection, read straight from the socket's descriptor.

    trio's stream would add two trips through the scheduler to every request;
    here a read that would block waits for readability (a real checkpoint),
    and a line that was already there still yields once, so a client that
    pipelines requests cannot starve the others.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._fd = stream.socket.fileno()
        self._buffer = bytearray()

    async def next_line(self, *, first_byte_timeout: float | None) -> bytes | None:
        """The next complete line, or None at end of stream.

        Raises:
            ConclaveError: ``line_too_long`` or ``timeout`` (half a line, then silence).
            trio.BrokenResourceError: the client reset the connection.
        """
        deadline = trio.current_time() + first_byte_timeout if first_byte_timeout else float("inf")
        waited = False
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if not waited:
                    await trio.lowlevel.checkpoint()
                return line
            if len(self._buffer) >= wire.MAX_LINE_BYTES:
                raise ConclaveError(ErrorCode.LINE_TOO_LONG, f"a request line may be at most {wire.MAX_LINE_BYTES} bytes")
            try:
                chunk = os.read(self._fd, READ_CHUNK)
            except BlockingIOError:
                await self._readable(deadline)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"the client's connection failed: {exc}") from None
            if not chunk:
                return None
            self._buffer += chunk

    async def _readable(self, deadline: float) -> None:
        if self._buffer:
            deadline = min(deadline, trio.current_time() + PARTIAL_LINE_TIMEOUT)
        if deadline == float("inf"):
            # The common case (an idle connection between requests) needs no cancel scope.
            await trio.lowlevel.wait_readable(self._fd)
            return
        with trio.move_on_at(deadline) as scope:
            await trio.lowlevel.wait_readable(self._fd)
        if scope.cancelled_caught:
            raise ConclaveError(ErrorCode.TIMEOUT, "the connection sent half a request line and went quiet; closing it")


class Connection:
    """The actor for one accepted connection."""

    def __init__(self, core: BrokerCore, stream: trio.SocketStream, quota: ConnectionQuota | None = None) -> None:
        self.core = core
        self.stream = stream
        self._fd = stream.socket.fileno()
        self.id = core.next_connection_id()
        self.reader = _LineReader(stream)
        self.peer: PeerCredentials = peer_credentials(stream.socket)  # type: ignore[arg-type]
        self.quota = quota

    async def send(self, payload: bytes) -> None:
        """Send a reply: straight to the socket when it has room (nearly always), else through trio."""
        try:
            sent = os.write(self._fd, payload)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"the client's connection failed: {exc}") from None
        if sent < len(payload):
            await self.stream.send_all(memoryview(payload)[sent:])

    async def peer_gone(self) -> None:
        """Return once the client has closed its end (for handlers that block).

        Called only while a request is being handled, when nothing else reads
        the socket.  It peeks, so a pipelined next request stays unread; a
        client that pipelines is alive, and then this never returns.
        """
        sock = self.stream.socket
        await trio.lowlevel.wait_readable(sock)
        try:
            if await sock.recv(1, socket.MSG_PEEK):
                await trio.sleep_forever()
        except OSError:
            pass

    async def run(self) -> None:
        source, agent = self._source()
        try:
            refused = self.quota.admit(source, agent=agent) if self.quota is not None else None
            if refused is not None:
                await self.send(wire.fail(None, ConclaveError(ErrorCode.QUOTA, refused)))
                return
            try:
                await self._run()
            finally:
                if self.quota is not None:
                    self.quota.release(source, agent=agent)
        finally:
            self.peer.close()

    def _source(self) -> tuple[str, bool]:
        """Whose connection this is counted as: the live agent whose tree the peer is in, else the peer."""
        owner = self.core.registry.agent_owning(self.peer.pid) if self.quota is not None else None
        if owner is not None:
            return f"agent {owner.principal.key}", True
        return f"process {self.peer.pid}", False

    async def _run(self) -> None:
        principal = await self._authenticate()
        if principal is None:
            return
        scope = trio.CancelScope()
        self.core.registry.attach(principal, scope)
        try:
            with scope:
                await self._serve(principal)
        finally:
            self.core.registry.detach(principal, scope)
            with trio.CancelScope(shield=True):
                await self.core.connection_closed(self.id, principal)

    async def _authenticate(self) -> Principal | None:
        try:
            line = await self.reader.next_line(first_byte_timeout=HELLO_TIMEOUT)
        except ConclaveError as exc:
            await self.send(wire.fail(None, exc))
            return None
        if line is None:
            return None
        rid = wire.request_id_of(line)
        try:
            request = wire.decode_line(line)
            if request.op != "hello":
                raise ConclaveError(ErrorCode.NOT_AUTHENTICATED, 'the first request on a connection must be {"op": "hello"}')
            hello = wire.structure_args("hello", request.args, Hello)
            if hello.ticket is not None:
                pending = self.core.registry.pending(hello.ticket)
                if pending is not None and not pending.ready.is_set():
                    with trio.move_on_after(HELLO_TIMEOUT):
                        await pending.ready.wait()
            seen = None
            if hello.operator_key is not None and self.core.operator_probe is not None:
                seen = await self.core.operator_probe.claim(hello.probe)
            principal = self.core.registry.authenticate(self.peer, ticket=hello.ticket, operator_key=hello.operator_key, probe=seen)
        except ConclaveError as exc:
            await self.send(wire.fail(rid, exc))
            return None
        await self.send(wire.ok(rid, whoami(principal)))
        return principal

    async def _serve(self, principal: Principal) -> None:
        call = Call(principal=principal, core=self.core, connection=self.id, peer_gone=self.peer_gone)
        while True:
            try:
                line = await self.reader.next_line(first_byte_timeout=None)
            except ConclaveError as exc:
                await self.send(wire.fail(None, exc))
                return
            if line is None:
                return
            if not line.strip():
                continue
            rid: int | str | None = None
            activity = self.core.activity
            activity.begin(principal.domain, trio.current_time())  # an agent waiting on the broker is not idle
            try:
                request = wire.decode_line(line)
                rid = request.id
                result = await dispatch(self.core, call, request.op, request.args)
                reply = wire.ok(rid, result)
            except ConclaveError as exc:
                reply = wire.fail(rid if rid is not None else wire.request_id_of(line), exc)
            except Exception as exc:
                log.exception("op failed")
                reply = wire.fail(rid, ConclaveError(ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"))
            finally:
                activity.end(principal.domain, trio.current_time())
            await self.send(reply)


def whoami(principal: Principal) -> dict[str, object]:
    return {
        "agent": principal.agent,
        "session": principal.session,
        "parent": principal.parent,
        "role": principal.role.value,
        "domain": principal.domain,
        # Only in a store several brokers share: the issuing broker's host (the key is HOST/agent:session).
        **({"host": principal.host, "key": principal.key} if principal.host is not None else {}),
    }
