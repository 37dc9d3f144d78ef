"""The dashboard's one connection to the broker, owned by one thread.

The UI must never wait on the broker, and the blocking wire client must
never be used by two threads at once.  So the connection belongs to a single
worker thread: every request -- the periodic reads and the operator's
actions alike -- is handed to that thread and awaited by the UI's event loop
(:meth:`BrokerLink.call`), which keeps drawing meanwhile.

The connection is opened exactly as every ``conclave`` command opens it
(:func:`broker.clikit.connect`), so the dashboard is the operator by the
same proof as the CLI and inherits any change to that proof.  No broker is
an ordinary state here, not an error: :class:`NoBroker` is raised and the
next request tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any, final

from broker.clikit import Target
from broker.errors import ConclaveError, ErrorCode


class NoBroker(ConnectionError):
    """No broker answers for the state directory (none runs, or it just went away)."""


class Refused(ConnectionError):
    """A broker answers but would not let this process connect (the message says why)."""


@final
class BrokerLink:
    """Requests to the broker, carried out one at a time on the link's own thread."""

    def __init__(self, target: Target, *, timeout: float = 10.0) -> None:
        self.target = target
        self.timeout = timeout
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conclave-dashboard-link")
        self._client: Any = None  # touched only on the link thread
        self._closed = False

    async def call(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """The op's result, without blocking the caller's event loop.

        Raises:
            NoBroker: nothing answers (try again later).
            Refused: the broker would not accept this process.
            ConclaveError: the broker refused this request (its code and message).
        """
        if self._closed:  # the app is closing: a loop that woke after close() reads nothing more
            raise NoBroker("the dashboard is closing")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._call, op, dict(args or {}))

    def call_blocking(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """The same, for code with no event loop (``conclave dashboard --json``)."""
        return self._thread.submit(self._call, op, dict(args or {})).result()

    def _call(self, op: str, args: dict[str, Any]) -> Any:
        if self._client is None:
            self._client = self._connect()
        try:
            return self._client.call(op, args)
        except ConclaveError as exc:
            if exc.code is ErrorCode.UNAVAILABLE and "closed the connection" in exc.message:
                self._drop()
                raise NoBroker("the broker closed the connection (it stopped)") from None
            raise
        except OSError as exc:
            self._drop()
            raise NoBroker(f"the broker stopped answering: {exc}") from None

    def _connect(self) -> Any:
        import typer

        from broker import clikit

        said = io.StringIO()
        try:
            # connect() reports a refusal on stderr and exits, as a command should;
            # here the sentence becomes the exception's message instead.
            with contextlib.redirect_stderr(said):
                client = clikit.connect(self.target, timeout=self.timeout)
        except typer.Exit as exc:
            message = said.getvalue().strip().removeprefix("conclave: ") or "the broker refused the connection"
            if exc.exit_code == clikit.EXIT_NO_BROKER:
                raise NoBroker(message) from None
            raise Refused(message) from None
        if client is None:
            raise NoBroker(f"no broker is running for {self.target.paths().state}")
        return client

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(OSError):
                client.close()

    def close(self) -> None:
        """Close the connection on its own thread, then stop the thread (a later :meth:`call` raises :class:`NoBroker`)."""
        self._closed = True
        with contextlib.suppress(RuntimeError):
            self._thread.submit(self._drop)
        self._thread.shutdown(wait=True, cancel_futures=True)
