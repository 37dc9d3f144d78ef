"""The composition root: the one module in ``broker/`` that names the features.

The broker's own modules know nothing of memory, locks, mail or the agents'
presets; each of those packages declares itself (a
:class:`~broker.core.Feature` in its ``ops`` module, a preset registry, a
command group), and this module puts them together.  Adding a feature means
writing its package and adding one line here -- never editing the store, the
core or the team parser.  ``tests/test_floors.py`` holds the rule: nothing
else in ``broker/`` imports the floors above it.

Imports happen inside the functions, so a command that needs none of this
(an agent's ``conclave whoami``) pays for none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import typer

    from broker.core import Feature
    from broker.team import TeamRules
    from store.projection import Projector
    from store.schema import Schema


def features() -> tuple[Feature, ...]:
    """Every feature a broker runs, in the order their schemas apply and their owners start."""
    from broker import ops_core
    from broker.mail import ops as mail_ops
    from locks import ops as locks_ops
    from memory import ops as memory_ops

    return (ops_core.FEATURE, memory_ops.FEATURE, locks_ops.FEATURE, mail_ops.FEATURE)


def projectors() -> dict[str, Callable[[], Projector]]:
    """Each feature's ``Feature.projector`` by feature name, importing only the projection modules.

    For the process ``verify`` walks the store in (``memory.walk_child``):
    :func:`features` imports every feature's ops, trio and cattrs -- about a
    second on every walk -- and the walk needs none of them.  The same
    factories :func:`features` declares (tests/memory/test_verify_apart.py
    holds the two equal).
    """
    from broker.mail.projection import MailLog
    from broker.projection import BrokerLog
    from locks.projection import LocksLog
    from memory.projection import for_verify

    return {"broker": BrokerLog, "memory": for_verify, "locks": LocksLog, "mail": MailLog}


def schemas() -> list[Schema]:
    """Every feature's tables (for tools that open a store without a broker)."""
    return [f.schema for f in features() if f.schema is not None]


def team_rules() -> TeamRules:
    """What the team parser checks beyond the file's shape: the features' tables, the presets."""
    from agents.presets import REGISTRY
    from broker.team import TeamRules

    return TeamRules(checks=tuple(f.check_team for f in features() if f.check_team is not None), presets=REGISTRY)


def mount(app: typer.Typer) -> None:
    """Add each package's commands to the root ``conclave`` app."""
    from agents import cli as agents_cli
    from broker.dashboard import cli as dashboard_cli
    from broker.mail import cli as mail_cli
    from locks import cli as locks_cli
    from memory import cli as memory_cli
    from scenarios import cli as scenarios_cli
    from broker import storecli

    for name, module, help_text in (
        ("memory", memory_cli, "The shared memory: remember, recall, corroborate, audit."),
        ("lock", locks_cli, "Path, glob and git locks."),
        ("msg", mail_cli, "Mail between agents and the operator."),
    ):
        sub = module.app
        if sub.registered_commands or sub.registered_groups:
            app.add_typer(sub, name=name, help=help_text)
    storecli.register(app, schemas)
    for module in (locks_cli, mail_cli, scenarios_cli, agents_cli, dashboard_cli):
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
