"""The shared memory: an apsw FTS5 store of claims whose trust needs independent witnesses.

Read it in this order:

* ``policy``      -- the one trust policy: trust domains, quorum, require_blind (pure).
* ``schema``      -- the SQL: claims and editions, witnesses, promotions, exposures, FTS5 indexes.
* ``claims``      -- editions and their search-index membership; claim JSON.
* ``standing``    -- feeds the policy a claim's rows and writes its verdict back.
* ``authoring``   -- what an agent writes: remember, revise, corroborate, dispute.
* ``exposures``   -- who was shown what (blind versus informed witnesses).
* ``retrieval``   -- recall and context: BM25 with the tier as a term.
* ``prefilter``   -- rules every claim passes before anything is stored.
* ``curation``, ``revocation``, ``groom`` -- the operator's decisions and the lifecycle pass.
* ``inspection``, ``verify`` -- reading it back; checking it against the event log.
* ``settings``, ``service``, ``ops``, ``cli`` -- configuration, the broker-side service, wire ops, commands.

The store itself (``owner``, ``database``, ``events``) is shared by every package.
The names re-exported here load on first use: importing ``memory`` must stay cheap for the CLI.
"""

from store._lazy import lazy_getattr

_EXPORTS = {
    "NotCounted": "memory.policy",
    "Tier": "memory.policy",
    "TrustPolicy": "memory.policy",
    "judge": "memory.policy",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
