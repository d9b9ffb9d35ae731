"""Rebalance work against a real embedded broker: registration rounds, give-ups, releases (§6.4, §6.5)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.events import PartitionRegisterFailed, PartitionReleased
from gateway.tubemq.consumer.rebalance import EventType, Rebalancer, RebalanceTask
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.meta import BrokerInfo, Partition
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method
from tests.support.consumer_support import fast, running_cluster


@pytest.fixture
async def cluster(network: MemoryNetwork) -> AsyncIterator[EmbeddedCluster]:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        yield cluster


def context(pool: ConnectionPool, seen: list[object], **config: float) -> ConsumerContext:
    bus = EventBus()
    bus.subscribe(seen.append)
    return ConsumerContext(
        client_id="me",
        group="g-reb",
        host_name="127.0.0.1",
        filters={"one": frozenset()},
        config=fast(**config),
        pool=pool,
        events=bus,
    )


def partition_of(cluster: EmbeddedCluster) -> Partition:
    address = cluster.broker(1).address
    return Partition(BrokerInfo(1, address.host, address.port), "one", 0)


def failures(seen: list[object]) -> list[tuple[int, bool]]:
    return [(e.errcode, e.final) for e in seen if isinstance(e, PartitionRegisterFailed)]


async def test_occupied_partition_is_given_up_at_once(cluster: EmbeddedCluster, pool: ConnectionPool) -> None:
    squat = broker_pb.RegisterRequestC2B(
        opType=31, clientId="squatter", groupName="g-reb", topicName="one", partitionId=0, readStatus=0
    )
    answer = await pool.request(cluster.broker(1).address, Method.CONSUMER_BROKER_REGISTER, squat, 2.0)
    assert isinstance(answer, broker_pb.RegisterResponseB2C) and answer.errCode == 200
    seen: list[object] = []
    rebalancer = Rebalancer(context(pool, seen, broker_register_rounds=3))
    await rebalancer.connect([partition_of(cluster)])
    assert failures(seen) == [(410, True)]


async def test_unreachable_broker_is_retried_in_rounds(
    network: MemoryNetwork, cluster: EmbeddedCluster, pool: ConnectionPool
) -> None:
    partition = partition_of(cluster)
    await cluster.stop_broker(1)
    seen: list[object] = []
    ctx = context(pool, seen, broker_register_rounds=3, broker_register_retry_wait=0.01)
    await Rebalancer(ctx).connect([partition])
    assert failures(seen) == [(-1, False), (-1, False), (-1, True)]
    assert len(ctx.cache) == 0
    await cluster.start_broker(1)
    fresh = ConnectionPool(
        connector=network.create_connection
    )  # the first pool fails fast for a while after its connect failures
    try:
        ctx.pool = fresh
        await Rebalancer(ctx).connect([partition])
        assert partition.partition_key in ctx.cache
    finally:
        await fresh.close()


async def test_disconnect_rolls_back_a_batch_not_returned_in_time(
    cluster: EmbeddedCluster, pool: ConnectionPool
) -> None:
    seen: list[object] = []
    ctx = context(pool, seen, rebalance_confirm_wait=0.2)
    rebalancer = Rebalancer(ctx)
    partition = partition_of(cluster)
    await rebalancer.connect([partition])
    assert ctx.cache.select(ctx.clock()) is not None  # handed out, never returned
    event = master_pb.EventProto(
        rebalanceId=7, opType=EventType.ONLY_DISCONNECT, subscribeInfo=[f"me@g-reb#{partition}"]
    )
    task = RebalanceTask.from_proto(event)
    assert task.partitions == (partition,)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await rebalancer.execute(task)
    assert loop.time() - started >= 0.2
    assert len(ctx.cache) == 0
    (released,) = [e for e in seen if isinstance(e, PartitionReleased)]
    assert (released.reason, released.consumed) == ("rebalance", False)
    assert not cluster.broker(1).consumers.registrations  # unregistered at the broker
    done = task.done_proto()
    assert (done.rebalanceId, done.opType, done.status, list(done.subscribeInfo)) == (
        7,
        20,
        2,
        list(event.subscribeInfo),
    )


async def test_worker_runs_the_newest_event_and_keeps_it_for_the_acknowledgement(
    cluster: EmbeddedCluster, pool: ConnectionPool
) -> None:
    seen: list[object] = []
    ctx = context(pool, seen)
    acknowledged = asyncio.Event()
    rebalancer = Rebalancer(ctx, on_finished=acknowledged.set)
    partition = partition_of(cluster)
    info = [f"me@g-reb#{partition}"]
    worker = asyncio.create_task(rebalancer.run())
    try:
        rebalancer.submit(
            RebalanceTask.from_proto(master_pb.EventProto(rebalanceId=1, opType=99, subscribeInfo=info))
        )
        rebalancer.submit(
            RebalanceTask.from_proto(master_pb.EventProto(rebalanceId=2, opType=10, subscribeInfo=info))
        )
        assert rebalancer.busy
        await asyncio.wait_for(acknowledged.wait(), 5.0)
        assert await rebalancer.wait_idle(1.0)
        assert [t.rebalance_id for t in rebalancer.finished] == [2]
        assert partition.partition_key in ctx.cache
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
