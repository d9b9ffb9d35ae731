"""A poll's requests to the broker. An auto-commit at the start of a poll goes to the broker on the poll's
next GetMessage of that partition (``lastPackConsumed``) instead of a CommitOffset before it; what no fetch
of the poll carried is sent as a CommitOffset before the poll answers. A poll whose budget takes more than
one batch fetches several ready partitions at once. Real embedded cluster over loopback; the requests are
recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.service.instance import ConsumerInstance
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.consumer.events import OffsetCommitted
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import Method
from tests.support.consumer_support import RecordingPool, fast, publish, running_cluster
from tests.support.waiting import eventually

ENTRY = 28  # bytes of broker index per message


class Recording(RecordingPool):
    """The consumer's pool, read as the sequence of its GetMessage and CommitOffset requests."""

    def since(self, mark: int) -> list[tuple[str, int, bool]]:
        """(GET or COMMIT, partition, lastPackConsumed) of what was sent after ``mark`` requests."""
        out = []
        for method, request in self.sent[mark:]:
            if method not in (Method.GET_MESSAGES, Method.CONSUMER_COMMIT):
                continue
            assert isinstance(request, broker_pb.GetMessageRequestC2B | broker_pb.CommitOffsetRequestC2B)
            kind = "GET" if method == Method.GET_MESSAGES else "COMMIT"
            out.append((kind, request.partitionId, request.lastPackConsumed))
        return out


@pytest.fixture
async def recording(network: MemoryNetwork) -> AsyncIterator[Recording]:
    pool = Recording(network)
    yield pool
    await pool.close()


async def started(
    cluster: EmbeddedCluster, pool: ConnectionPool, group: str, topic: str, seen: list[object]
) -> ConsumerInstance:
    bus = EventBus()
    bus.subscribe(seen.append)
    config = fast(start_position=StartPosition.EARLIEST)
    consumer = Consumer([cluster.master_address], group, {topic: None}, pool=pool, config=config, events=bus)
    instance = ConsumerInstance(
        "i", group, consumer, auto_commit=True, max_bytes=None, commit_timeout=30.0, assignment_wait=5.0
    )
    await consumer.start()
    return instance


def commits(seen: list[object]) -> list[tuple[str, bool, int, int]]:
    return [
        (e.partition_key, e.consumed, e.offset, e.errcode) for e in seen if isinstance(e, OffsetCommitted)
    ]


async def test_the_next_fetch_carries_the_auto_commit(network: MemoryNetwork, recording: Recording) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        await publish(recording, cluster, "one", [b"a", b"b", b"c"])
        seen: list[object] = []
        instance = await started(cluster, recording, "g-carry", "one", seen)
        try:
            first = await instance.poll(10, 1 << 20, 5.0)
            assert [m.message.body for m in first] == [b"a", b"b", b"c"]
            assert cluster.broker(1).offsets.committed("g-carry", "one", 0) in (None, 0)
            mark = len(recording.sent)
            await publish(recording, cluster, "one", [b"d"])
            second = await instance.poll(10, 1 << 20, 2.0)
            assert [m.message.body for m in second] == [b"d"]
            # One request, no CommitOffset before it: the GetMessage carried the commit of a, b, c.
            assert recording.since(mark) == [("GET", 0, True)]
            assert cluster.broker(1).offsets.committed("g-carry", "one", 0) == 3 * ENTRY
            assert commits(seen) == [("1:one:0", True, 3 * ENTRY, 200)]
        finally:
            await instance.close("done", commit_delivered=True)
        # d was committed by the close: a new member of the group finds nothing.
        assert cluster.broker(1).offsets.committed("g-carry", "one", 0) == 4 * ENTRY


async def test_a_poll_that_fetches_nothing_carries_it_on_the_empty_fetch(
    network: MemoryNetwork, recording: Recording
) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        await publish(recording, cluster, "one", [b"a", b"b"])
        seen: list[object] = []
        instance = await started(cluster, recording, "g-empty", "one", seen)
        try:
            assert len(await instance.poll(10, 1 << 20, 5.0)) == 2
            mark = len(recording.sent)
            assert await instance.poll(10, 1 << 20, 0.2) == []
            sent = recording.since(mark)
            assert sent[0] == ("GET", 0, True)  # answered 404 after the broker's commit step
            assert ("COMMIT", 0, True) not in sent
            assert cluster.broker(1).offsets.committed("g-empty", "one", 0) == 2 * ENTRY
            assert commits(seen) == [("1:one:0", True, -1, 200)]  # a 404 tells no offset
        finally:
            await instance.close("done", commit_delivered=True)


async def test_a_commit_no_fetch_carried_is_sent_before_the_poll_answers(
    network: MemoryNetwork, recording: Recording
) -> None:
    async with running_cluster([TopicSpec("two", 2)], network=network) as cluster:
        await publish(recording, cluster, "two", [b"p0-a", b"p0-b", b"p0-c"], partition_ids=[0])
        await publish(recording, cluster, "two", [b"p1-a", b"p1-b", b"p1-c"], partition_ids=[1])
        seen: list[object] = []
        instance = await started(cluster, recording, "g-send", "two", seen)
        await eventually(lambda: len(instance.consumer.assignment()) == 2, what="both partitions")
        try:
            first = await instance.poll(4, 1 << 20, 5.0)  # one whole batch and one message of the other
            assert len(first) == 4
            whole = 0 if sum(m.partition_id == 0 for m in first) == 3 else 1
            assert not cluster.broker(1).offsets.committed("g-send", "two", whole)
            mark = len(recording.sent)
            second = await instance.poll(2, 1 << 20, 0)  # from the buffer alone: no fetch
            assert len(second) == 2 and {m.partition_id for m in second} == {1 - whole}
            assert recording.since(mark) == [("COMMIT", whole, True)]
            assert cluster.broker(1).offsets.committed("g-send", "two", whole)  # moved past the batch
            assert [c[:2] for c in commits(seen)] == [(f"1:two:{whole}", True)]
        finally:
            await instance.close("done", commit_delivered=True)


async def test_a_budget_of_several_batches_fetches_ready_partitions_at_once(
    network: MemoryNetwork, recording: Recording
) -> None:
    async with running_cluster([TopicSpec("three", 3)], network=network) as cluster:
        for pid in range(3):
            await publish(
                recording, cluster, "three", [f"p{pid}-{i}".encode() for i in range(4)], partition_ids=[pid]
            )
        seen: list[object] = []
        instance = await started(cluster, recording, "g-many", "three", seen)
        await eventually(lambda: len(instance.consumer.assignment()) == 3, what="three partitions")
        try:
            first = await instance.poll(2, 1 << 20, 5.0)  # no batch seen yet: one fetch
            assert len(first) == 2 and recording.most_fetching == 1
            mark = len(recording.sent)
            # 2 buffered, then 8 more: two batches of the size seen, from the two partitions ready now
            second = await instance.poll(10, 1 << 20, 5.0)
            assert len(second) == 10
            assert recording.most_fetching == 2
            fetched = {request for kind, request, _ in recording.since(mark) if kind == "GET"}
            assert fetched == {0, 1, 2} - {first[0].partition_id}
            bodies = [m.message.body for m in first + second]
            assert sorted(bodies) == sorted(f"p{p}-{i}".encode() for p in range(3) for i in range(4))
        finally:
            await instance.close("done", commit_delivered=True)
