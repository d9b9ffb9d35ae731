"""Seek on a live consumer instance against the embedded cluster: to an offset, to the earliest and the latest
message, what it rolls back, and the fields it refuses."""

from __future__ import annotations

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import InvalidInput
from gateway.service.seek import SeekOrder
from tests.support.consumer_support import Env, bodies
from tests.support.waiting import eventually

#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "solo:1,retry:1"


async def _collect(service: ConsumerService, group: str, instance: str, count: int) -> list[DeliveredMessage]:
    got: list[DeliveredMessage] = []

    async def enough() -> bool:
        answer = await service.poll(group, instance, timeout=0.2)
        got.extend(answer)
        if answer:
            await service.commit(group, instance, [m.token for m in answer])
        return len(got) >= count

    await eventually(enough, what=f"{count} messages")
    return got


async def test_seek_to_an_offset_earliest_and_latest(env: Env) -> None:
    sent = bodies("seek", 6)
    results = await env.publish("solo", sent)
    key = results[0].partition_key
    service = await env.service()
    instance = (
        await service.create("g-seek", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await _collect(service, "g-seek", instance, 6)
    assert [m.message.body for m in first] == sent
    # back to the fourth message
    fourth = SeekOrder("offsets", offsets={key: results[3].append_offset})
    [moved] = await service.seek("g-seek", instance, fourth)
    assert (moved.partition_key, moved.curr_offset) == (key, results[3].append_offset)
    again = await _collect(service, "g-seek", instance, 3)
    assert [m.message.body for m in again] == sent[3:]
    # to the oldest message kept
    [moved] = await service.seek("g-seek", instance, SeekOrder("earliest"))
    assert moved.curr_offset == results[0].append_offset
    assert [m.message.body for m in await _collect(service, "g-seek", instance, 6)] == sent
    # to the end: only what is published afterwards comes
    [moved] = await service.seek("g-seek", instance, SeekOrder("latest", partitions=[key]))
    assert moved.curr_offset == moved.max_offset
    later = await env.publish("solo", [b"after"])
    assert [m.message.body for m in await _collect(service, "g-seek", instance, 1)] == [b"after"]
    assert later[0].append_offset == moved.max_offset


async def test_seek_rolls_back_what_was_delivered_and_not_committed(env: Env) -> None:
    sent = bodies("rb", 4)
    results = await env.publish("solo", sent)
    service = await env.service()
    instance = (
        await service.create("g-seek-rb", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    got: list[DeliveredMessage] = []

    async def some() -> bool:
        got.extend(await service.poll("g-seek-rb", instance, max_messages=2, timeout=0.2))
        return len(got) >= 2

    await eventually(some, what="two messages")
    third = SeekOrder("offsets", offsets={results[1].partition_key: results[2].append_offset})
    await service.seek("g-seek-rb", instance, third)
    stale = await service.commit("g-seek-rb", instance, [m.token for m in got])
    assert sorted(stale.stale) == sorted(m.token for m in got) and stale.committed == 0
    assert [m.message.body for m in await _collect(service, "g-seek-rb", instance, 2)] == sent[2:]


async def test_seek_refuses_what_it_cannot_do(env: Env) -> None:
    service = await env.service(republisher=env.producer)
    spec = InstanceSpec({"solo": None}, start_position="earliest", retry_topic="retry")
    instance = (await service.create("g-seek-bad", spec)).instance_id
    await service.poll("g-seek-bad", instance, timeout=0.5)
    held = [p.partition_key for p in service.describe("g-seek-bad", instance).partitions]
    retry_key = next(k for k in held if ":retry:" in k)
    for position, options, field in (
        ("sideways", {}, "position"),
        ("offsets", {}, "offsets"),
        ("offsets", {"offsets": {"9:solo:0": 0}}, "offsets"),
        ("offsets", {"offsets": {retry_key: 0}}, "offsets"),
        ("earliest", {"offsets": {retry_key: 0}}, "offsets"),
        ("offsets", {"offsets": {"1:solo:0": -1}}, "offsets"),
    ):
        with pytest.raises(InvalidInput) as bad:
            await service.seek("g-seek-bad", instance, SeekOrder(position, **options))  # type: ignore[arg-type]
        assert bad.value.field == field, (position, options)
    # earliest without partitions moves the consumed topics only, not the retry topic
    moved = await service.seek("g-seek-bad", instance, SeekOrder("earliest"))
    assert [m.partition_key for m in moved] == [k for k in held if ":solo:" in k]
