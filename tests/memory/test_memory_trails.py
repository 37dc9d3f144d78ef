"""A trail's order (pure): the event log's seq decides, not the clock; exposures (no events yet) fit between."""

from __future__ import annotations

from memory.trails import Step, in_order
from store.events import Event


def event(seq: int, at: str) -> Event:
    return Event(seq, at, "memory.x", "alice:a1", "1", {}, "")


def step(action: str, at: str, *, seq: int | None = None, exposure: int = 0) -> Step:
    return Step(at, "alice:a1", action, 1, "unverified", seq=seq, order=(0, 2, exposure))


def test_rows_with_events_follow_the_log_even_when_the_clock_stepped_back() -> None:
    """The wall clock went back between two events: by time the later event would come first."""
    log = [event(1, "10:00:05"), event(2, "10:00:01"), event(3, "10:00:06")]
    rows = [step("third", "10:00:06", seq=3), step("second", "10:00:01", seq=2), step("first", "10:00:05", seq=1)]
    assert [s.action for s in in_order(rows, log, ())] == ["first", "second", "third"]
    # Control: the same rows sorted by their timestamps alone come out wrong.
    assert [s.action for s in sorted(rows, key=lambda s: s.at)] == ["second", "first", "third"]


def test_an_exposure_goes_after_the_last_event_written_by_its_time_and_a_tie_goes_to_the_event() -> None:
    log = [event(1, "10:00:01"), event(2, "10:00:03"), event(3, "10:00:05")]
    rows = [
        step("e1", "10:00:01", seq=1), step("e2", "10:00:03", seq=2), step("e3", "10:00:05", seq=3),
        step("shown at a tie", "10:00:03", exposure=7),
        step("shown between", "10:00:04", exposure=8),
        step("shown first", "10:00:00", exposure=6),
    ]
    assert [s.action for s in in_order(rows, log, ())] == ["shown first", "e1", "e2", "shown at a tie", "shown between", "e3"]


def test_an_exposure_never_slips_before_an_event_a_stepped_back_clock_stamped_earlier() -> None:
    """Event 2's time is earlier than event 1's.  An exposure stamped between them is placed after the
    last event before the first one later than it -- never between 1 and 2 out of the log's order."""
    log = [event(1, "10:00:05"), event(2, "10:00:01"), event(3, "10:00:09")]
    rows = [step("e1", "10:00:05", seq=1), step("e2", "10:00:01", seq=2), step("e3", "10:00:09", seq=3), step("shown", "10:00:07", exposure=1)]
    assert [s.action for s in in_order(rows, log, ())] == ["e1", "e2", "shown", "e3"]


def test_rows_placed_by_their_job_keep_their_place() -> None:
    """A reply's exposure is placed after its job's last event (order = (seq, 1, id)), before anything merged there."""
    log = [event(1, "10:00:01"), event(2, "10:00:01")]
    reply = Step("10:00:01", "bob:b1", "shown", 1, "trusted", note="the reply to its corroboration", reply_to=1, order=(2, 1, 5))
    rows = [step("corroborated", "10:00:01", seq=1), step("tier", "10:00:01", seq=2), step("recall", "10:00:01", exposure=9)]
    assert [s.action for s in in_order(rows, log, [reply])] == ["corroborated", "tier", "shown", "recall"]
