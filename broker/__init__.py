"""The trio broker: supervisor, identity issuance, wire server, router, root CLI.

Public names are loaded lazily so that ``conclave whoami`` in an agent does
not pay for trio, cattrs and apsw it never uses.
"""

from __future__ import annotations

from store._lazy import lazy_getattr


_EXPORTS = {
    "ConclaveError": "broker.errors",
    "ErrorCode": "broker.errors",
    "Principal": "broker.identity",
    "Ticket": "broker.identity",
    "PrincipalRegistry": "broker.registry",
    "BrokerCore": "broker.core",
    "open_core": "broker.core",
    "run_broker": "broker.main",
    "RunSummary": "broker.main",
    "Supervisor": "broker.supervisor",
    "Team": "broker.team",
    "AgentSpec": "broker.spec",
    "StatePaths": "broker.paths",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
