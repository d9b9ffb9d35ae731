"""GetMessage outcomes (§6.6) against a real embedded broker, and the wait each outcome asks for."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.events import FetchOutcome, PartitionReleased
from gateway.tubemq.consumer.fetch import Fetcher
from gateway.tubemq.consumer.rebalance import Rebalancer
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.meta import BrokerInfo, Partition
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from tests.support.consumer_support import fast, publish, running_cluster


@pytest.fixture
async def cluster(network: MemoryNetwork) -> AsyncIterator[EmbeddedCluster]:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        yield cluster


def setup(pool: ConnectionPool, seen: list[object]) -> tuple[ConsumerContext, Rebalancer, Fetcher]:
    bus = EventBus()
    bus.subscribe(seen.append)
    ctx = ConsumerContext(
        client_id="me",
        group="g-fetch",
        host_name="127.0.0.1",
        filters={"one": frozenset()},
        config=fast(not_found_wait=0.5),
        pool=pool,
        events=bus,
    )
    rebalancer = Rebalancer(ctx)
    return ctx, rebalancer, Fetcher(ctx, rebalancer)


def partition_of(cluster: EmbeddedCluster, topic: str = "one") -> Partition:
    address = cluster.broker(1).address
    return Partition(BrokerInfo(1, address.host, address.port), topic, 0)


def outcomes(seen: list[object]) -> list[tuple[str, int]]:
    return [(e.outcome, e.errcode) for e in seen if isinstance(e, FetchOutcome)]


async def test_empty_partition_waits_and_data_gives_a_batch(
    cluster: EmbeddedCluster, pool: ConnectionPool
) -> None:
    seen: list[object] = []
    ctx, rebalancer, fetcher = setup(pool, seen)
    partition = partition_of(cluster)
    await rebalancer.connect([partition])
    selection = ctx.cache.select(ctx.clock())
    assert selection is not None
    assert await fetcher.fetch(selection) is None
    assert outcomes(seen) == [("not_found", 404)]
    assert ctx.cache.select(ctx.clock()) is None  # parked for not_found_wait
    assert ctx.cache.next_ready_in(ctx.clock()) == pytest.approx(0.5, abs=0.1)
    await publish(pool, cluster, "one", [b"a", b"b"])
    selection = ctx.cache.select(ctx.clock() + 0.5)
    assert selection is not None
    batch = await fetcher.fetch(selection)
    assert batch is not None and [m.body for m in batch.messages] == [b"a", b"b"]
    assert batch.confirm_context == f"1:one:0:{selection.token}"
    assert (batch.curr_offset, batch.max_offset, batch.offsets_exact) == (0, 56, True)
    assert ctx.cache.is_in_use("1:one:0", selection.token)


async def test_unregistered_partition_is_dropped(cluster: EmbeddedCluster, pool: ConnectionPool) -> None:
    seen: list[object] = []
    ctx, _, fetcher = setup(pool, seen)
    ctx.cache.add(partition_of(cluster))  # held locally, never registered at the broker
    selection = ctx.cache.select(ctx.clock())
    assert selection is not None
    assert await fetcher.fetch(selection) is None
    assert outcomes(seen) == [("dropped", 411)]
    assert len(ctx.cache) == 0
    assert [e.reason for e in seen if isinstance(e, PartitionReleased)] == ["broker"]


async def test_unreachable_broker_parks_the_partition(cluster: EmbeddedCluster, pool: ConnectionPool) -> None:
    seen: list[object] = []
    ctx, _, fetcher = setup(pool, seen)
    ctx.cache.add(partition_of(cluster))
    await cluster.stop_broker(1)
    selection = ctx.cache.select(ctx.clock())
    assert selection is not None
    assert await fetcher.fetch(selection) is None
    assert outcomes(seen) == [("transport", -1)]
    state = ctx.cache.get("1:one:0")
    assert state is not None and not state.in_use and state.last_consumed is False


@pytest.mark.parametrize(
    ("code", "limit", "outcome", "wait"),
    [
        (404, None, "not_found", 0.5),
        (452, 1500, "speed_limit", 1.5),
        (452, -1, "speed_limit", 0.5),
        (403, None, "forbidden", 0.05),
        (301, None, "moved", 0.02),
        (503, None, "unavailable", 0.02),
        (500, None, "error", 0.02),
    ],
)
def test_waits_per_outcome(
    pool: ConnectionPool, code: int, limit: int | None, outcome: str, wait: float
) -> None:
    _, _, fetcher = setup(pool, [])
    answer = broker_pb.GetMessageResponseB2C(success=False, errCode=code, errMsg="x")
    if limit is not None:
        answer.minLimitTime = limit
    assert fetcher.error_wait(answer) == (outcome, wait)
