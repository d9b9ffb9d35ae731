"""Per-caller quotas (no I/O): token-bucket refill maths on an injected clock, callers kept apart, the
instance cap, bounded bucket state, and how limits come from the settings."""

from __future__ import annotations

import contextvars

import pytest

from gateway.config import Settings
from gateway.runtime import build_quotas
from gateway.service.errors import RateLimited
from gateway.service.principal import ANONYMOUS, Principal, principal_scope
from gateway.service.quotas import Quotas, RateLimits, caller_key
from tests.support.waiting import ManualClock

ALICE = Principal("alice", "api_key")
BOB = Principal("bob", "api_key")


def as_caller(principal: Principal, address: str | None, action: object) -> object:
    """Run ``action()`` as ``principal`` from ``address``, in a context of its own (as a request is)."""

    def run() -> object:
        with principal_scope(principal, address):
            return action()  # type: ignore[operator]

    return contextvars.copy_context().run(run)


def refused(action: object) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        action()  # type: ignore[operator]
    return caught.value


def test_a_bucket_allows_its_burst_then_refills_at_the_rate() -> None:
    clock = ManualClock()
    quotas = Quotas(RateLimits(publish_messages_per_second=10, burst_seconds=2), clock=clock)
    with principal_scope(ALICE):
        for _ in range(4):
            quotas.charge_publish(5, 100)  # 20 = 10/s x 2 s of burst
        error = refused(lambda: quotas.charge_publish(1, 1))
        assert error.retry_after == pytest.approx(0.1)  # one message comes back every 0.1 s
        assert error.quota.name == "messages" and error.quota.quota == 20 and error.quota.window == 2
        assert error.quota.remaining == 0
        assert "alice" in error.message and "10 messages per second" in error.message
        clock.advance(0.5)  # five messages refilled
        quotas.charge_publish(5, 1)
        refused(lambda: quotas.charge_publish(1, 1))
        clock.advance(60)  # a long pause fills the bucket up to its burst, not beyond
        quotas.charge_publish(20, 1)
        assert refused(lambda: quotas.charge_publish(1, 1)).retry_after == pytest.approx(0.1)


def test_a_refused_request_spends_nothing() -> None:
    clock = ManualClock()
    quotas = Quotas(RateLimits(publish_messages_per_second=10, burst_seconds=1), clock=clock)
    with principal_scope(ALICE):
        quotas.charge_publish(8, 1)
        error = refused(lambda: quotas.charge_publish(5, 1))  # 2 left, 5 asked: wait for 3 more
        assert error.retry_after == pytest.approx(0.3)
        assert error.quota.remaining == 2
        quotas.charge_publish(2, 1)  # the 2 are still there


def test_bytes_have_their_own_bucket_and_the_longer_wait_is_reported() -> None:
    clock = ManualClock()
    limits = RateLimits(publish_messages_per_second=1000, publish_bytes_per_second=1000, burst_seconds=1)
    quotas = Quotas(limits, clock=clock)
    with principal_scope(ALICE):
        quotas.charge_publish(1, 900)
        error = refused(lambda: quotas.charge_publish(1, 600))
        assert error.quota.name == "bytes" and error.quota.unit == "content-bytes"
        assert error.retry_after == pytest.approx(0.5)
        assert error.quota.remaining == 100
        quotas.charge_publish(999, 100)  # messages were not spent by the refusal


def test_a_request_above_the_burst_passes_on_a_full_bucket_and_leaves_debt() -> None:
    clock = ManualClock()
    quotas = Quotas(RateLimits(publish_bytes_per_second=100, burst_seconds=1), clock=clock)
    with principal_scope(ALICE):
        quotas.charge_publish(1, 250)  # never refused for good: the bucket was full
        error = refused(lambda: quotas.charge_publish(1, 1))
        assert error.retry_after == pytest.approx(1.51)  # 150 of debt, then 1 byte
        clock.advance(2.5)  # back to full (100), not to 100 + the debt's worth
        quotas.charge_publish(1, 250)
        refused(lambda: quotas.charge_publish(1, 1))


def test_principals_and_anonymous_addresses_have_separate_buckets() -> None:
    clock = ManualClock()
    quotas = Quotas(RateLimits(publish_messages_per_second=1, burst_seconds=1), clock=clock)

    def spend() -> None:
        quotas.charge_publish(1, 1)

    as_caller(ALICE, "127.0.0.1", spend)
    with pytest.raises(RateLimited):
        as_caller(ALICE, "::1", spend)  # a principal is one caller wherever it comes from
    as_caller(BOB, "127.0.0.1", spend)
    as_caller(ANONYMOUS, "127.0.0.1", spend)
    as_caller(ANONYMOUS, "::1", spend)
    with pytest.raises(RateLimited) as caught:
        as_caller(ANONYMOUS, "::1", spend)
    assert "client ::1" in caught.value.message
    assert as_caller(ANONYMOUS, "::1", caller_key) == "anonymous@::1"
    assert as_caller(ALICE, "::1", caller_key) == "api_key:alice"
    assert as_caller(ANONYMOUS, None, caller_key) == "anonymous"


def test_overrides_by_principal_name_and_unlimited() -> None:
    clock = ManualClock()
    quotas = Quotas(
        RateLimits(publish_messages_per_second=1, burst_seconds=1, max_instances=1),
        {
            "api_key:alice": RateLimits(publish_messages_per_second=0, max_instances=0),
            "anonymous": RateLimits(),
        },
        clock=clock,
    )
    with principal_scope(ALICE):
        for _ in range(1000):
            quotas.charge_publish(1000, 10**9)
        assert [quotas.claim_instance(1.0) for _ in range(3)] == [None, None, None]
    as_caller(ANONYMOUS, "127.0.0.1", lambda: [quotas.charge_publish(1000, 1) for _ in range(5)])
    with principal_scope(BOB):
        quotas.charge_publish(1, 1)
        refused(lambda: quotas.charge_publish(1, 1))


def test_nothing_is_tracked_when_everything_is_unlimited() -> None:
    quotas = Quotas(RateLimits(), clock=ManualClock())
    assert not quotas.limits_publish and not quotas.limits_instances
    with principal_scope(ALICE):
        quotas.charge_publish(10**6, 10**12)
        assert quotas.claim_instance(1.0) is None
    assert quotas.tracked_callers == 0


def test_instance_cap_per_caller_and_release() -> None:
    quotas = Quotas(RateLimits(max_instances=2), clock=ManualClock())
    with principal_scope(ALICE):
        keys = [quotas.claim_instance(30.0), quotas.claim_instance(30.0)]
        assert keys == ["api_key:alice", "api_key:alice"]
        error = refused(lambda: quotas.claim_instance(30.0))
        assert error.retry_after == 30.0
        assert error.quota.name == "instances" and error.quota.quota == 2 and error.quota.window is None
        assert "maximum of 2 consumer instances" in error.message
    with principal_scope(BOB):
        assert quotas.claim_instance(30.0) == "api_key:bob"
    quotas.release_instance(keys[0])
    assert quotas.instances_held("api_key:alice") == 1
    with principal_scope(ALICE):
        assert quotas.claim_instance(30.0) == "api_key:alice"
    quotas.release_instance(None)
    for key in ("api_key:alice", "api_key:alice", "api_key:bob"):
        quotas.release_instance(key)
    assert quotas.instances_held("api_key:alice") == 0 and quotas.instances_held("api_key:bob") == 0


def test_bucket_state_is_bounded_and_full_buckets_are_dropped() -> None:
    clock = ManualClock()
    quotas = Quotas(RateLimits(publish_messages_per_second=10, burst_seconds=1), max_callers=3, clock=clock)
    for i in range(10):
        as_caller(ANONYMOUS, f"client-{i}", lambda: quotas.charge_publish(10, 1))
    assert quotas.tracked_callers == 3  # the least recently used were dropped beyond max_callers
    clock.advance(5)  # everyone is full again: equal to a fresh bucket, so dropped as new callers come
    as_caller(ANONYMOUS, "client-new", lambda: quotas.charge_publish(10, 1))
    assert quotas.tracked_callers == 1
    with pytest.raises(RateLimited):  # a kept bucket still remembers it is empty
        as_caller(ANONYMOUS, "client-new", lambda: quotas.charge_publish(1, 1))


def test_limits_come_from_settings_with_overrides_inheriting_defaults() -> None:
    settings = Settings(
        rate_limits={
            "publish_messages_per_second": 50,
            "publish_bytes_per_second": 0,
            "burst_seconds": 3,
            "max_instances_per_principal": 7,
            "overrides": {
                "api_key:alice": {"publish_messages_per_second": 500},
                "api_key:bob": {"max_instances_per_principal": 0},
            },
        }
    )
    quotas = build_quotas(settings)
    assert quotas.default == RateLimits(50, 0, 3, 7)
    assert quotas.limits_for(ALICE) == RateLimits(500, 0, 3, 7)
    assert quotas.limits_for(BOB) == RateLimits(50, 0, 3, 0)
    defaults = build_quotas(Settings()).default  # generous: nothing existing is limited in practice
    assert defaults.publish_messages_per_second and defaults.publish_messages_per_second >= 100_000
    assert defaults.max_instances == 100


def test_settings_refuse_unknown_override_fields() -> None:
    with pytest.raises(ValueError, match="publish_messages_per_secnd"):
        Settings(rate_limits={"overrides": {"alice": {"publish_messages_per_secnd": 1}}})
