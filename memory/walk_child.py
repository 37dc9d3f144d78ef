"""The record walk in a process of its own: ``python -I -m memory.walk_child``, started by :mod:`memory.walk`.

``verify`` rebuilds every projected table from the keyed event log
(:func:`memory.verify.check_records`); at a million claims that holds a
gigabyte until the last event, so the broker runs it here and keeps none of
it.  This is the broker's own code, as its own uid, never sandboxed and never
in an agent's grants; it does nothing but the walk:

* reads one JSON line on stdin -- where the store is (a SQLite path, or the
  PostgreSQL URL the broker connects with), the chain key's path, the head the
  broker committed last, a head the operator expects, the features whose
  projectors to run, and the broker's libpq variables -- so nothing secret is
  on its command line or in its environment (``/proc/PID/cmdline`` and
  ``environ``);
* opens its own read-only connection, loads the chain key from its file,
  takes the projectors from the composition root, walks;
* prints one JSON document on stdout (the chain's findings and facts, every
  problem, what was not rebuilt, its pid, its walk's seconds and its peak
  resident memory) and ends.

Its stdin stays open while the broker waits: end of file there means the
broker is gone, however it died, and the walk ends at once (``PR_SET_PDEATHSIG``
would not do: trio forks from a worker thread, and the signal follows that
thread's exit, not the broker's).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

#: The exit status of a walk whose broker went away (its stdin reached end of file).
ORPHANED = 3


def _lifeline() -> None:
    sys.stdin.buffer.read()  # returns at end of file: the broker closed its end, or died
    os._exit(ORPHANED)


def _head(value: Any) -> Any:
    from store.events import Head

    return None if value is None else Head(int(value[0]), str(value[1]))


def _backend(where: dict[str, str]) -> Any:
    """The PostgreSQL backend (None for SQLite): it opens the reader and tells an unreachable server from a failure."""
    if "sqlite" in where:
        return None
    from store.postgres import PostgresBackend

    return PostgresBackend(where["postgresql"], migrate=False)


def walk(request: dict[str, Any]) -> dict[str, Any]:
    # These imports are most of a small store's walk: no garbage collection while they run (a sixth of their CPU).
    gc.disable()
    try:
        from broker import composition
        from memory import verify
        from store import integrity

        made = composition.projectors()
    finally:
        gc.enable()
    missing = [name for name in request["features"] if name not in made]
    if missing:
        raise LookupError(f"the broker runs projectors this code does not have: {', '.join(missing)}")
    key, _ = integrity.load_key(Path(request["key"]))  # the broker reports the key file's own problems
    expect = request["expect"]
    started = time.monotonic()
    backend = _backend(request["store"])
    try:
        if backend is None:
            from store import database

            conn = database.connect(Path(request["store"]["sqlite"]), readonly=True)
        else:
            conn = backend.open_reader()
        try:
            with conn:  # one snapshot for the whole walk, as the broker's own readers
                chain, problems, not_rebuilt = verify.check_records(
                    conn,
                    key=key,
                    projectors=[made[name] for name in request["features"]],
                    committed=_head(request["committed"]),
                    expect=None if expect is None else integrity.ExpectedHead(int(expect[0]), str(expect[1])),
                )
        finally:
            conn.close()
    except Exception as exc:
        if backend is not None and backend.unreachable(exc):
            return {"unavailable": f"the store's server cannot be reached: {exc}"}
        raise
    import attrs

    return {
        "seconds": round(time.monotonic() - started, 3),
        "chain": {
            "walked": chain.walked,
            "head": [chain.head.seq, chain.head.hash],
            "findings": [{"problem": f.problem, "event": f.event} for f in chain.findings],
            "facts": chain.facts,
        },
        "problems": [attrs.asdict(p) for p in problems],
        "not_rebuilt": not_rebuilt,
    }


def main() -> NoReturn:
    # The broker decides when this ends (it kills it, or closes stdin); a Ctrl-C at the terminal is for the broker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        request = json.loads(sys.stdin.buffer.readline())
        threading.Thread(target=_lifeline, name="lifeline", daemon=True).start()
        # libpq reads these from the environment; set here, they are in no /proc/PID/environ.
        os.environ.update(request["libpq"])
        out = walk(request)
        out["pid"] = os.getpid()
        out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sys.stdout.write(json.dumps(out))
        sys.stdout.flush()
    except BaseException as exc:
        traceback.print_exc()
        # The broker quotes the last line: the error in one line.
        sys.stderr.write(f"{type(exc).__name__}: {' '.join(str(exc).split())}\n")
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # a gigabyte of rebuilt rows is not worth freeing one by one


if __name__ == "__main__":
    main()
