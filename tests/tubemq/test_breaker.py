"""Broker shielding rules, driven by a fake clock (no sleeping)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tubemq.net.breaker import BreakerState, BreakerTransition, BrokerBreaker, ShieldReason
from tests.support.waiting import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make(clock: ManualClock, **kwargs: float) -> tuple[BrokerBreaker, list[BreakerTransition]]:
    changes: list[BreakerTransition] = []
    breaker = BrokerBreaker(clock=clock, on_change=changes.append, **kwargs)  # type: ignore[arg-type]
    return breaker, changes


def fail(breaker: BrokerBreaker, broker_id: int, times: int) -> None:
    for _ in range(times):
        breaker.begin_attempt(broker_id)
        breaker.record_failure(broker_id)


def test_unknown_brokers_are_available(clock: ManualClock) -> None:
    breaker, changes = make(clock)
    assert breaker.is_available(7)
    assert changes == []


def test_503_shields_for_the_unavailable_cooldown_then_one_trial(clock: ManualClock) -> None:
    breaker, changes = make(clock, unavailable_cooldown=50.0)
    breaker.track([1, 2])
    breaker.begin_attempt(1)
    breaker.record_unavailable(1)
    assert not breaker.is_available(1)
    assert breaker.is_available(2)
    assert changes == [BreakerTransition(1, BreakerState.CLOSED, BreakerState.OPEN, ShieldReason.UNAVAILABLE)]
    clock.advance(49.9)
    assert not breaker.is_available(1)
    clock.advance(0.2)
    assert breaker.is_available(1)
    assert changes[-1].new is BreakerState.HALF_OPEN
    breaker.begin_attempt(1)
    assert not breaker.is_available(1), "only one trial send while half-open"
    breaker.record_success(1)
    assert breaker.is_available(1)
    assert changes[-1] == BreakerTransition(1, BreakerState.HALF_OPEN, BreakerState.CLOSED, None)


def test_consecutive_failures_shield_one_of_two_brokers(clock: ManualClock) -> None:
    breaker, changes = make(clock, failure_threshold=3, failure_window=10.0, failure_cooldown=5.0)
    breaker.track([1, 2])
    fail(breaker, 2, 2)
    assert breaker.is_available(2)
    fail(breaker, 2, 1)
    assert not breaker.is_available(2)
    assert changes == [BreakerTransition(2, BreakerState.CLOSED, BreakerState.OPEN, ShieldReason.FAILURES)]
    # the other broker fails too, but shielding both would leave nothing: the cap is one of two
    fail(breaker, 1, 10)
    assert breaker.is_available(1)


def test_failures_outside_the_window_do_not_add_up(clock: ManualClock) -> None:
    breaker, _ = make(clock, failure_threshold=3, failure_window=10.0)
    breaker.track([1, 2])
    fail(breaker, 1, 2)
    clock.advance(11)
    fail(breaker, 1, 2)
    assert breaker.is_available(1)
    fail(breaker, 1, 1)
    assert not breaker.is_available(1)


def test_an_answer_resets_the_consecutive_count(clock: ManualClock) -> None:
    breaker, _ = make(clock, failure_threshold=3)
    breaker.track([1, 2])
    fail(breaker, 1, 2)
    breaker.record_rejected(1)
    fail(breaker, 1, 2)
    assert breaker.is_available(1)
    breaker.record_success(1)
    fail(breaker, 1, 2)
    assert breaker.is_available(1)


def test_failed_trial_reopens_and_trial_timeout_frees_the_slot(clock: ManualClock) -> None:
    breaker, changes = make(clock, failure_threshold=1, failure_cooldown=5.0, trial_timeout=2.0)
    breaker.track([1, 2])
    fail(breaker, 1, 1)
    clock.advance(5)
    assert breaker.is_available(1)
    fail(breaker, 1, 1)
    assert not breaker.is_available(1)
    assert changes[-1] == BreakerTransition(
        1, BreakerState.HALF_OPEN, BreakerState.OPEN, ShieldReason.FAILURES
    )
    clock.advance(5)
    breaker.begin_attempt(1)  # a trial that never reports back
    assert not breaker.is_available(1)
    clock.advance(2)
    assert breaker.is_available(1)


def test_late_failures_of_sends_started_before_opening_do_not_extend(clock: ManualClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, failure_cooldown=5.0)
    breaker.track([1, 2])
    fail(breaker, 1, 1)
    clock.advance(4)
    breaker.record_failure(1)
    clock.advance(1)
    assert breaker.is_available(1)


def test_503_in_half_open_reopens_for_the_unavailable_cooldown(clock: ManualClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, failure_cooldown=1.0, unavailable_cooldown=50.0)
    breaker.track([1, 2])
    fail(breaker, 1, 1)
    clock.advance(1)
    breaker.begin_attempt(1)
    breaker.record_unavailable(1)
    clock.advance(49)
    assert not breaker.is_available(1)
    clock.advance(1)
    assert breaker.is_available(1)


def test_quality_rule_needs_at_least_four_brokers(clock: ManualClock) -> None:
    breaker, _ = make(clock, check_interval=30.0, failure_threshold=1000)
    breaker.track([1, 2, 3])
    for _ in range(100):
        for bid in (1, 2, 3):
            breaker.begin_attempt(bid)
            if bid != 3:
                breaker.record_success(bid)
    clock.advance(30)
    assert all(breaker.is_available(b) for b in (1, 2, 3))


def test_quality_rule_shields_the_worst_of_seven(clock: ManualClock) -> None:
    breaker, changes = make(clock, check_interval=30.0, quality_cooldown=30.0, failure_threshold=1000)
    brokers = list(range(1, 8))
    breaker.track(brokers)
    for _ in range(100):
        for bid in brokers:
            breaker.begin_attempt(bid)
            if bid != 4:
                breaker.record_success(bid)
    clock.advance(30)
    # round(7 * 0.15) = 1 broker may be held; broker 4 answered nothing out of 100 sends
    assert not breaker.is_available(4)
    assert [b for b in brokers if not breaker.is_available(b)] == [4]
    assert changes == [BreakerTransition(4, BreakerState.CLOSED, BreakerState.OPEN, ShieldReason.QUALITY)]
    clock.advance(30)
    assert breaker.is_available(4)


def test_quality_rule_ignores_brokers_with_few_sends(clock: ManualClock) -> None:
    breaker, _ = make(clock, check_interval=30.0, failure_threshold=1000)
    brokers = list(range(1, 8))
    breaker.track(brokers)
    for bid in brokers:
        for _ in range(100 if bid != 4 else 20):
            breaker.begin_attempt(bid)
            if bid != 4:
                breaker.record_success(bid)
    clock.advance(30)
    # 20 sends * 0.1 = 2, not > 2: too little evidence
    assert breaker.is_available(4)


def test_track_drops_removed_brokers_and_snapshot_reports(clock: ManualClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, failure_cooldown=5.0)
    breaker.track([1, 2, 3])
    breaker.begin_attempt(1)
    breaker.record_success(1)
    fail(breaker, 2, 1)
    clock.advance(2)
    snap = {h.broker_id: h for h in breaker.snapshot()}
    assert snap[1].sends == 1 and snap[1].successes == 1 and snap[1].state is BreakerState.CLOSED
    assert snap[2].state is BreakerState.OPEN and snap[2].reason is ShieldReason.FAILURES
    assert snap[2].open_for == pytest.approx(3.0)
    assert "2:open:failures" in repr(breaker)
    breaker.track([1])
    assert [h.broker_id for h in breaker.snapshot()] == [1]


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BrokerBreaker(failure_threshold=0)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["track", "failure", "unavailable", "success", "rejected", "attempt", "wait"]),
        st.integers(1, 3),
        st.sampled_from([0.5, 11.0, 60.0]),  # within, past the failure cooldown, past every cooldown
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(_OPS)
def test_all_closed_and_the_shield_cap_agree_with_the_snapshot(ops: list[tuple[str, int, float]]) -> None:
    clock = ManualClock()
    breaker = BrokerBreaker(clock=clock, failure_threshold=2, max_shielded_share=0.5)
    breaker.track([1, 2, 3])
    for op, broker_id, seconds in ops:
        if op == "track":
            breaker.track(range(1, broker_id + 1))
        elif op == "failure":
            breaker.record_failure(broker_id)
        elif op == "unavailable":
            breaker.record_unavailable(broker_id)
        elif op == "success":
            breaker.record_success(broker_id)
        elif op == "rejected":
            breaker.record_rejected(broker_id)
        elif op == "attempt":
            breaker.begin_attempt(broker_id)
        else:
            clock.advance(seconds)
        closed = breaker.all_closed()
        states = [h.state for h in breaker.snapshot()]
        assert closed == all(s is BreakerState.CLOSED for s in states)
        if closed:
            assert all(breaker.is_available(b) for b in range(1, 6))
        for h in breaker.snapshot():
            if h.state is BreakerState.OPEN:
                assert h.open_for > 0, "a cooldown that is over must have turned the broker HALF_OPEN"
