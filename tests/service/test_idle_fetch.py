"""Idle long polls cost the broker little: empty fetches back off per partition (bounded, reset by data) and
the polls of one instance share one fetch loop. Counted on the embedded broker (GetMessage requests)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.tubemq.consumer.state import empty_fetch_wait
from tests.support.consumer_support import FAST_CONSUMER, Env
from tests.support.waiting import eventually

BASE = 0.05
CAP = 0.4
IDLE = 2.0
PARTITIONS = 8


def test_the_wait_doubles_from_the_base_up_to_the_cap() -> None:
    assert [empty_fetch_wait(n, BASE, CAP) for n in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    assert empty_fetch_wait(10_000, BASE, CAP) == CAP  # no overflow however long it stays idle
    assert empty_fetch_wait(3, BASE, 0.01) == BASE  # a cap below the base means no growth
    assert empty_fetch_wait(3, 0.0, CAP) == 0.0


def most_fetches(seconds: float) -> int:
    """The most GetMessage requests one partition can get in ``seconds`` under the schedule, counted from
    a partition that was never empty: one at once, then one after each wait."""
    fetches, elapsed, streak = 1, 0.0, 0
    while True:
        elapsed += empty_fetch_wait(streak, BASE, CAP)
        if elapsed > seconds:
            return fetches
        fetches += 1
        streak += 1


async def idle_service(env: Env) -> tuple[ConsumerService, str]:
    config = replace(FAST_CONSUMER, not_found_wait=BASE, not_found_max_wait=CAP)
    service = await env.service(consumer_config=config)
    info = await service.create("g-idle", InstanceSpec({"demo": None}))

    async def assigned() -> bool:
        await service.poll("g-idle", info.instance_id, timeout=0.05)
        return len(service.describe("g-idle", info.instance_id).partitions) == PARTITIONS

    await eventually(assigned, what="all partitions assigned")
    return service, info.instance_id


async def test_an_idle_poll_backs_off_and_the_next_poll_keeps_the_backoff(env: Env) -> None:
    service, instance_id = await idle_service(env)
    broker = env.cluster.broker(1)
    before = broker.get_requests
    assert await service.poll("g-idle", instance_id, timeout=IDLE) == []
    first = broker.get_requests - before
    # Without backoff every partition would be fetched every BASE seconds: IDLE / BASE = 40 times each.
    assert 0 < first <= PARTITIONS * most_fetches(IDLE), first

    before = broker.get_requests
    assert await service.poll("g-idle", instance_id, timeout=IDLE) == []
    second = broker.get_requests - before
    # The partitions stay backed off across polls: at most one fetch per CAP each (+1 at the edges).
    assert second <= PARTITIONS * (int(IDLE / CAP) + 1), second


async def test_data_resets_the_backoff(env: Env) -> None:
    service, instance_id = await idle_service(env)
    assert await service.poll("g-idle", instance_id, timeout=IDLE) == []  # every partition backed off
    instance = service.instance("g-idle", instance_id)
    states = instance.consumer._ctx.cache.held()
    assert all(s.empty_fetches > 0 for s in states)
    sent = await env.publish("demo", [b"wake up"])
    key = f"{sent[0].broker_id}:demo:{sent[0].partition_id}"
    got = await service.poll("g-idle", instance_id, timeout=10.0)
    assert [m.message.body for m in got] == [b"wake up"]
    assert next(s for s in states if s.partition.partition_key == key).empty_fetches == 0


async def test_polls_of_one_instance_share_one_fetch_loop(env: Env) -> None:
    service, instance_id = await idle_service(env)
    instance = service.instance("g-idle", instance_id)
    # A poll abandoned by its client (cancelled) leaves its fetch running; the next poll joins it.
    first = asyncio.create_task(service.poll("g-idle", instance_id, timeout=IDLE))
    await eventually(lambda: _running(instance.fetching), what="a fetch in flight")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(service.poll("g-idle", instance_id, timeout=IDLE))
    await asyncio.sleep(0.1)
    assert instance.fetching == 1
    assert await second == []


async def _running(count: int) -> bool:
    return count > 0
