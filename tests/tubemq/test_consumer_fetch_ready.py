"""``Consumer.fetch_ready``, the core's fetch ahead of a poll, against the embedded cluster over loopback:
it takes the ready partitions before it returns, so a commit due on one goes with that partition's fetch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.consumer.events import FetchOutcome, OffsetCommitted
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from tests.support.consumer_support import bodies_of, fast, publish, running_cluster
from tests.support.waiting import eventually


@asynccontextmanager
async def member(
    cluster: EmbeddedCluster, pool: ConnectionPool, group: str, topic: str, seen: list[object] | None = None
) -> AsyncIterator[Consumer]:
    """A started consumer of ``topic`` from its earliest message, holding a partition; events to ``seen``."""
    bus = EventBus()
    if seen is not None:
        bus.subscribe(seen.append)
    config = fast(start_position=StartPosition.EARLIEST)
    consumer = Consumer([cluster.master_address], group, {topic: None}, pool=pool, config=config, events=bus)
    await consumer.start()
    try:
        assert await consumer.wait_for_assignment(5.0)
        yield consumer
    finally:
        await consumer.close()


async def test_fetch_ready_takes_the_ready_partitions_at_once(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("ahead", 2)], network=network) as cluster:
        seen: list[object] = []
        await publish(pool, cluster, "ahead", [b"a0", b"b0", b"a1", b"b1"])
        async with member(cluster, pool, "g-ahead", "ahead", seen) as consumer:
            await eventually(lambda: len(consumer.assignment()) == 2, what="both partitions")
            future = consumer.fetch_ready(4)
            assert future is not None
            # taken before any fetch ran: nothing else is handed out, and nothing was asked of the broker yet
            assert all(p.in_use for p in consumer.assignment())
            assert consumer.fetch_ready(4) is None
            assert not [e for e in seen if isinstance(e, FetchOutcome)]
            batches = await future
            assert sorted(bodies_of(batches)) == [b"a0", b"a1", b"b0", b"b1"]
            assert len(batches) == 2
            # each stays taken until confirmed, as a polled batch does
            assert consumer.fetch_ready(4) is None
            for batch in batches:
                await consumer.confirm(batch.confirm_context, consumed=True)
            assert not any(p.in_use for p in consumer.assignment())


async def test_a_commit_due_goes_with_the_fetch_ahead(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("carry", 1)], network=network) as cluster:
        seen: list[object] = []
        await publish(pool, cluster, "carry", [b"x", b"y"])
        async with member(cluster, pool, "g-carry", "carry", seen) as consumer:
            first = await consumer.poll(5.0)
            assert first is not None and bodies_of([first]) == [b"x", b"y"]
            key = consumer.confirm_local(first.confirm_context)
            assert key == "1:carry:0"
            future = consumer.fetch_ready(1)
            assert future is not None
            # the partition is taken by the fetch ahead: no CommitOffset of its own
            await consumer.send_due_commits([key])
            assert not [e for e in seen if isinstance(e, OffsetCommitted)]
            assert await future == []  # nothing more to read: the commit went with a 404
            committed = [e for e in seen if isinstance(e, OffsetCommitted)]
            assert [(c.partition_key, c.consumed) for c in committed] == [(key, True)]
        # the broker kept the commit: the group's next member reads nothing of what was committed
        await publish(pool, cluster, "carry", [b"z"])
        async with member(cluster, pool, "g-carry", "carry") as again:
            batch = await again.poll(5.0)
            assert batch is not None and bodies_of([batch]) == [b"z"]


@pytest.mark.parametrize("most", [0, 3])
async def test_nothing_ready_starts_nothing(network: MemoryNetwork, pool: ConnectionPool, most: int) -> None:
    async with (
        running_cluster([TopicSpec("idle", 1)], network=network) as cluster,
        member(cluster, pool, "g-idle", "idle") as consumer,
    ):
        if most:
            assert await consumer.poll(0.05) is None  # the empty partition is parked now
        assert consumer.fetch_ready(most) is None
