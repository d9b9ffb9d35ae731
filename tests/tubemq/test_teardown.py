"""Teardown under cancellation: a close() cancelled at any await point still leaves the group.

Every subject (core Consumer, Producer, ConsumerInstance, ConsumerService) is closed by a caller task that is
cancelled at one point of the close, for every point in turn:

* after ``n`` event-loop iterations, for n = 1, 2, ... until the close finishes before the cancel;
* when the close sends its ``k``-th request over the pool, for k = 1, 2, ... until it sends fewer.

After each cancellation the master must drop the member without another ``close()`` call (the close goes on
in its own task), a second ``close()`` must return, and no task of the subject may be left running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf.message import Message

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.net.teardown import CloseOnce, cancel_and_wait
from gateway.tubemq.producer.client import Producer, ProducerConfig
from tests.support.consumer_support import fast
from tests.support.waiting import eventually

#: cancel points tried per subject: loop iterations 1..MAX_LOOPS, requests 1..MAX_REQUESTS
MAX_LOOPS = 400
MAX_REQUESTS = 20


class HookedPool(ConnectionPool):
    """A real pool that counts the requests sent through it and can act on the k-th."""

    def __init__(self, network: MemoryNetwork) -> None:
        super().__init__(connector=network.create_connection)
        self.on_request: Callable[[], None] | None = None

    async def request(
        self,
        address: NodeAddress,
        method: int,
        request: Message,
        timeout: float,  # noqa: ASYNC109 - passed on
        service: int | None = None,
    ) -> Message:
        if self.on_request is not None:
            self.on_request()
        return await super().request(address, method, request, timeout, service)


@dataclass(frozen=True)
class Point:
    loops: int | None = None
    requests: int | None = None

    def __str__(self) -> str:
        return f"after {self.loops} loop iterations" if self.loops else f"at request {self.requests}"


async def cancelled_close(pool: HookedPool, close: Callable[[], Awaitable[None]], point: Point) -> bool:
    """Run ``close`` in a caller task cancelled at ``point``; True when it finished before that point."""
    caller = asyncio.ensure_future(close())
    sent = 0

    def hook() -> None:
        nonlocal sent
        sent += 1
        if sent == point.requests:
            caller.cancel()

    pool.on_request = hook if point.requests else None
    try:
        if point.loops:
            for _ in range(point.loops):
                await asyncio.sleep(0)
                if caller.done():
                    break
            caller.cancel()
        try:
            await caller
        except asyncio.CancelledError:
            return False
        return True
    finally:
        pool.on_request = None


def points() -> Iterator[Point]:
    for loops in range(1, MAX_LOOPS + 1):
        yield Point(loops=loops)


def request_points() -> Iterator[Point]:
    for requests in range(1, MAX_REQUESTS + 1):
        yield Point(requests=requests)


def running_tasks(marker: str) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if marker in t.get_name() and not t.done()]


def gone_check(members: Callable[[], Collection[str]], client_id: str) -> Callable[[], Awaitable[None]]:
    """Waits until ``client_id`` is not among ``members()`` and none of its tasks runs any more."""

    async def left() -> bool:
        return client_id not in members() and not running_tasks(client_id)

    async def gone() -> None:
        await eventually(left, what=f"{client_id} leaving")

    return gone


@contextlib.asynccontextmanager
async def cluster_and_pool(network: MemoryNetwork) -> AsyncIterator[tuple[EmbeddedCluster, HookedPool]]:
    async with EmbeddedCluster(
        [TopicSpec("demo", 4)], balance_period=0.05, start_server=network.start_server
    ) as cluster:
        pool = HookedPool(network)
        try:
            yield cluster, pool
        finally:
            await pool.close()


async def run_every_point(
    subject: Callable[[], Awaitable[tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]]],
    pool: HookedPool,
) -> int:
    """For each point: build a subject (returns its close and a check that it left), cancel its close at
    the point, verify. Returns how many points were cancelled before the close finished."""
    cancelled = 0
    for series in (points(), request_points()):
        for point in series:
            close, check_gone = await subject()
            finished = await cancelled_close(pool, close, point)
            await check_gone()  # without another close(): the shielded close goes on by itself
            await asyncio.wait_for(close(), 10.0)  # idempotent: returns at once now
            await check_gone()
            if finished:
                break
            cancelled += 1
        else:
            pytest.fail(f"close still unfinished at the last cancel point {point}")
    return cancelled


# --- the helpers themselves -------------------------------------------------------------------------


async def test_close_once_survives_a_cancelled_caller_and_restarts_after_its_own_cancellation() -> None:
    runs: list[str] = []
    gate = asyncio.Event()

    async def steps() -> None:
        runs.append("start")
        await gate.wait()
        runs.append("end")

    closer = CloseOnce(steps, name="test-close")
    caller = asyncio.ensure_future(closer())
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert closer.started and not closer.done
    second = asyncio.ensure_future(closer())  # waits for the same run
    gate.set()
    await second
    assert runs == ["start", "end"] and closer.done
    await closer()
    assert runs == ["start", "end"]

    # The close task itself cancelled (the loop shutting down): the next call runs the steps again.
    gate.clear()
    other = CloseOnce(steps, name="test-close-2")
    first = asyncio.ensure_future(other())
    await asyncio.sleep(0.01)
    inner = [t for t in asyncio.all_tasks() if t.get_name() == "test-close-2"]
    assert len(inner) == 1
    inner[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    gate.set()
    await other()
    assert runs == ["start", "end", "start", "start", "end"] and other.done


async def test_cancel_and_wait_cancels_again_a_task_that_swallowed_the_cancellation() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed >= 3:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await cancel_and_wait([task, None])
    assert task.cancelled() and swallowed == 3


# --- the subjects -----------------------------------------------------------------------------------


async def test_consumer_close_cancelled_at_every_point_leaves_the_group(network: MemoryNetwork) -> None:
    async with cluster_and_pool(network) as (cluster, pool):
        master = cluster.master

        async def subject() -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
            consumer = Consumer([cluster.master_address], "g-close", {"demo": None}, pool=pool, config=fast())
            await consumer.start()
            assert await consumer.wait_for_assignment(10.0)
            assert consumer.client_id in master.consumers.members("g-close")

            return consumer.close, gone_check(lambda: master.consumers.members("g-close"), consumer.client_id)

        assert await run_every_point(subject, pool) > 3


async def test_producer_close_cancelled_at_every_point_leaves_the_master(network: MemoryNetwork) -> None:
    async with cluster_and_pool(network) as (cluster, pool):
        producers = cluster.master.producers.producers
        config = ProducerConfig(heartbeat_interval=0.05, register_backoff_base=0.05)

        async def subject() -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
            producer = Producer([cluster.master_address], pool=pool, config=config)
            await producer.start()
            await producer.register_topic("demo")
            assert producer.client_id in producers

            return producer.close, gone_check(lambda: producers, producer.client_id)

        assert await run_every_point(subject, pool) > 1


async def test_instance_close_cancelled_at_every_point_leaves_the_group(network: MemoryNetwork) -> None:
    async with cluster_and_pool(network) as (cluster, pool):
        master = cluster.master
        service = ConsumerService(
            cluster.master_addresses, pool, advertised_url="http://127.0.0.1:9", consumer_config=fast()
        )
        await service.start()
        try:

            async def subject() -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
                info = await service.create("g-inst", InstanceSpec({"demo": None}, auto_commit=True))
                instance = service.instance("g-inst", info.instance_id)
                assert await instance.consumer.wait_for_assignment(10.0)

                async def gone() -> None:
                    async def left() -> bool:
                        members = master.consumers.members("g-inst")
                        return info.client_id not in members and not running_tasks(info.client_id)

                    await eventually(left, what=f"{info.client_id} leaving the group")
                    assert service.instance_count == 0

                async def delete() -> None:
                    with contextlib.suppress(Exception):  # Gone once deleted: then close the instance
                        await service.delete("g-inst", info.instance_id)
                        return
                    await instance.close("deleted", commit_delivered=True)

                return delete, gone

            assert await run_every_point(subject, pool) > 3
        finally:
            await service.close()


async def test_service_close_cancelled_at_every_point_closes_every_instance(network: MemoryNetwork) -> None:
    async with cluster_and_pool(network) as (cluster, pool):
        master = cluster.master

        async def subject() -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
            service = ConsumerService(
                cluster.master_addresses,
                pool,
                advertised_url="http://127.0.0.1:9",
                consumer_config=fast(),
                reap_interval=0.01,
            )
            await service.start()
            infos = [await service.create("g-svc", InstanceSpec({"demo": None})) for _ in range(2)]
            for info in infos:
                assert await service.instance("g-svc", info.instance_id).consumer.wait_for_assignment(10.0)

            async def gone() -> None:
                async def left() -> bool:
                    members = master.consumers.members("g-svc")
                    return (
                        not members
                        and not running_tasks("consumer-instance-reaper")
                        and not any(running_tasks(i.client_id) for i in infos)
                    )

                await eventually(left, what="every instance leaving the group")

            return service.close, gone

        assert await run_every_point(subject, pool) > 3
