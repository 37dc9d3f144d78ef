"""A broker's lock lease when a query on it is cancelled (``pg_cancel_backend`` by an administrator,
a ``statement_timeout``): the session lives on, so whatever the failed request took on it must be
given back -- or it would stay held, by no one, for the broker's whole life.  Found by review."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import trio

from broker.errors import ConclaveError, ErrorCode
from locks.resources import Kind, Resource
from locks.shared import SharedLocks


async def test_a_request_whose_lease_query_is_cancelled_leaves_nothing_held(pg_cluster: Any) -> None:
    db = pg_cluster.database()
    alpha = SharedLocks(pg_cluster.broker_url(db, "alpha"), "alpha")
    beta = SharedLocks(pg_cluster.broker_url(db, "beta"), "beta")
    a, b = Resource("name://a", Kind.NAMED), Resource("name://b", Kind.NAMED)
    async with trio.open_nursery() as nursery:
        await nursery.start(alpha.run)
        await nursery.start(beta.run)
        assert (await beta.take([b], shared=False, capacity={})).ok  # beta holds b
        admin = psycopg.connect(pg_cluster.url(db), autocommit=True)
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE conclave_brokers IN ACCESS EXCLUSIVE MODE")  # alpha's "who holds b?" query waits...

        def cancel_the_waiting_query() -> None:  # ...and is cancelled, as an administrator would
            with psycopg.connect(pg_cluster.url(db), autocommit=True) as other:
                for _ in range(200):
                    row = other.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%pg_locks%'").fetchone()
                    if row:
                        other.execute("SELECT pg_cancel_backend(%s)", (row[0],))
                        return
                    time.sleep(0.05)

        nursery.start_soon(trio.to_thread.run_sync, cancel_the_waiting_query)
        try:
            await alpha.take([a, b], shared=False, capacity={})  # takes a, then finds b held
        except ConclaveError as exc:
            assert exc.code is ErrorCode.UNAVAILABLE and "nothing was taken" in str(exc)
        else:
            raise AssertionError("the cancelled request was not refused")
        admin.execute("ROLLBACK")
        admin.close()
        later = await beta.take([a], shared=False, capacity={})
        assert later.ok, later.blocked  # a was given back: beta can take it
        assert alpha.session == 1 and alpha.lost_sessions == 0  # the session lived on
        nursery.cancel_scope.cancel()
