"""What a commit promises when the instance that made it goes away: the broker confirms whole batches only,
so an instance deleted (or expired) with a batch partly committed moves the group's offset to the first
message it did not commit before it leaves; the next instance of the group starts there. Against the
embedded cluster over loopback."""

from __future__ import annotations

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from tests.support.consumer_support import Env, bodies, values

EARLIEST = InstanceSpec({"solo": None}, start_position="earliest")


async def poll_new(service: ConsumerService, group: str, most: int) -> tuple[str, list[DeliveredMessage]]:
    """A new instance of ``group`` on ``solo`` and its first poll of at most ``most`` messages."""
    instance = (await service.create(group, EARLIEST)).instance_id
    return instance, await service.poll(group, instance, max_messages=most, timeout=2.0)


@pytest.mark.parametrize("leave", ["delete", "expire", "stop"])
async def test_a_new_instance_starts_after_the_committed_messages(env: Env, leave: str) -> None:
    sent = bodies(f"kept-{leave}", 12, size=10)
    await env.publish("solo", sent)
    service = await env.service(lease=300.0)
    group = f"g-kept-{leave}"
    first, got = await poll_new(service, group, 5)
    assert values(got) == sent[:5]
    assert service.describe(group, first).buffered == 7  # one batch of 12, 7 not handed out
    result = await service.commit(group, first, [m.token for m in got])
    assert (result.committed, result.pending, result.awaiting_batch) == (5, 0, 5)
    if leave == "delete":
        await service.delete(group, first)
    elif leave == "expire":
        service.lease = 0.0
        await service.reap()
        service.lease = 300.0
    else:  # the gateway stops; another one serves the group
        await service.close()
        service = await env.service()

    _, again = await poll_new(service, group, 100)
    assert values(again) == sent[5:]
    assert [m.attempt for m in again] == [1] * 7
    assert again[0].offset == got[4].offset + 28  # type: ignore[operator]


@pytest.mark.parametrize(
    ("committed", "comes_again"),
    [
        ((0, 1, 3), 2),  # message 3 was committed, but 2 was not: both come again
        ((), 0),  # nothing committed: the whole batch comes again
        ((1, 2), 0),
    ],
)
async def test_only_a_committed_head_is_kept(env: Env, committed: tuple[int, ...], comes_again: int) -> None:
    sent = bodies(f"head-{len(committed)}", 6, size=10)
    await env.publish("solo", sent)
    service = await env.service()
    group = f"g-head-{'-'.join(map(str, committed))}"
    first, got = await poll_new(service, group, 5)
    assert values(got) == sent[:5]
    result = await service.commit(group, first, [got[i].token for i in committed])
    assert result.committed == len(committed)
    await service.delete(group, first)
    _, again = await poll_new(service, group, 100)
    assert values(again) == sent[comes_again:]


async def test_on_a_shared_store_no_message_not_committed_is_lost(env: Env) -> None:
    """``demo``'s 8 partitions share one store: a partition's messages are not next to each other in the
    index, the offset is a bound below the first message not committed and every such message comes again."""
    for i in range(8):
        await env.publish("demo", bodies(f"shared-{i}", 6, size=10), partition=i)
    await env.publish("demo", bodies("shared-3b", 6, size=10), partition=3)
    service = await env.service()
    spec = InstanceSpec({"demo": None}, start_position="earliest")
    first = (await service.create("g-shared", spec)).instance_id
    got: list[DeliveredMessage] = []
    while len(got) < 30:
        got += await service.poll("g-shared", first, max_messages=3, timeout=2.0)
    committed = [m for m in got if m.message.index % 2 == 0]
    await service.commit("g-shared", first, [m.token for m in committed])
    await service.delete("g-shared", first)

    everything = {b for i in range(8) for b in bodies(f"shared-{i}", 6, size=10)}
    everything |= set(bodies("shared-3b", 6, size=10))
    second = (await service.create("g-shared", spec)).instance_id
    received: set[bytes] = set()
    for _ in range(40):
        batch = await service.poll("g-shared", second, max_messages=100, timeout=0.3)
        received |= set(values(batch))
        await service.commit("g-shared", second, None)
    assert everything - set(values(committed)) <= received
