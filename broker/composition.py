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

from typing import TYPE_CHECKING, Callable, Final

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


#: Which package's commands each top-level word of ``conclave`` is (``tests/broker/test_cli.py`` holds
#: this table to what each package's ``register`` really adds).  A process runs one command, so
#: ``mount`` imports and adds only the package that word names.
COMMANDS: Final = {
    "memory": "memory",
    "lock": "locks",
    "exec": "locks",
    "msg": "mail",
    "status": "mail",
    "store": "store",
    "scenario": "scenarios",
    "mcp": "agents",
    "hook": "agents",
    "agent-launch": "agents",
    "dashboard": "dashboard",
}


def mount(app: typer.Typer, command: str | None = None) -> None:
    """Add the packages' commands to the root ``conclave`` app: only the package that owns ``command``
    when it is one of :data:`COMMANDS`, none for a command of ``broker/cli.py`` itself, all of them
    otherwise (no command, ``--help``, a word nobody owns: typer's listing and its suggestions)."""
    if command is not None and command in COMMANDS:
        _mount_package(app, COMMANDS[command])
    elif command is None or command not in _own_commands(app):
        for package in dict.fromkeys(COMMANDS.values()):
            _mount_package(app, package)


def _own_commands(app: typer.Typer) -> set[str]:
    from typer.main import get_command_name

    named = {info.name or get_command_name(info.callback.__name__) for info in app.registered_commands if info.callback}
    return named | {info.name for info in app.registered_groups if info.name}


def _mount_package(app: typer.Typer, package: str) -> None:
    if package == "memory":
        from memory import cli as memory_cli

        app.add_typer(memory_cli.app, name="memory", help="The shared memory: remember, recall, corroborate, audit.")
    elif package == "locks":
        from locks import cli as locks_cli

        app.add_typer(locks_cli.app, name="lock", help="Path, glob and git locks.")
        locks_cli.register(app)
    elif package == "mail":
        from broker.mail import cli as mail_cli

        app.add_typer(mail_cli.app, name="msg", help="Mail between agents and the operator.")
        mail_cli.register(app)
    elif package == "store":
        from broker import storecli

        storecli.register(app, schemas)
    elif package == "scenarios":
        from scenarios import cli as scenarios_cli

        scenarios_cli.register(app)
    elif package == "agents":
        from agents import cli as agents_cli

        agents_cli.register(app)
    elif package == "dashboard":
        from broker.dashboard import cli as dashboard_cli

        dashboard_cli.register(app)
    else:
        raise ValueError(f"no package {package!r} in broker.composition.COMMANDS")
