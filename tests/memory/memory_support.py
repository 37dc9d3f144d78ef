"""Helpers shared by the memory tests (imported by name; tests/memory is on sys.path)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw

from broker.identity import Principal, Role
from memory import authoring, claims, exposures
from store import database, events
from memory.policy import TrustPolicy

#: The default policy, for store-level tests.
POLICY = TrustPolicy()

_sessions = itertools.count(1)


def assert_model_vectors(fresh: Any, saved: Any, regenerate: str) -> None:
    """``saved`` (vectors kept beside a labelled set) are the local model's for the same texts as ``fresh``
    (embedded now): every row at cosine >= 0.9995.  Not equal to the last digit: the 4-bit model's int8
    kernels round differently on another CPU (AVX-512 against AVX2: up to 2e-3 a component, cosine >=
    0.9999), which moves no figure; another model, prefix or text moves a row far below."""
    import numpy as np

    cosines = (np.asarray(fresh) * np.asarray(saved)).sum(axis=1)
    worst = int(cosines.argmin())
    assert cosines[worst] >= 0.9995, f"row {worst} of the saved vectors is at cosine {cosines[worst]:.5f} to the model's; regenerate: {regenerate}"


def principal(agent: str, domain: str | None = None) -> Principal:
    """A principal the *test* makes up, for store-level tests that bypass the broker."""
    return Principal(agent=agent, session=f"t{next(_sessions):04d}", role=Role.AGENT, domain=domain or agent.split("/")[0])


def read_db(state: Path) -> apsw.Connection:
    return database.connect(state / "conclave.db", readonly=True)


def memory_events(state: Path, *, subject: str | None = None, kind: str = "memory") -> list[events.Event]:
    conn = read_db(state)
    try:
        return events.read(conn, kind_prefix=kind, subject=subject)
    finally:
        conn.close()


def witnesses(claim: dict[str, Any]) -> list[tuple[str, bool, str | None]]:
    """(principal, counted, reason_not_counted) for each corroboration of a claim."""
    return [(c["principal"], c["counted"], c["reason_not_counted"]) for c in claim["corroborations"]]


FACT = "The {} tests are flaky on arm64 CI because two workers share one temp directory."
#: FACT found again by a witness and said in its own words (cosine to FACT about 0.93 under the local embedder).
REDISCOVERED = "Reproduced here: the {} test suite fails now and then on arm64 CI, since two workers use the same temporary directory."


def remember_until_refused(agent: Any, acknowledged: list[int], tries: int = 400) -> dict[str, Any]:
    """Have ``agent`` remember 3 kB claims until the broker refuses one (a filling disk); the refusal.

    The store first uses the room its files already have, then needs more.
    Every claim acknowledged meanwhile is added to ``acknowledged``.
    """
    for n in range(tries):
        reply = agent.try_call("memory.remember", kind="discovery", text=FACT.format(f"billing{n}") + " " + "x" * 3000)
        if not reply["ok"]:
            return reply["error"]
        acknowledged.append(reply["result"]["id"])
    raise AssertionError(f"the store took {tries} claims of 3 kB and never said its disk was full")


def remember(job: Callable[..., Any], who: str, text: str, kind: str = "discovery") -> int:
    """Store-level remember as a made-up principal ``who``; returns the claim id."""
    return job(authoring.remember, POLICY, principal(who), kind=kind, scope="repo", text=text, evidence=None)["id"]


def trust(job: Callable[..., Any], claim: int, *domains: str) -> None:
    """Corroborate from each of ``domains`` (two independent ones make it trusted).

    Each witness reads the claim first (an informed witness counts; one that
    vouches by id for text it was never shown is ``unread`` and does not)."""
    for domain in domains or ("bob", "carol"):
        witness = principal(domain)
        job(lambda conn: exposures.record(conn, witness, [claims.require(conn, claim)], "show", events.now()))
        job(authoring.corroborate, POLICY, witness, claim, evidence=None)


def vouch(puppet: Any, claim: int) -> dict[str, Any]:
    """An agent reads a claim (``memory.show``), then corroborates it: an *informed* witness, which counts.

    A bare vouch by id from an agent never shown the claim is ``unread`` and
    does not count (docs/MEMORY.md, "Witnesses who say what they saw")."""
    puppet.call("memory.show", id=claim)
    return puppet.call("memory.corroborate", id=claim)


def blind_vouch(puppet: Any, claim: int, text: str) -> dict[str, Any]:
    """An agent never shown the claim says in its own words what it found (here: the finding, restated): blind."""
    return puppet.call("memory.corroborate", id=claim, evidence=f"I found this myself, independently: {text}")


def backend_run(request: Any, root: Path, team: list[Any], extra_toml: str = "") -> Any:
    """A real broker (``conclave run``) with puppet agents ``team``, on ``request.param``'s backend.

    ``sqlite``: the state directory's database; ``postgresql``: a fresh
    database on the session's server (tests/pgtools.py), reached as the
    broker role of host ``alpha``.  Words only (``embedder = "none"``): these
    tests are about what is shown and counted, not about meaning.
    """
    from agents.harness import Run

    store = ""
    if request.param == "postgresql":
        cluster = request.getfixturevalue("pg_cluster")
        store = f'\n[store]\nurl = "{cluster.broker_url(cluster.database(), "alpha")}"\n'
    memory = '\n[memory]\nembedder = "none"\n' + extra_toml
    return Run(root, [{"name": n} if isinstance(n, str) else n for n in team], extra_toml=store + memory)


#: Words only: which class an eval miss falls in must not depend on an embedder's judgement.
WORDS_ONLY = '\n[memory]\nembedder = "none"\n'
BACKENDS = ["sqlite", "postgresql"]


def backend_toml(request: Any, *, meaning: bool = False) -> str:
    """The team file's extra tables for ``request.param``'s backend: ``[store] url`` for PostgreSQL (a fresh database)."""
    extra = "" if meaning else WORDS_ONLY
    if request.param == "sqlite":
        return extra
    cluster = request.getfixturevalue("pg_cluster")
    return extra + f'\n[store]\nurl = "{cluster.broker_url(cluster.database(), "memhost")}"\n'


def started_run(request: Any, root: Path, names: list[str], *, meaning: bool = False) -> Iterator[Any]:
    """A started broker run at ``root`` with puppet agents ``names`` on ``request.param``'s backend; closed after."""
    from agents.harness import Run

    run = Run(root, [{"name": n} for n in names], extra_toml=backend_toml(request, meaning=meaning))
    try:
        yield run.start()
    finally:
        run.close()
