"""The stateful property-based test: Hypothesis chooses the steps, the driver takes them.

Each rule is one kind of step (docs/FUZZING.md lists them); its arguments
are small integers the driver maps onto whatever exists at that moment, so
Hypothesis can shrink a failing example to fewer and simpler steps.  After
every step the invariant checks the whole memory's tiers and tallies, the
lock tables and the line; every ``deep_every`` steps, and at each example's
end, it holds every claim, witness and message against the model and runs
``memory verify``.

One :class:`~tests.fuzz.driver.Fuzz` (a world of real brokers and its model)
serves every example of a run: :func:`bind` sets it before Hypothesis runs.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule

from tests.fuzz.driver import Fuzz

_FUZZ: Fuzz | None = None
DEEP_EVERY = 25
#: Steps that start or end processes cost a second or more here (a step on the wire costs tens of
#: milliseconds); an example takes at most this many, so most of its steps exercise the rules.
COSTLY_PER_EXAMPLE = 4

sel = st.integers(min_value=0, max_value=63)
mask = st.integers(min_value=0, max_value=(1 << 24) - 1)


def bind(fuzz: Fuzz | None) -> None:
    global _FUZZ
    _FUZZ = fuzz


def step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark the world dirty when a step fails: the model no longer follows it (the next example starts afresh)."""

    @functools.wraps(fn)
    def run(self: ConclaveMachine, *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        try:
            return fn(self, *args, **kwargs)
        except BaseException as exc:
            self.fuzz.failed(exc)
            raise
        finally:
            self.fuzz.coverage.seconds[fn.__name__] += time.monotonic() - began

    return run


class ConclaveMachine(RuleBasedStateMachine):
    """Random teams against a real broker, checked after every step."""

    claims = Bundle("claims")
    messages = Bundle("messages")

    def __init__(self) -> None:
        super().__init__()
        assert _FUZZ is not None, "tests.fuzz.machine.bind(fuzz) first"
        self.fuzz = _FUZZ
        self.log = self.fuzz.begin_example()
        self.steps = 0
        self.costly = COSTLY_PER_EXAMPLE
        self.heavy = False

    # A broker restart (a policy change, a SIGKILL) costs seconds: one example in two may take one.  The
    # allowance shrinks towards none, so a restart a failure does not need becomes a no-op, then goes.
    @initialize(heavy=st.integers(0, 1))
    def allowances(self, heavy: int) -> None:
        self.heavy = heavy == 1
        self.fuzz.coverage.rules["examples allowed a broker restart"] += self.heavy

    def _spend(self) -> None:
        self.costly -= 1

    # -- memory -----------------------------------------------------------------

    @rule(target=claims, who=sel, kind=sel, subject=sel, predicate=sel, evidence=st.booleans())
    @step
    def remember(self, who: int, kind: int, subject: int, predicate: int, evidence: bool) -> Any:
        made = self.fuzz.remember(who, kind, subject, predicate, evidence)
        return multiple() if made is None else made

    @rule(who=sel, which=sel)
    @step
    def remember_refused(self, who: int, which: int) -> None:
        self.fuzz.remember_refused(who, which)

    @rule(target=claims, who=sel, claim=claims, subject=sel, predicate=sel)
    @step
    def revise(self, who: int, claim: int, subject: int, predicate: int) -> Any:
        made = self.fuzz.revise(who, claim, subject, predicate)
        return multiple() if made is None else made

    # Hypothesis draws the first rule in its order (no target, fewest arguments, then by name) far more
    # often than the others, a step in five or more: that place goes to what the trust rules turn on,
    # a witness and what it was shown before.
    @rule(pick=st.tuples(sel, sel, st.integers(0, 7)))
    @step
    def a_witness_or_a_read(self, pick: tuple[int, int, int]) -> None:
        made = self.fuzz.example_claims
        who, which, how = pick
        claim = made[which % len(made)] if made else None
        if claim is None:  # nothing to vouch for yet: someone remembers a claim first
            self.fuzz.remember(who, which, which // 3, how, evidence=False)
        elif how < 4:
            self.fuzz.witness(who, claim, dispute=False, evidence=how % 3)
        elif how == 4:
            self.fuzz.show(who, claim)
        elif how == 5:
            self.fuzz.recall(who, [claim])
        else:
            self.fuzz.context(who, claim, how == 7)

    @rule(who=sel, claim=claims, evidence=st.integers(0, 2))
    @step
    def corroborate(self, who: int, claim: int, evidence: int) -> None:
        self.fuzz.witness(who, claim, dispute=False, evidence=evidence)

    @rule(who=sel, claim=claims)
    @step
    def corroborate_again(self, who: int, claim: int) -> None:
        """A witness vouches twice in a row, its evidence matching (a domain counts once): the first vouch is
        blind or informed, so it may count; the second, informed by the first's reply, may not."""
        who = self.fuzz.again(who, claim)
        self.fuzz.witness(who, claim, dispute=False, evidence=1)
        self.fuzz.witness(who, claim, dispute=False, evidence=1)

    @rule(who=sel, claim=claims)
    @step
    def dispute(self, who: int, claim: int) -> None:
        self.fuzz.witness(who, claim, dispute=True)

    @rule(who=sel, claim=claims)
    @step
    def show(self, who: int, claim: int) -> None:
        self.fuzz.show(who, claim)

    @rule(who=sel, first=claims, second=claims)
    @step
    def recall(self, who: int, first: int, second: int) -> None:
        self.fuzz.recall(who, [first] if first == second else [first, second])

    @rule(who=sel, claim=claims, wide=st.booleans())
    @step
    def context(self, who: int, claim: int, wide: bool) -> None:
        self.fuzz.context(who, claim, wide)

    # -- the operator -------------------------------------------------------------

    @rule(claim=claims)
    @step
    def promote(self, claim: int) -> None:
        self.fuzz.curate("promote", claim)

    @rule(claim=claims)
    @step
    def retire(self, claim: int) -> None:
        self.fuzz.curate("retire", claim)

    @rule(claim=claims)
    @step
    def unretire(self, claim: int) -> None:
        self.fuzz.curate("unretire", claim)

    @rule(who=sel)
    @step
    def revoke(self, who: int) -> None:
        self.fuzz.revoke(who, team_agent=False)

    # -- agents' lives ---------------------------------------------------------------
    # Steps that start or end processes are one rule each (a few percent of the steps) and stay within
    # the example's budget; past it they do nothing.

    @rule(kind=st.integers(0, 4), who=sel, child=sel)
    @step
    def lifecycle(self, kind: int, who: int, child: int) -> None:
        if self.costly <= 0:
            return
        self._spend()
        if kind == 0:
            self.fuzz.spawn(who, child)
        elif kind == 1:
            self.fuzz.end(who, "exit")
        elif kind == 2:
            self.fuzz.end(who, "restart")
        elif kind == 3:
            self.fuzz.end(who, "kill")
        else:
            self.fuzz.kill_during(who, 1 + child % 2)

    @rule(how=st.tuples(st.integers(0, 2), sel, st.integers(1, 3), st.booleans()))
    @step
    def broker_restart(self, how: tuple[int, int, int, bool]) -> None:
        """A policy change, a SIGKILL (a write in flight or not), or a team agent's session revoked for good."""
        kind, who, quorum, blind = how
        if not self.heavy or self.costly <= 0:
            return
        self._spend()
        self.heavy = False
        if kind == 0:
            self.fuzz.change_policy(quorum, blind)
        elif kind == 1:
            self.fuzz.kill_broker(who, quorum - 1)
        else:
            self.fuzz.revoke(who, team_agent=True)

    # -- locks ---------------------------------------------------------------------------

    @rule(who=sel, resources=mask, shared=st.booleans())
    @step
    def acquire(self, who: int, resources: int, shared: bool) -> None:
        self.fuzz.acquire(who, resources, shared, wait=False)

    @rule(who=sel, resources=mask, shared=st.booleans())
    @step
    def acquire_wait(self, who: int, resources: int, shared: bool) -> None:
        self.fuzz.acquire(who, resources, shared, wait=True)

    @rule(who=sel, resources=mask)
    @step
    def release(self, who: int, resources: int) -> None:
        self.fuzz.release(who, resources)

    @rule(which=sel)
    @step
    def force_release(self, which: int) -> None:
        self.fuzz.force_release(which)

    # -- mail -----------------------------------------------------------------------------

    @rule(target=messages, who=sel, to=sel)
    @step
    def send(self, who: int, to: int) -> Any:
        made = self.fuzz.send(who, to)
        return multiple() if made is None else made

    @rule(target=messages, who=sel, to=sel, message=messages)
    @step
    def reply(self, who: int, to: int, message: int) -> Any:
        made = self.fuzz.send(who, to, thread_of=message)
        return multiple() if made is None else made

    @rule(target=messages, to=sel)
    @step
    def operator_send(self, to: int) -> Any:
        made = self.fuzz.operator_send(to)
        return multiple() if made is None else made

    @rule(who=sel, ack=st.integers(0, 255))
    @step
    def inbox(self, who: int, ack: int) -> None:
        self.fuzz.inbox(who, ack)

    @rule(who=sel, message=messages)
    @step
    def ack_any(self, who: int, message: int) -> None:
        self.fuzz.ack_foreign(who, message)

    @rule(who=sel, message=messages)
    @step
    def read_thread(self, who: int, message: int) -> None:
        self.fuzz.read_thread(who, message)

    # -- attacks on identity ----------------------------------------------------------------

    @rule(who=sel, op=sel, name=sel)
    @step
    def forged_field(self, who: int, op: int, name: int) -> None:
        self.fuzz.forge(who, op, name)

    @rule(which=sel)
    @step
    def replayed_ticket(self, which: int) -> None:
        self.fuzz.replay(which)

    @rule(kind=st.booleans(), who=sel, victim=sel)
    @step
    def ticket_probe(self, kind: bool, who: int, victim: int) -> None:
        """A process in an agent's tree presents a stolen ticket, or none (posing as the operator)."""
        if self.costly <= 0:
            return
        self._spend()
        if kind:
            self.fuzz.steal(who, victim)
        else:
            self.fuzz.drop_ticket(who)

    # -- after every step ---------------------------------------------------------------------

    @invariant()
    @step
    def the_world_agrees_with_the_rules(self) -> None:
        self.steps += 1
        self.fuzz.light_check()
        if self.steps % DEEP_EVERY == 0:
            self.fuzz.deep_check(f"after step {self.steps}")

    def teardown(self) -> None:
        self.fuzz.finish_example()
