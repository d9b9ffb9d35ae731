"""The partition cache: round-robin hand-out, wait periods, tokens, leaving, expiry (no I/O)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.tubemq.consumer.state import PartitionCache
from gateway.tubemq.wire.meta import BrokerInfo, Partition

BROKER = BrokerInfo(1, "127.0.0.1", 8123)


def part(pid: int, topic: str = "demo") -> Partition:
    return Partition(BROKER, topic, pid)


def filled(n: int) -> PartitionCache:
    cache = PartitionCache()
    for pid in range(n):
        assert cache.add(part(pid), curr_offset=28 * pid, max_offset=280)
    return cache


def test_hands_out_round_robin_and_never_twice() -> None:
    cache = filled(3)
    taken = [cache.select(0.0) for _ in range(3)]
    assert [s.partition.partition_id for s in taken if s] == [0, 1, 2]
    assert cache.select(0.0) is None
    assert cache.status() == "all partitions in use"
    first = taken[0]
    assert first is not None
    assert cache.release("1:demo:0", first.token, consumed=True, wait=0.0, now=0.0)
    again = cache.select(0.0)
    assert again is not None and again.partition.partition_id == 0
    assert again.last_consumed is True  # the previous outcome travels with the next fetch...
    assert cache.get("1:demo:0").last_consumed is False  # type: ignore[union-attr]  # ...and is reset


def test_released_partition_goes_to_the_back_of_the_queue() -> None:
    cache = filled(3)
    first = cache.select(0.0)
    assert first is not None
    cache.release(first.partition.partition_key, first.token, consumed=False, wait=0.0, now=0.0)
    order = []
    while (s := cache.select(0.0)) is not None:
        order.append(s.partition.partition_id)
    assert order == [1, 2, 0]


def test_wait_period_parks_a_partition() -> None:
    cache = filled(1)
    s = cache.select(10.0)
    assert s is not None
    cache.release("1:demo:0", s.token, consumed=False, wait=0.4, now=10.0)
    assert cache.select(10.1) is None
    assert cache.status() == "all partitions waiting"
    assert cache.next_ready_in(10.1) == pytest.approx(0.3)
    assert cache.select(10.4) is not None
    assert cache.next_ready_in(10.4) is None


def test_stale_token_changes_nothing() -> None:
    cache = filled(1)
    s = cache.select(0.0)
    assert s is not None
    assert not cache.release("1:demo:0", s.token + 1, consumed=True, wait=0.0, now=0.0)
    assert not cache.release("9:demo:0", s.token, consumed=True, wait=0.0, now=0.0)
    assert cache.is_in_use("1:demo:0", s.token)


def test_leaving_partition_is_not_handed_out_nor_requeued() -> None:
    cache = filled(2)
    s = cache.select(0.0)
    assert s is not None
    cache.leave(["1:demo:0", "1:demo:1"])
    assert cache.select(0.0) is None
    assert cache.any_in_use(["1:demo:0"])
    assert cache.release("1:demo:0", s.token, consumed=True, wait=0.0, now=0.0)
    assert not cache.any_in_use(["1:demo:0", "1:demo:1"])
    assert cache.select(0.0) is None
    assert cache.status() == "all partitions leaving"
    state = cache.remove("1:demo:0")
    assert state is not None and state.last_consumed is True
    assert len(cache) == 1


def test_unconfirmed_batches_expire_as_not_consumed() -> None:
    cache = filled(2)
    a = cache.select(0.0)
    b = cache.select(5.0)
    assert a is not None and b is not None
    assert cache.expire_unconfirmed(6.0, timeout=3.0) == ["1:demo:0"]
    assert not cache.is_in_use("1:demo:0", a.token)
    assert cache.is_in_use("1:demo:1", b.token)
    again = cache.select(6.0)
    assert again is not None and again.partition.partition_id == 0 and again.last_consumed is False


def test_membership_version_and_registration_memory() -> None:
    cache = PartitionCache()
    assert cache.status() == "no partition assigned"
    assert not cache.registered_before("1:demo:0")
    cache.add(part(0))
    assert not cache.add(part(0))
    assert cache.version == 1 and "1:demo:0" in cache
    cache.update_offsets("1:demo:0", 56, -1)
    cache.update_offsets("1:demo:0", -1, 84)
    state = cache.get("1:demo:0")
    assert state is not None and (state.curr_offset, state.max_offset) == (56, 84)
    cache.remove("1:demo:0")
    assert cache.remove("1:demo:0") is None
    assert cache.version == 2
    assert cache.registered_before("1:demo:0")
    other = Partition(BrokerInfo(2, "127.0.0.1", 8124), "demo", 0)
    cache.add(part(1))
    cache.add(other)
    assert cache.by_broker() == {BROKER: [part(1)], other.broker: [other]}
    assert "held=2" in repr(cache)


async def test_wait_changed_wakes_on_release_and_times_out() -> None:
    cache = filled(1)
    s = cache.select(0.0)
    assert s is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    await cache.wait_changed(0.05)
    assert loop.time() - started >= 0.04
    waiter = asyncio.create_task(cache.wait_changed(5.0))
    await asyncio.sleep(0)
    cache.release("1:demo:0", s.token, consumed=False, wait=0.0, now=0.0)
    await asyncio.wait_for(waiter, 1.0)
