"""The wire server: one actor per connection on the broker's Unix socket.

A connection first says ``hello`` (with its ticket, or without one to claim
to be the operator); the registry decides who it is from the ticket and the
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
from broker.router import Call, dispatch

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
    ticket: str | None = None
    client: str | None = None


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
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def next_line(self, *, first_byte_timeout: float | None) -> bytes | None:
        """The next complete line, or None at end of stream.

        Raises:
            ConclaveError: ``line_too_long`` or ``timeout`` (half a line, then silence).
        """
        deadline = trio.current_time() + first_byte_timeout if first_byte_timeout else float("inf")
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) >= wire.MAX_LINE_BYTES:
                raise ConclaveError(ErrorCode.LINE_TOO_LONG, f"a request line may be at most {wire.MAX_LINE_BYTES} bytes")
            if self._buffer:
                deadline = min(deadline, trio.current_time() + PARTIAL_LINE_TIMEOUT)
            if deadline == float("inf"):
                # The common case (an idle connection between requests) needs no cancel scope.
                chunk = await self._stream.receive_some(READ_CHUNK)
            else:
                with trio.move_on_at(deadline) as scope:
                    chunk = await self._stream.receive_some(READ_CHUNK)
                if scope.cancelled_caught:
                    raise ConclaveError(ErrorCode.TIMEOUT, "the connection sent half a request line and went quiet; closing it")
            if not chunk:
                return None
            self._buffer += chunk


class Connection:
    """The actor for one accepted connection."""

    def __init__(self, core: BrokerCore, stream: trio.SocketStream) -> None:
        self.core = core
        self.stream = stream
        self.id = core.next_connection_id()
        self.reader = _LineReader(stream)
        self.peer: PeerCredentials = peer_credentials(stream.socket)  # type: ignore[arg-type]

    async def send(self, payload: bytes) -> None:
        await self.stream.send_all(payload)

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
            principal = self.core.registry.authenticate(hello.ticket, self.peer)
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
    }
