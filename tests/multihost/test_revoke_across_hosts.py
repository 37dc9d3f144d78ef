"""Revoking another host's principal on a shared store is refused, never reported done.

Found by the invariant fuzzer (docs/FUZZING.md; PostgreSQL, seed 1971333853):
alpha's operator ran ``memory.revoke beta/carol:...`` and was answered with
``revoked_at`` and a ``memory.revoke`` event, while row-level security had let
the update of beta's row change nothing -- carol stayed unrevoked and her
vouches kept counting.  docs/DEPLOYMENT.md: a broker revokes only its own
host's principals.
"""

from __future__ import annotations

from typing import Callable

import pytest

from agents.harness import Run
from broker.errors import ConclaveError


def test_a_broker_refuses_to_revoke_another_hosts_principal_and_that_host_revokes_it(two_hosts: Callable[..., tuple[Run, Run]]) -> None:
    a, b = two_hosts([{"name": "alice"}, {"name": "bob"}], [{"name": "carol"}], extra_toml="\n[policy]\nquorum = 1\n")
    alice, carol = a.puppet("alice"), b.puppet("carol")
    claim = alice.call("memory.remember", kind="discovery", text="The release script keeps a warm copy of the registry.")
    carol.call("memory.show", id=claim["id"])
    assert carol.call("memory.corroborate", id=claim["id"])["tier"] == "trusted"

    # The attack (or the mistake): alpha's operator revokes beta's carol.  Refused, saying where to do it ...
    with pytest.raises(ConclaveError) as refused:
        a.op("memory.revoke", target=carol.key, reason="its model read a poisoned issue")
    assert refused.value.code.value == "forbidden" and "another host" in str(refused.value)
    # ... and nothing pretends it happened: carol's vouch still counts, no revoke event was logged.
    assert a.op("memory.show", id=claim["id"])["tier"] == "trusted"
    assert [e for e in a.op("memory.log", kind="memory.revoke") if e["subject"] == carol.key] == []

    # The control: carol's own host revokes her; her vouch stops counting and the claim falls back.
    done = b.op("memory.revoke", target=carol.key, reason="its model read a poisoned issue")
    assert done["principal"] == carol.key and done["changes"] == [{"id": claim["id"], "from": "trusted", "to": "unverified"}]
    assert a.op("memory.show", id=claim["id"])["tier"] == "unverified"
    assert [e["subject"] for e in a.op("memory.log", kind="memory.revoke")] == [carol.key]
