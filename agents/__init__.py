"""The agent side: clients for the wire protocol, team presets, scripted agents."""

from broker.client import BlockingClient, BrokerUnavailable, NoIdentityError, TrioClient, agent_credentials

__all__ = ["BlockingClient", "BrokerUnavailable", "NoIdentityError", "TrioClient", "agent_credentials"]
