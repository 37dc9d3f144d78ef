"""The wire server: one actor per connection on the broker's Unix socket.

A connection first says ``hello`` (with its ticket, or with the operator key
to be the operator); the registry decides who it is from that proof and the
kernel's peer credentials.  From then on every request is stamped with that
principal.  One bad request gets an error reply and the connection goes on;
only a line that breaks framing (too long, or left half-sent) closes it.
Nothing a client does can crash the broker.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Final

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


async def serve(core: BrokerCore, listener: trio.SocketListener, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    async def handle(stream: trio.SocketStream) -> None:
        try:
            await Connection(core, stream).run()
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

    def __init__(self, core: BrokerCore, stream: trio.SocketStream) -> None:
        self.core = core
        self.stream = stream
        self._fd = stream.socket.fileno()
        self.id = core.next_connection_id()
        self.reader = _LineReader(stream)
        self.peer: PeerCredentials = peer_credentials(stream.socket)  # type: ignore[arg-type]

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
        try:
            await self._run()
        finally:
            self.peer.close()

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
