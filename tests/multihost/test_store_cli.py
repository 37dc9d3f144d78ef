"""``conclave store``: the owner sets up a shared database and names each host's broker."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.conclave_run import conclave as conclave_command, operator_env


def conclave(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The operator's `conclave` in a process of its own (forked warm: tests/conclave_run.py)."""
    return conclave_command(*args, env=operator_env(**(env or {})), timeout=60)


def test_owner_initialises_a_database_and_registers_two_brokers(pg_cluster: Any) -> None:
    with pg_cluster.admin() as admin:
        admin.execute("CREATE DATABASE cli_team")
    url = pg_cluster.url("cli_team")
    done = conclave("store", "init", "--url", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["migrations"] >= 6
    again = conclave("store", "init", "--json", env={"CONCLAVE_STORE_URL": url})  # idempotent, URL from the environment
    assert again.returncode == 0 and json.loads(again.stdout)["migrations"] == json.loads(done.stdout)["migrations"]

    for host in ("laptop", "ci-runner-1"):
        added = conclave("store", "add-broker", host, "--url", url, "--json")
        assert added.returncode == 0, added.stderr
    listed = json.loads(conclave("store", "brokers", "--url", url, "--json").stdout)
    assert [(b["host"], b["role"]) for b in listed] == [("ci-runner-1", "conclave_ci_runner_1"), ("laptop", "conclave_laptop")]

    # The registered role is who a broker is: it learns its host from the database.
    from store.postgres import PostgresBackend

    assert PostgresBackend(pg_cluster.url("cli_team", user="conclave_laptop")).identify() == "laptop"

    taken = conclave("store", "add-broker", "laptop", "--role", "other_role", "--url", url)
    assert taken.returncode == 1 and "already registered: laptop (role conclave_laptop)" in taken.stderr
    bad = conclave("store", "add-broker", "Laptop/1", "--url", url)
    assert bad.returncode == 1 and "host name 'Laptop/1'" in bad.stderr
    nowhere = conclave("store", "init")
    assert nowhere.returncode == 2 and "--url" in nowhere.stderr


def test_a_password_on_the_command_line_is_refused_and_the_same_url_from_the_environment_works(pg_cluster: Any) -> None:
    """The leak: `--url postgresql://owner:SECRET@server/db` puts the owner's password in /proc/PID/cmdline,
    which every user of the machine can read while the command runs.  It is refused before anything is done;
    the same URL from CONCLAVE_STORE_URL (the process's own environment, readable by its user only) works."""
    with pg_cluster.admin() as admin:
        admin.execute("CREATE DATABASE cli_secret")
    url = pg_cluster.url("cli_secret")
    parts = url.split("://", 1)
    user, rest = parts[1].split("@", 1)
    with_password = f"{parts[0]}://{user}:owner-pw-example@{rest}"
    refused = conclave("store", "init", "--url", with_password)
    assert refused.returncode == 2 and "carries a password" in refused.stderr and "owner-pw-example" not in refused.stderr
    in_query = conclave("store", "init", "--url", f"{url}&password=owner-pw-example")
    assert in_query.returncode == 2 and "carries a password" in in_query.stderr and "owner-pw-example" not in in_query.stderr
    assert conclave("store", "brokers", "--url", url, "--json").returncode != 0  # nothing was initialised
    done = conclave("store", "init", "--json", env={"CONCLAVE_STORE_URL": with_password})
    assert done.returncode == 0, done.stderr
    assert "owner-pw-example" not in done.stdout
