"""Clients for the broker's wire protocol: blocking (for the CLI) and trio.

An agent's client reads the socket path and ticket that the broker put in its
environment (``CONCLAVE_SOCKET``, ``CONCLAVE_TICKET``) and refuses to exist
without them: there is no default identity, ever.  The operator's client is a
separate, explicit constructor that presents the operator key (the file
``operator.key`` in the state directory, which no sandboxed agent can read);
the broker also judges the process's lineage from the kernel's view of it,
and asks it to prove it is in no box: before ``hello`` the operator's client
says a fresh token on the broker's abstract socket (:func:`say_probe_token`),
which no process inside a conclave box can reach.

The blocking client imports only the standard library, so ``conclave
whoami`` inside an agent stays fast.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import itertools
import json
import os
import secrets
import socket
import struct
from pathlib import Path
from typing import Any, Final, final

from broker.errors import ConclaveError, ErrorCode

ENV_SOCKET: Final = "CONCLAVE_SOCKET"
ENV_TICKET: Final = "CONCLAVE_TICKET"
#: The broker's process, named so an agent in a PID namespace can check it (broker.identity.pidfs_identity).
ENV_BROKER_PROCESS: Final = "CONCLAVE_BROKER_PROCESS"
#: Linux 6.5+ (not in Python 3.11's socket module; broker.identity has the same).
SO_PEERPIDFD: Final = getattr(socket, "SO_PEERPIDFD", 77)
MAX_LINE: Final = 1 << 20


class NoIdentityError(RuntimeError):
    """Raised when code tries to act as an agent without a broker-issued ticket."""


class BrokerUnavailable(ConnectionError):
    """No broker answers on the socket."""


def agent_credentials(environ: dict[str, str] | None = None) -> tuple[Path, str]:
    """The socket and ticket the broker gave this process.

    Raises:
        NoIdentityError: when either is missing -- the process was not
            started by a conclave broker, so it has no identity to act with.
    """
    env = os.environ if environ is None else environ
    sock, ticket = env.get(ENV_SOCKET), env.get(ENV_TICKET)
    if not sock or not ticket:
        raise NoIdentityError(
            f"no agent identity: {ENV_SOCKET} and {ENV_TICKET} are set only for processes a conclave broker "
            "spawned (conclave run); there is no default identity"
        )
    return Path(sock), ticket


def check_is_my_broker(sock: socket.socket, socket_path: Path) -> None:
    """Refuse to talk to a socket that is not served by one of this process's ancestors.

    Every agent process descends from the broker that spawned it (children are
    the broker's children too, and orphans are re-parented to it), so a server
    that is not an ancestor is an impostor -- someone who replaced the socket
    file -- and gets neither the ticket nor the agent's requests.

    Raises:
        ConclaveError: ``auth_failed`` naming the serving pid.
    """
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    server_pid = struct.unpack("3i", raw)[0]
    if server_pid == 0 and _is_the_broker_outside(sock):
        return  # an agent in a PID namespace of its own: the broker is outside it, checked by pidfd
    if server_pid == 0 or server_pid not in _ancestors(os.getpid()):
        raise ConclaveError(
            ErrorCode.AUTH_FAILED,
            f"{socket_path} is served by pid {server_pid}, which is not the broker that started this agent; not connecting",
        )


def _is_the_broker_outside(sock: socket.socket) -> bool:
    """(Inside a PID namespace the broker's pid reads 0.)  Is the server the very process the broker
    named in the environment at spawn?  Compared by the pidfd the kernel gives for the peer."""
    expected = os.environ.get(ENV_BROKER_PROCESS)
    if not expected:
        return False
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        return False
    try:
        st = os.fstat(pidfd)
    finally:
        os.close(pidfd)
    return f"{st.st_dev}:{st.st_ino}" == expected


def _ancestors(pid: int) -> set[int]:
    """The strict ancestors of ``pid`` (standard library only: this module must stay cheap)."""
    found: set[int] = set()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            break
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        if pid in found or pid == 0:
            break
        found.add(pid)
    return found


def _nobody_there(exc: OSError) -> bool:
    """No socket, nobody accepting, or a path too long for any broker to have bound (it would have used a short one)."""
    return isinstance(exc, (FileNotFoundError, ConnectionRefusedError)) or exc.errno is None or exc.errno == errno.ENAMETOOLONG


def probe_address(operator_key: str) -> str:
    """The abstract socket a broker listens on for its operator's probe: named from the key
    (only a key holder can name it, and a name already taken means the key has leaked)."""
    digest = hmac.new(operator_key.encode(), b"conclave operator probe", hashlib.sha256).hexdigest()[:32]
    return f"\0conclave-operator-{digest}"


def say_probe_token(operator_key: str) -> str | None:
    """Say a fresh token on the broker's abstract socket; the token, or None when this process
    cannot reach it -- inside a conclave box Landlock refuses the connection (its scope on
    abstract sockets), so the broker will refuse the key, saying why."""
    token = secrets.token_hex(16)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(probe_address(operator_key))
            probe.sendall(token.encode() + b"\n")
        except OSError:
            return None
    return token


def hello_args(ticket: str | None, operator_key: str | None) -> dict[str, str]:
    """What a client says in ``hello``: exactly one proof -- an agent's ticket or the operator key.

    Raises:
        NoIdentityError: neither or both, or an empty one.
    """
    if (ticket is None) == (operator_key is None):
        raise NoIdentityError(
            "a client needs exactly one proof of identity: an agent's ticket (BlockingClient.for_agent) "
            "or the operator key (BlockingClient.for_operator)"
        )
    if ticket is not None:
        if not ticket:
            raise NoIdentityError("an empty ticket is not an identity")
        return {"ticket": ticket}
    if not operator_key:
        raise NoIdentityError("an empty operator key is not a proof")
    token = say_probe_token(operator_key)
    return {"operator_key": operator_key, **({"probe": token} if token else {})}


def _check_reply(reply: dict[str, Any]) -> Any:
    if reply.get("ok"):
        return reply.get("result")
    error = reply.get("error") or {}
    try:
        code = ErrorCode(error.get("code"))
    except ValueError:
        code = ErrorCode.INTERNAL
    raise ConclaveError(code, error.get("message") or "the broker refused the request")


@final
class BlockingClient:
    """One authenticated connection, used synchronously.

    Build it with :meth:`for_agent` (ticket required) or :meth:`for_operator`
    (operator key required).
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        ticket: str | None = None,
        operator_key: str | None = None,
        timeout: float | None = None,
        verify_broker: bool = False,
    ) -> None:
        args = hello_args(ticket, operator_key)
        self._ids = itertools.count(1)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(socket_path))
        except OSError as exc:
            self._sock.close()
            if _nobody_there(exc):
                raise BrokerUnavailable(f"no broker is listening on {socket_path}") from exc
            raise
        if verify_broker:
            try:
                check_is_my_broker(self._sock, Path(socket_path))
            except ConclaveError:
                self._sock.close()
                raise
        self._file = self._sock.makefile("rb")
        self.identity: dict[str, Any] = self._roundtrip("hello", args)

    @classmethod
    def for_agent(cls, environ: dict[str, str] | None = None, *, timeout: float | None = None) -> BlockingClient:
        socket_path, ticket = agent_credentials(environ)
        return cls(socket_path, ticket=ticket, timeout=timeout, verify_broker=True)

    @classmethod
    def for_operator(cls, socket_path: Path, *, operator_key: str, timeout: float | None = None) -> BlockingClient:
        """The operator's connection: ``operator_key`` is ``StatePaths.operator_key()``."""
        return cls(socket_path, operator_key=operator_key, timeout=timeout)

    def call(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """Send one request and return its result.

        Raises:
            ConclaveError: the broker's refusal, with its code.
        """
        return self._roundtrip(op, args or {})

    def send_raw(self, payload: bytes) -> dict[str, Any]:
        """Send bytes as they are and read one reply (for tests and scenarios)."""
        self._sock.sendall(payload)
        return self._read()

    def _roundtrip(self, op: str, args: dict[str, Any]) -> Any:
        rid = next(self._ids)
        line = json.dumps({"id": rid, "op": op, "args": args}, separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_LINE:
            # The broker would refuse it and hang up; say so here, the same way everywhere.
            raise ConclaveError(
                ErrorCode.TOO_LARGE,
                f"{op}: the request is {len(line):,} bytes; a request may be at most {MAX_LINE:,} (1 MiB) -- send less at once",
            )
        try:
            self._sock.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and hung up before we spoke (over a connection cap): its reply says why
        return _check_reply(self._read())

    def _read(self) -> dict[str, Any]:
        # Requests are capped at 1 MiB; a reply (a long listing) may be longer.
        line = self._file.readline()
        if not line:
            raise ConclaveError(ErrorCode.UNAVAILABLE, "the broker closed the connection")
        return json.loads(line)

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@final
class TrioClient:
    """The same protocol for trio code (scripted agents, the scenario runner, benchmarks).

    Use ``async with await TrioClient.connect_agent() as client``.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._ids = itertools.count(1)
        self._buffer = bytearray()
        self.identity: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls, socket_path: Path, *, ticket: str | None = None, operator_key: str | None = None, verify_broker: bool = False
    ) -> TrioClient:
        import trio

        args = hello_args(ticket, operator_key)
        try:
            stream = await trio.open_unix_socket(str(socket_path))
        except OSError as exc:
            if _nobody_there(exc):
                raise BrokerUnavailable(f"no broker is listening on {socket_path}") from exc
            raise
        if verify_broker:
            try:
                check_is_my_broker(stream.socket, Path(socket_path))  # type: ignore[arg-type]
            except ConclaveError:
                await stream.aclose()
                raise
        client = cls(stream)
        client.identity = await client.call("hello", args)
        return client

    @classmethod
    async def connect_agent(cls, environ: dict[str, str] | None = None) -> TrioClient:
        socket_path, ticket = agent_credentials(environ)
        return await cls.connect(socket_path, ticket=ticket, verify_broker=True)

    async def call(self, op: str, args: dict[str, Any] | None = None) -> Any:
        import trio

        rid = next(self._ids)
        try:
            await self._stream.send_all(json.dumps({"id": rid, "op": op, "args": args or {}}, separators=(",", ":")).encode() + b"\n")
        except trio.BrokenResourceError:
            pass  # refused and hung up before we spoke (over a connection cap): its reply says why
        return _check_reply(await self._read())

    async def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                raise ConclaveError(ErrorCode.UNAVAILABLE, "the broker closed the connection")
            self._buffer += chunk
        end = self._buffer.index(b"\n")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return json.loads(line)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> TrioClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
