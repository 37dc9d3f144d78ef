"""The operator's second wall: a socket no conclave box can reach.

The operator key is the proof, and a box cannot read it -- but a key can
leak (copied out by an unboxed agent, read by another project's box in an
older conclave).  So the broker also asks the kernel whether the process
presenting it is inside a box, of any broker:

* every box is a Landlock domain scoped on abstract Unix sockets (ABI 6+,
  ``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``): a process in it cannot connect
  to an abstract socket made outside its domain (``EPERM``).  The broker
  listens on one (:func:`broker.client.probe_address`, named from the key);
  the operator's client says a fresh token there before ``hello`` and names
  the token in it; the broker accepts the key only when the process that
  said the token (``SO_PEERCRED``, start time) is the very process saying
  ``hello``.  A helper outside the box saying it for the boxed process is
  another pid, and refused;
* the rest is in ``broker.registry``: the peer's user namespace (a strict
  box has its own), an ancestor holding a conclave database (any broker's
  agent tree), and, where Landlock has no scopes (ABI < 6), ``NoNewPrivs``
  (set by every box; weaker: other sandboxes set it too).

:class:`OperatorProbe` is the listener, owned by one task of the broker.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Final, final

import attrs
import trio

from broker.client import probe_address
from broker.identity import peer_credentials

log = logging.getLogger("conclave.operator_probe")

#: How long a ``hello`` waits for its token to arrive on the probe socket.
PROBE_WAIT: Final = 5.0
#: How long a token said and never claimed is kept, and how many at most.
TOKEN_LIFETIME: Final = 30.0
MAX_TOKENS: Final = 1024


def box_probe_in_force() -> bool:
    """Is every box on this kernel scoped on abstract sockets (Landlock ABI 6+), so the probe decides?"""
    from broker.sandbox import landlock

    return landlock.abi_version() >= 6


class ProbeTaken(RuntimeError):
    """Another process holds the probe's abstract name: the operator key has leaked."""


@final
@attrs.frozen
class ProbeSeen:
    """The process that said a token on the probe socket, as the kernel saw it."""

    pid: int
    uid: int
    started: int | None


@final
class OperatorProbe:
    """The broker's abstract socket for the operator's probe, and the tokens said on it.

    Use :meth:`bind` (before anything is served), then run :meth:`serve` in the
    broker's nursery; connections ask :meth:`claim` for the token their
    ``hello`` names.
    """

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._sock = sock
        self._seen: dict[str, tuple[ProbeSeen, float]] = {}
        self._arrived = trio.Event()

    @classmethod
    def bind(cls, operator_key: str) -> OperatorProbe:
        """Listen on the key's abstract name.

        Raises:
            ProbeTaken: the name is taken -- only a holder of the key can name it.
        """
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock._sock.bind(probe_address(operator_key))  # synchronous: the name is taken now or never
        except OSError as exc:
            sock.close()
            raise ProbeTaken(
                f"another process already listens on this state directory's operator probe ({exc.strerror}): only a holder "
                "of the operator key can name it, so the key has leaked (or a second broker shares it). Move operator.key "
                "aside (a new one is made) and stop whatever holds the name"
            ) from None
        sock.listen(64)
        return cls(sock)

    def close(self) -> None:
        self._sock.close()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    conn, _ = await self._sock.accept()
                    nursery.start_soon(self._read_token, conn)
            finally:
                self._sock.close()

    async def _read_token(self, conn: trio.socket.SocketType) -> None:
        data = b""
        with conn:
            try:
                creds = peer_credentials(conn)  # type: ignore[arg-type]
            except OSError:
                return
            try:
                with trio.move_on_after(PROBE_WAIT):
                    while b"\n" not in data and len(data) < 128:
                        chunk = await conn.recv(128)
                        if not chunk:
                            break
                        data += chunk
            except OSError:
                return
            finally:
                creds.close()
        token = data.split(b"\n", 1)[0].decode("ascii", "replace").strip()
        if not token or len(token) > 64:
            return
        self._forget_old()
        self._seen[token] = (ProbeSeen(pid=creds.pid, uid=creds.uid, started=creds.started), time.monotonic())
        self._arrived.set()
        self._arrived = trio.Event()

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - TOKEN_LIFETIME
        for token in [t for t, (_, at) in self._seen.items() if at < cutoff]:
            del self._seen[token]
        while len(self._seen) >= MAX_TOKENS:
            del self._seen[next(iter(self._seen))]

    async def claim(self, token: str | None) -> ProbeSeen | None:
        """Who said ``token`` (once: a token is good for one hello), waiting briefly for it to arrive."""
        if not token:
            return None
        with trio.move_on_after(PROBE_WAIT):
            while token not in self._seen:
                await self._arrived.wait()
        found = self._seen.pop(token, None)
        return found[0] if found else None
