"""The record walk of ``verify``, run in a short-lived process of its own (``memory.walk_child``).

Rebuilding every projected table from the keyed log (:func:`memory.verify.check_records`)
keeps every claim's facts until the last event: about a gigabyte at a million
claims.  Done inside the broker, that was the broker's peak resident memory
(docs/BENCHMARKS.md, "RSS at 1M"); Python keeps most of it after the walk.  So
both the background verify and the operator's ``conclave memory verify`` start
the broker's own interpreter (``-I``, like everything conclave runs; ``/`` as
its working directory, a minimal environment) on ``memory.walk_child``, hand it
what it needs on stdin, and read its findings from stdout.  What needs the
writer -- the anchor, the FTS5 ``integrity-check``, the committed head --
stays in the broker.

The child is trusted as the broker is: the same code from the same
installation, as the same uid, never in a box, its pipes the broker's alone
(close-on-exec; agents are spawned with every other descriptor closed).  Its
answer is believed only whole: anything but a complete report on stdout and a
clean exit -- a crash, a kill, a timeout, garbage -- is a verify that FAILED,
raised as :class:`WalkFailed` with a sentence saying which, never a pass.

Lifetime: the child is killed in the ``finally`` of :func:`run` (cancelled,
timed out, the operator's client hung up), and it ends by itself when its
stdin reaches end of file -- the broker's end closes when the broker dies,
however it dies.  It stays in the broker's process group, so the supervisor's
sweep of orphans (``broker.sandbox.sweep``) leaves it alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Awaitable, Callable, Final, Sequence, final

import attrs
import cattrs
import trio

from memory.verify import Problem
from store import dialect, integrity
from store.backend import StoreUnavailable
from store.events import Head
from store.integrity import ChainFindings, ExpectedHead, Finding
from store.owner import StoreOwner

#: The module the child runs.
ENTRY: Final = "memory.walk_child"
#: The only variables of the broker's environment the child starts with (libpq's ``PG*`` go on stdin).
ENVIRONMENT: Final = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SQLITE_TMPDIR")
#: The background verify's bound on one walk: a minute, plus this much per event in the log.  A walk
#: takes about 0.1 ms an event of CPU here (100k claims: 6.6 s), 0.2 ms of wall clock on a saturated machine.
MIN_SECONDS: Final = 60.0
SECONDS_PER_EVENT: Final = 0.001
#: Most bytes of report read from the child (200 named rows per table are a few hundred kB).
MAX_REPORT: Final = 64 * 1024 * 1024
#: The tail of the child's stderr quoted when it fails.
STDERR_TAIL: Final = 4096

_strict = cattrs.Converter(forbid_extra_keys=True)


class WalkFailed(Exception):
    """The walk did not produce a report; ``str()`` says why, in a sentence.  ``pid``: the child's, when it started."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


@final
@attrs.frozen
class Walk:
    """What the child found, and about the child: its pid, its walk's seconds, its peak resident memory."""

    chain: ChainFindings
    problems: list[Problem]
    not_rebuilt: list[str]
    pid: int
    seconds: float
    peak_rss_kb: int

    def facts(self) -> dict[str, Any]:
        return {"pid": self.pid, "seconds": self.seconds, "peak_rss_mb": round(self.peak_rss_kb / 1024, 1), "failed": None}


def timeout_for(head: Head | None) -> float:
    """The background verify's bound for a store whose log ends at ``head``."""
    return MIN_SECONDS + SECONDS_PER_EVENT * (head.seq if head is not None else 0)


def argv(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-I", "-m", ENTRY]


def request(store: StoreOwner, features: Sequence[str], *, committed: Head | None, expect: ExpectedHead | None) -> dict[str, Any]:
    """What the child is told on stdin (it may carry the store's password: never argv or environ)."""
    backend = store.backend
    if dialect.of(backend) == dialect.POSTGRESQL:
        where = {"postgresql": backend.url}  # type: ignore[attr-defined]
    else:
        where = {"sqlite": str(backend.path)}  # type: ignore[attr-defined]
    return {
        "store": where,
        "key": str(store.chain.key),
        "committed": None if committed is None else [committed.seq, committed.hash],
        "expect": None if expect is None else [expect.seq, expect.hash],
        "features": list(features),
        "libpq": {k: v for k, v in os.environ.items() if k.startswith("PG")},
    }


async def records(
    store: StoreOwner,
    features: Sequence[str],
    *,
    committed: Head | None,
    expect: ExpectedHead | None = None,
    timeout: float | None,
    hung_up: Callable[[], Awaitable[None]] | None = None,
    command: Sequence[str] | None = None,
) -> Walk:
    """The chain and every table of ``features`` checked by a child process (``check_records``'s findings).

    ``timeout``: kill the child after this many seconds (None: never -- the
    operator's own verify, which ends when its client hangs up: ``hung_up``).

    Raises:
        WalkFailed: the child did not give a whole report (the sentence says why).
        StoreUnavailable: the store's files were swapped, or its server cannot be reached.
    """
    store.check_files()
    told = request(store, features, committed=committed, expect=expect)
    walked = await run(told, timeout=timeout, hung_up=hung_up, command=command)
    store.check_files()  # a copy renamed over the database while the child read it: nothing it said counts
    return walked


async def run(
    told: dict[str, Any],
    *,
    timeout: float | None,
    hung_up: Callable[[], Awaitable[None]] | None = None,
    command: Sequence[str] | None = None,
) -> Walk:
    """Start the child (``command``, default :func:`argv`), tell it ``told``, and read its report.

    Raises:
        WalkFailed: no whole report (a crash, a kill, a timeout, the client hung up, garbage).
        StoreUnavailable: the child could not reach the store's server.
    """
    cmd = list(command) if command is not None else argv()
    env = {k: os.environ[k] for k in ENVIRONMENT if k in os.environ}
    try:
        process = await trio.lowlevel.open_process(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/"
        )
    except OSError as exc:
        raise WalkFailed(f"could not start {cmd[0]} for the walk: {exc.strerror or exc}") from None
    pid = process.pid
    out, err = bytearray(), bytearray()
    why: str | None = None
    try:
        with trio.CancelScope() as scope:
            if timeout is not None:
                scope.deadline = trio.current_time() + timeout
            async with trio.open_nursery() as nursery:
                if hung_up is not None:

                    async def watch_client() -> None:
                        nonlocal why
                        await hung_up()
                        why = "the operator's client hung up, so it was stopped"
                        scope.cancel()

                    nursery.start_soon(watch_client)
                await _talk(process, json.dumps(told).encode() + b"\n", out, err)
                nursery.cancel_scope.cancel()
        if scope.cancelled_caught and why is None:
            why = f"it did not finish within {timeout:.0f} s, so it was killed"
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()
            await process.wait()
    if why is not None:
        raise WalkFailed(f"the walk (process {pid}) did not finish: {why}", pid)
    return _report(pid, process.returncode, bytes(out), bytes(err))


async def _talk(process: trio.Process, told: bytes, out: bytearray, err: bytearray) -> None:
    """Send the request, keep stdin open, read stdout and stderr to their ends, wait for the exit."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    try:
        await process.stdin.send_all(told)
    except trio.BrokenResourceError:
        pass  # it ended before reading its request: its status and stderr say why
    async with trio.open_nursery() as streams:
        streams.start_soon(_drain, process.stderr, err, STDERR_TAIL, True)
        await _drain(process.stdout, out, MAX_REPORT, False)
        if len(out) > MAX_REPORT:
            process.kill()  # no report is that long; it would block on a full pipe
    await process.wait()


async def _drain(stream: trio.abc.ReceiveStream, into: bytearray, limit: int, tail: bool) -> None:
    """Read ``stream`` to its end into ``into``: at most ``limit`` bytes (the last ones if ``tail``, else stop there)."""
    async for chunk in stream:
        into += chunk
        if len(into) > limit:
            if not tail:
                return
            del into[: len(into) - limit]


def _report(pid: int, status: int | None, out: bytes, err: bytes) -> Walk:
    said = _last_line(err)
    if len(out) > MAX_REPORT:
        raise WalkFailed(f"the walk (process {pid}) printed more than {MAX_REPORT // (1024 * 1024)} MB: not a report", pid)
    if status is None or status < 0:
        sig = -(status or 0)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        raise WalkFailed(f"the walk (process {pid}) was killed by {name} before it finished", pid)
    if status != 0:
        raise WalkFailed(f"the walk (process {pid}) failed with exit status {status}" + (f": {said}" if said else ""), pid)
    try:
        doc = json.loads(out)
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an object")
        if set(doc) == {"unavailable", "pid", "peak_rss_kb"}:
            raise StoreUnavailable(str(doc["unavailable"]))
        walked = _structure(doc)
    except StoreUnavailable:
        raise
    except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
        text = out[:80].decode("utf-8", "replace")
        raise WalkFailed(f"the walk (process {pid}) printed what is not a walk report ({_brief(exc)}; it began {text!r})", pid) from None
    if walked.pid != pid:
        raise WalkFailed(f"the walk (process {pid}) printed a report that names another process ({walked.pid}) as its author", pid)
    return walked


_FIELDS: Final = frozenset({"seconds", "chain", "problems", "not_rebuilt", "pid", "peak_rss_kb"})
_CHAIN: Final = frozenset({"walked", "head", "findings", "facts"})


def _structure(doc: dict[str, Any]) -> Walk:
    """The report, every field checked (ValueError, TypeError, KeyError or a cattrs error naming what is wrong)."""
    if set(doc) != _FIELDS:
        raise ValueError(f"fields {sorted(set(doc) ^ _FIELDS)} do not belong or are missing")
    chain = doc["chain"]
    if not isinstance(chain, dict) or set(chain) != _CHAIN:
        raise ValueError("its chain is not {walked, head, findings, facts}")
    seq, digest = chain["head"]
    if not isinstance(chain["facts"], dict) or not isinstance(doc["not_rebuilt"], list):
        raise ValueError("its facts or not_rebuilt have the wrong shape")
    return Walk(
        chain=ChainFindings(
            walked=_int(chain["walked"]),
            head=Head(_int(seq), _str(digest)),
            findings=tuple(_strict.structure(f, Finding) for f in chain["findings"]),
            facts=chain["facts"],
        ),
        problems=[_strict.structure(p, Problem) for p in doc["problems"]],
        not_rebuilt=[_str(line) for line in doc["not_rebuilt"]],
        pid=_int(doc["pid"]),
        seconds=float(doc["seconds"]),
        peak_rss_kb=_int(doc["peak_rss_kb"]),
    )


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _last_line(err: bytes) -> str:
    lines = [line.strip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
