"""Fetching ahead (gateway.service.prefetch) against the embedded cluster over loopback: a tight poll loop
finds its batches fetched ahead (counted in broker fetches a poll had to start, not in time), for polls and
stream cursors; a batch fetched ahead is delivered only when asked for, and commits, seeks, nacks,
rebalances, deletes and lease expiry leave it whole for the next delivery (attempt 1, nothing lost, nothing
twice); a poll with messages in hand answers them without waiting for a fetch ahead on its way; the
instance's and the worker's caps bound what is held."""

from __future__ import annotations

import asyncio

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.instance import ConsumerInstance
from gateway.service.seek import SeekOrder
from gateway.tubemq.consumer.events import FetchOutcome
from gateway.tubemq.events import EventBus
from tests.support.consumer_support import Env, values
from tests.support.waiting import eventually

#: partitions of ``demo``; each gets its own messages, so that one fetch brings one partition's batch
PARTITIONS = 8
PER_PARTITION = 10


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "demo:8,solo:1,retry:1"


async def fill(env: Env, prefix: str, per: int = PER_PARTITION) -> list[bytes]:
    """``per`` distinct messages in each partition of ``demo``; all of them, partition by partition."""
    sent: list[bytes] = []
    for partition in range(PARTITIONS):
        batch = [f"{prefix}-{partition}-{i}".encode() for i in range(per)]
        await env.publish("demo", batch, partition=partition)
        sent += batch
    return sent


async def create(service: ConsumerService, group: str, **spec: object) -> tuple[str, ConsumerInstance]:
    info = await service.create(group, InstanceSpec({"demo": None}, start_position="earliest", **spec))  # type: ignore[arg-type]
    return info.instance_id, service.instance(group, info.instance_id)


def in_order(got: list[DeliveredMessage]) -> bool:
    """Each partition's messages in publish order."""
    by_partition: dict[str, list[int]] = {}
    for message in got:
        _, partition, i = message.message.body.decode().rsplit("-", 2)
        by_partition.setdefault(partition, []).append(int(i))
    return all(seq == sorted(seq) for seq in by_partition.values())


async def poll_all(
    service: ConsumerService, group: str, instance_id: str, want: int
) -> list[DeliveredMessage]:
    """Poll one batch's worth at a time (auto-commit instances) until ``want`` messages came."""
    got: list[DeliveredMessage] = []
    while len(got) < want:
        answer = await service.poll(group, instance_id, max_messages=PER_PARTITION, timeout=3.0)
        assert answer, f"nothing more after {len(got)} of {want}"
        got += answer
    return got


@pytest.mark.parametrize("prefetch", [True, False])
async def test_a_tight_poll_loop_finds_its_batches_fetched_ahead(env: Env, prefetch: bool) -> None:
    sent = await fill(env, "tight")
    service = await env.service(prefetch_bytes=2**20 if prefetch else 0)
    instance_id, instance = await create(service, "g-tight", auto_commit=True)
    got = await poll_all(service, "g-tight", instance_id, len(sent))
    assert sorted(values(got)) == sorted(sent) and len(got) == len(sent)
    assert in_order(got)
    polls = PARTITIONS  # one partition's batch per poll
    if prefetch:
        # only the first poll waited for a fetch of its own; each later one found its batch fetched ahead
        assert instance.poll_fetches == 1
        assert instance.fetches_ahead >= polls - 1
    else:
        assert instance.poll_fetches >= polls
        assert instance.fetches_ahead == 0


@pytest.mark.parametrize("prefetch", [True, False])
async def test_a_stream_cursor_finds_its_batches_fetched_ahead(env: Env, prefetch: bool) -> None:
    sent = await fill(env, "stream")
    service = await env.service(prefetch_bytes=2**20 if prefetch else 0)
    instance_id, instance = await create(service, "g-stream", auto_commit=True)
    cursor = service.open_stream("g-stream", instance_id, None)
    got: list[DeliveredMessage] = []
    while len(got) < len(sent):
        step = await cursor.next(PER_PARTITION, 2**20, 3.0)
        assert step
        got += step
    assert sorted(values(got)) == sorted(sent) and in_order(got)
    assert (instance.poll_fetches == 1) is prefetch


async def solo_out(
    env: Env, service: ConsumerService, group: str, prefix: str, **spec: object
) -> tuple[str, ConsumerInstance, list[DeliveredMessage]]:
    """A new instance of ``solo`` (one partition) that delivered a batch of two (``prefix``-0 and -1, out,
    not committed) while two more (-2, -3) wait in the partition: its id, the instance, the batch out."""
    info = await service.create(group, InstanceSpec({"solo": None}, start_position="earliest", **spec))  # type: ignore[arg-type]
    await env.publish("solo", [f"{prefix}-0".encode(), f"{prefix}-1".encode()])
    first = await service.poll(group, info.instance_id, timeout=3.0)
    assert values(first) == [f"{prefix}-0".encode(), f"{prefix}-1".encode()]
    await env.publish("solo", [f"{prefix}-2".encode(), f"{prefix}-3".encode()])
    return info.instance_id, service.instance(group, info.instance_id), first


async def test_after_an_explicit_commit_the_partition_is_fetched_ahead(env: Env) -> None:
    service = await env.service()
    instance_id, instance, first = await solo_out(env, service, "g-solo", "s")
    assert instance.fetches_ahead == 0  # its only partition has its batch out
    await service.commit("g-solo", instance_id, [m.token for m in first])
    assert instance.fetches_ahead == 1  # the commit freed the partition: its next batch is on its way
    second = await service.poll("g-solo", instance_id, timeout=3.0)
    assert values(second) == [b"s-2", b"s-3"]
    assert instance.poll_fetches == 1


async def test_a_partition_whose_batch_is_out_is_not_fetched(env: Env) -> None:
    """The broker keeps one unconfirmed read per partition: a fetch while a delivered batch waits for its
    commit would commit it or give it back. Auto-commit on one partition therefore fetches at the poll."""
    seen: list[object] = []
    bus = EventBus()
    bus.subscribe(seen.append)
    service = await env.service(events=bus)
    spec = InstanceSpec({"solo": None}, start_position="earliest", auto_commit=True)
    instance_id = (await service.create("g-out", spec)).instance_id
    instance = service.instance("g-out", instance_id)
    await env.publish("solo", [b"o-0", b"o-1"])
    first = await service.poll("g-out", instance_id, timeout=3.0)
    assert values(first) == [b"o-0", b"o-1"]
    await env.publish("solo", [b"o-2"])
    await asyncio.sleep(0.2)
    assert instance.fetches_ahead == 0
    assert [e.outcome for e in seen if isinstance(e, FetchOutcome)] == ["ok"]  # no fetch while it is out
    second = await service.poll("g-out", instance_id, timeout=3.0)
    assert values(second) == [b"o-2"]
    assert instance.poll_fetches == 2


async def fetched_ahead(
    service: ConsumerService, group: str, instance_id: str, instance: ConsumerInstance
) -> list[DeliveredMessage]:
    """Deliver one batch, and wait until another is fetched ahead and buffered; returns the first."""
    first = await service.poll(group, instance_id, max_messages=PER_PARTITION, timeout=3.0)
    assert len(first) == PER_PARTITION

    async def in_hand() -> bool:
        if instance.buffered_count >= PER_PARTITION:
            return True
        await service.commit(group, instance_id, [])  # a commit fetches ahead too (past an empty partition)
        return False

    await eventually(in_hand, what="a batch fetched ahead")
    assert instance.fetches_ahead >= 1
    return first


async def committed_one_ahead(
    service: ConsumerService, group: str
) -> tuple[str, ConsumerInstance, list[DeliveredMessage], str]:
    """A new instance that delivered one batch, had it committed and holds another fetched ahead: its id,
    the instance, the first batch and the partition of the one in hand."""
    instance_id, instance = await create(service, group)
    first = await fetched_ahead(service, group, instance_id, instance)
    await service.commit(group, instance_id, [m.token for m in first])
    return instance_id, instance, first, instance._state.buffer[0].batch.partition_key


def partition_of(message: DeliveredMessage) -> str:
    return message.partition_key


async def everything(
    service: ConsumerService, group: str, instance_id: str, want: int, *, quiet: float = 0.3
) -> list[DeliveredMessage]:
    """Poll and commit until ``want`` messages came, then poll once more for anything extra."""
    got: list[DeliveredMessage] = []
    while len(got) < want:
        answer = await service.poll(group, instance_id, timeout=3.0)
        assert answer, f"nothing more after {len(got)} of {want}"
        got += answer
        await service.commit(group, instance_id, [m.token for m in answer])
    got += await service.poll(group, instance_id, timeout=quiet)
    return got


async def test_a_commit_leaves_the_batch_fetched_ahead_undelivered(env: Env) -> None:
    sent = await fill(env, "commit")
    service = await env.service()
    instance_id, instance = await create(service, "g-commit")
    first = await fetched_ahead(service, "g-commit", instance_id, instance)
    result = await service.commit("g-commit", instance_id, [m.token for m in first])
    assert (result.committed, result.pending, result.awaiting_batch) == (PER_PARTITION, 0, 0)
    assert instance.buffered_count >= PER_PARTITION  # still in hand, no token, no deadline
    assert instance.pending_count == 0
    rest = await everything(service, "g-commit", instance_id, len(sent) - PER_PARTITION)
    assert sorted(values([*first, *rest])) == sorted(sent)
    assert all(m.attempt == 1 for m in rest)


@pytest.mark.parametrize(("leave", "auto_commit"), [("delete", False), ("delete", True), ("expire", False)])
async def test_a_batch_fetched_ahead_goes_to_the_next_member_whole(
    env: Env, leave: str, auto_commit: bool
) -> None:
    sent = await fill(env, f"leave{leave}{auto_commit}")
    service = await env.service(lease=300.0, reap_interval=0.05)
    group = f"g-leave-{leave}-{auto_commit}"
    instance_id, instance = await create(service, group, auto_commit=auto_commit)
    first = await fetched_ahead(service, group, instance_id, instance)
    ahead_partition = instance._state.buffer[0].batch.partition_key
    if not auto_commit:
        await service.commit(group, instance_id, [m.token for m in first])
    if leave == "delete":
        await service.delete(group, instance_id)
    else:
        service.lease = 0.2
        await eventually(lambda: instance.close_done, what="the lease to end")
        service.lease = 300.0
    assert service._prefetch_budget.held == 0
    next_id, _ = await create(service, group)
    rest = await everything(service, group, next_id, len(sent) - PER_PARTITION)
    # the first batch was committed (by the client or by the auto-commit of the delete); the one fetched
    # ahead comes whole to the next member as a first delivery
    assert sorted(values(rest)) == sorted(set(sent) - set(values(first)))
    assert all(m.attempt == 1 for m in rest)
    assert any(partition_of(m) == ahead_partition for m in rest)


async def test_a_seek_gives_the_batch_fetched_ahead_back(env: Env) -> None:
    sent = await fill(env, "seek")
    service = await env.service()
    instance_id, instance, first, ahead_partition = await committed_one_ahead(service, "g-seek")
    await service.seek("g-seek", instance_id, SeekOrder("latest", partitions=[ahead_partition]))
    assert not any(segment.batch.partition_key == ahead_partition for segment in instance._state.buffer)
    rest = await everything(service, "g-seek", instance_id, len(sent) - 2 * PER_PARTITION)
    assert not any(partition_of(m) == ahead_partition for m in rest)
    moved = ahead_partition.rsplit(":", 1)[1]
    assert sorted(values([*first, *rest])) == sorted(m for m in sent if m.decode().split("-")[1] != moved)


async def test_a_nack_leaves_the_batch_fetched_ahead_alone(env: Env) -> None:
    sent = await fill(env, "nack")
    service = await env.service(republisher=env.producer)
    instance_id, instance = await create(service, "g-nack", retry_topic="retry")
    first = await fetched_ahead(service, "g-nack", instance_id, instance)
    nacked = first[0]
    result = await service.nack("g-nack", instance_id, [nacked.token])
    assert result.retried == 1
    await service.commit("g-nack", instance_id, [m.token for m in first[1:]])
    rest = await everything(service, "g-nack", instance_id, len(sent) - PER_PARTITION + 1)
    again = [m for m in rest if m.message.body == nacked.message.body]
    assert [m.attempt for m in again] == [2]
    assert all(m.attempt == 1 for m in rest if m.message.body != nacked.message.body)
    assert sorted(values(first[1:] + rest)) == sorted(sent)


async def test_a_rebalance_gives_the_batches_fetched_ahead_to_their_new_holder(env: Env) -> None:
    sent = await fill(env, "moved")
    service = await env.service()
    a_id, _, first, ahead_partition = await committed_one_ahead(service, "g-moved")
    b_id, _ = await create(service, "g-moved")

    def split() -> bool:
        held = [len(service.describe("g-moved", i).partitions) for i in (a_id, b_id)]
        return sum(held) == PARTITIONS and min(held) > 0

    await eventually(split, what="the partitions split between a and b")  # a does not poll meanwhile
    moved = ahead_partition not in {p.partition_key for p in service.describe("g-moved", a_id).partitions}
    received: dict[str, list[DeliveredMessage]] = {a_id: list(first), b_id: []}

    async def drained() -> bool:
        for instance_id in (a_id, b_id):
            got = await service.poll("g-moved", instance_id, timeout=0.05)
            received[instance_id] += got
            await service.commit("g-moved", instance_id, [m.token for m in got])
        return sum(len(r) for r in received.values()) >= len(sent)

    await eventually(drained, what="every message", timeout=20.0)
    for instance_id in (a_id, b_id):
        received[instance_id] += await service.poll("g-moved", instance_id, timeout=0.2)
    everything = received[a_id] + received[b_id]
    assert sorted(values(everything)) == sorted(sent)  # nothing lost, nothing twice
    assert all(m.attempt == 1 for m in everything)
    # the batch fetched ahead went with its partition (when it moved), never delivered by a
    holder = b_id if moved else a_id
    assert {partition_of(m) for m in received[holder]} >= {ahead_partition}


async def test_the_instance_cap_bounds_what_is_fetched_ahead(env: Env) -> None:
    await fill(env, "cap")
    service = await env.service(prefetch_bytes=PER_PARTITION * len(b"cap-0-0") - 1)  # less than one batch
    instance_id, instance = await create(service, "g-cap", auto_commit=True)
    await poll_all(service, "g-cap", instance_id, 3 * PER_PARTITION)
    assert instance.fetches_ahead == 0
    assert instance.poll_fetches == 3


async def test_the_worker_cap_bounds_all_instances_together(env: Env) -> None:
    await fill(env, "worker")
    one_batch = PER_PARTITION * len(b"worker-0-0")
    service = await env.service(prefetch_worker_bytes=one_batch + one_batch // 2)
    a_id, a = await create(service, "g-worker-a")
    b_id, b = await create(service, "g-worker-b")
    await fetched_ahead(service, "g-worker-a", a_id, a)
    assert service._prefetch_budget.held == one_batch
    first_b = await service.poll("g-worker-b", b_id, max_messages=PER_PARTITION, timeout=3.0)
    assert len(first_b) == PER_PARTITION
    assert b.fetches_ahead == 0  # a holds what the worker may hold ahead
    # once a is gone, there is room again: b's next commit fetches ahead
    await service.delete("g-worker-a", a_id)
    assert service._prefetch_budget.held == 0
    await service.commit("g-worker-b", b_id, [m.token for m in first_b])
    assert b.fetches_ahead == 1


async def test_a_poll_that_does_not_wait_joins_the_fetch_ahead_on_its_way(env: Env) -> None:
    """A commit starts fetching the partition's next batch; a poll with timeout 0 right after it answers
    that batch (it would have waited for a fetch of its own just as long), not an empty answer."""
    service = await env.service()
    instance_id, instance, first = await solo_out(env, service, "g-zero", "z")
    await service.commit("g-zero", instance_id, [m.token for m in first])
    assert instance.fetches_ahead == 1 and instance.fetching == 1  # on its way, not in hand
    second = await service.poll("g-zero", instance_id, timeout=0.0)
    assert values(second) == [b"z-2", b"z-3"]
    assert instance.poll_fetches == 1


async def test_a_nack_that_settles_a_batch_fetches_its_partition_ahead(env: Env) -> None:
    """The nack of the last unsettled message of a batch confirms the batch: the partition is free and its
    next batch is fetched ahead at once, as after a commit."""
    service = await env.service(republisher=env.producer)
    instance_id, instance, first = await solo_out(env, service, "g-nack-ahead", "n", retry_topic="retry")
    await service.commit("g-nack-ahead", instance_id, [first[1].token])
    ahead = instance.fetches_ahead
    result = await service.nack("g-nack-ahead", instance_id, [first[0].token])
    assert result.retried == 1
    assert instance.fetches_ahead > ahead  # the batch is settled: its partition is fetched ahead
    second = await service.poll("g-nack-ahead", instance_id, max_messages=2, timeout=3.0)
    assert values(second) == [b"n-2", b"n-3"]


class HeldFetches:
    """The embedded broker made slow to answer: while closed, its answers to message fetches wait until it
    opens (a fetch's client side gives up after the consumer's ``rpc_timeout``)."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
        self._open = asyncio.Event()
        self._open.set()
        #: fetches that came while closed
        self.held = 0
        consumers = env.cluster.broker(1).consumers
        answer = consumers.get_message_async

        async def get_message(request: object) -> object:
            if not self._open.is_set():
                self.held += 1
                await self._open.wait()
            return await answer(request)  # type: ignore[arg-type]

        monkeypatch.setattr(consumers, "get_message_async", get_message)

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()


async def test_a_poll_with_messages_in_hand_does_not_wait_for_a_fetch_ahead(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a poll with nothing in hand joins a fetch ahead on its way: one that took messages from the
    buffer answers them at once and leaves the fetch ahead to the next poll (a stream's next step finds it
    in hand). Were it to wait for the broker's answer, the fetch ahead would not overlap the client's work
    (gRPC Subscribe loses a fifth of its rate). The broker holds the fetch ahead's answer until the poll has
    answered; a poll that joined it would end only when the core gives up on it (``rpc_timeout``), with the
    fetch ahead gone."""
    sent = await fill(env, "hand")
    gate = HeldFetches(env, monkeypatch)
    service = await env.service()
    instance_id, instance = await create(service, "g-hand")
    first = await fetched_ahead(service, "g-hand", instance_id, instance)  # a batch of 10 in hand after it
    assert instance.fetching == 0 and instance.buffered_count == PER_PARTITION
    gate.close()
    # a poll of 8 takes 8 of the 10 and fetches one partition ahead for a next poll of 8: the broker holds it
    second = await service.poll("g-hand", instance_id, max_messages=8, timeout=3.0)
    assert len(second) == 8
    assert instance.fetching == 1 and instance.buffered_count == 2
    await eventually(lambda: gate.held == 1, what="the fetch ahead at the broker")
    ahead = instance.fetches_ahead
    # the next poll has 2 in hand and room for 6 more: it answers the 2 without waiting for the fetch ahead
    third = await service.poll("g-hand", instance_id, max_messages=8, timeout=3.0)
    assert len(third) == 2 and {partition_of(m) for m in third} == {partition_of(second[0])}
    # the same fetch ahead still on its way (one that had been joined would have ended at rpc_timeout, given
    # up, and this poll would have started another)
    assert (instance.fetching, instance.fetches_ahead) == (1, ahead), "the poll waited for the fetch ahead"
    assert instance.poll_fetches == 1
    gate.open()
    # the batch fetched ahead comes whole to the polls after it, first deliveries, nothing lost
    await service.commit("g-hand", instance_id, [m.token for m in first + second + third])
    rest = await everything(service, "g-hand", instance_id, len(sent) - 2 * PER_PARTITION)
    assert sorted(values(first + second + third + rest)) == sorted(sent)
    assert all(m.attempt == 1 for m in rest)
