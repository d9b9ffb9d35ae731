"""The TubeMQ client core inside Spark's Python processes: one per process, on a private event loop.

Spark calls data sources synchronously, from the driver's planning worker and from executor workers that
run one task after another. Each such process gets one :class:`SparkCore`: an asyncio loop on a daemon
thread with one :class:`ConnectionPool`, one :class:`RangeReader` per group prefix and one started
:class:`Producer` per master list, reused by every task the process runs. Synchronous code hands coroutines
to the loop (:meth:`SparkCore.run`) and walks async iterators step by step (:meth:`SparkCore.iterate`).
A forked worker gets a fresh core (the parent's loop thread does not survive a fork); at interpreter exit
the producers close (the master forgets them at once) and the pool closes. Jobs with other TLS or
authentication settings towards TubeMQ (``tls*``/``auth.*`` options) get a core of their own.

Planning helpers (:func:`plan_topic`) run on the driver: discover the topic's partitions through the master
and read each store's bounds from its broker.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.config import TubeMQSettings
from gateway.tubemq.address import parse_address_list
from gateway.tubemq.net import ConnectionPool, MasterClient
from gateway.tubemq.producer import Producer, ProducerConfig
from gateway.tubemq.ranges import OffsetBounds, RangeReader, TopicLayout, discover_partitions
from gateway.tubemq.wire import BrokerInfo, Partition, consumer_id, local_ipv4
from gateway.upstream import UpstreamOptions, upstream_options

__all__ = ["PartitionRange", "PlannedPartition", "SparkCore", "get_core", "plan_topic"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """One partition's ``[start, end)`` as a picklable task description."""

    key: str
    topic: str
    broker_id: int
    host: str
    port: int
    partition_id: int
    start: int
    end: int
    visit_token: int = -2
    fail_on_data_loss: bool = False
    """Fail the task when the broker no longer holds ``start`` (expired since planning)."""

    @property
    def partition(self) -> Partition:
        return Partition(BrokerInfo(self.broker_id, self.host, self.port), self.topic, self.partition_id)


@dataclass(frozen=True, slots=True)
class PlannedPartition:
    """A discovered partition with its store's bounds."""

    partition: Partition
    bounds: OffsetBounds
    visit_token: int

    @property
    def store(self) -> tuple[int, str, int]:
        """(brokerId, topic, store index): partitions of one store share its index offsets."""
        p = self.partition
        return (p.broker.broker_id, p.topic, p.store_index)

    def range(self, start: int, end: int, *, fail_on_data_loss: bool = False) -> PartitionRange:
        p = self.partition
        return PartitionRange(
            p.partition_key,
            p.topic,
            p.broker.broker_id,
            p.broker.host,
            p.broker.port,
            p.partition_id,
            start,
            end,
            self.visit_token,
            fail_on_data_loss,
        )


class SparkCore:
    """See the module docstring. ``rpc_timeout`` (seconds) bounds every TubeMQ call; ``upstream`` is the TLS
    context and credentials of the pool (none: plain TCP, no authentication)."""

    def __init__(self, rpc_timeout: float = 10.0, upstream: UpstreamOptions | None = None) -> None:
        self.rpc_timeout = rpc_timeout
        self.upstream = upstream or upstream_options(TubeMQSettings())
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tubemq-spark-core", daemon=True)
        self._thread.start()
        self._readers: dict[str, RangeReader] = {}
        self._producers: dict[str, Producer] = {}
        self._masters: dict[str, MasterClient] = {}
        self._producer_lock: asyncio.Lock | None = None
        self._discovery_lock: asyncio.Lock | None = None
        self.pool: ConnectionPool = self.run(self._new_pool())
        self._token = secrets.token_hex(4)
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<SparkCore pid={self.pid} producers={sorted(self._producers)} "
            f"readers={sorted(self._readers)} {self.pool!r}>"
        )

    async def _new_pool(self) -> ConnectionPool:
        self._producer_lock = asyncio.Lock()
        self._discovery_lock = asyncio.Lock()
        upstream = self.upstream
        return ConnectionPool(
            connect_timeout=min(3.0, self.rpc_timeout),
            ssl=upstream.ssl,
            server_hostname=upstream.server_hostname,
            credentials=upstream.credentials,
        )

    # --- bridging sync and async -------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the core's loop and wait for its result (its exception is raised here)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the core's loop; its result (or exception) comes from the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def iterate(self, source: AsyncGenerator[T, None]) -> Iterator[T]:
        """Walk an async generator from synchronous code; closing this generator closes ``source``."""

        async def step() -> list[T]:
            try:
                return [await source.__anext__()]
            except StopAsyncIteration:
                return []

        try:
            while got := self.run(step()):
                yield got[0]
        finally:
            self.run(source.aclose())

    # --- shared clients ----------------------------------------------------------------------------

    def reader(self, group_prefix: str) -> RangeReader:
        reader = self._readers.get(group_prefix)
        if reader is None:
            reader = RangeReader(self.pool, group_prefix=group_prefix, rpc_timeout=self.rpc_timeout)
            self._readers[group_prefix] = reader
        return reader

    def master(self, masters: str) -> MasterClient:
        client = self._masters.get(masters)
        if client is None:
            addresses = parse_address_list(masters, self.upstream.master_port)
            client = MasterClient(addresses, self.pool, timeout=self.rpc_timeout)
            self._masters[masters] = client
        return client

    async def producer(self, masters: str, topic: str) -> Producer:
        """The process's producer for ``masters``, started, with ``topic`` published."""
        assert self._producer_lock is not None
        async with self._producer_lock:
            producer = self._producers.get(masters)
            if producer is None:
                addresses = parse_address_list(masters, self.upstream.master_port)
                config = ProducerConfig(rpc_timeout=self.rpc_timeout, send_timeout=3 * self.rpc_timeout)
                producer = Producer(addresses, pool=self.pool, config=config)
                await producer.start()
                self._producers[masters] = producer
            if topic not in producer.published_topics:
                await producer.register_topic(topic)
            return producer

    async def discover(self, masters: str, topic: str, group_prefix: str) -> TopicLayout:
        """The topic's partitions (one discovery at a time per process: they share one private group)."""
        assert self._discovery_lock is not None
        group = f"{group_prefix}_meta_{self._token}"
        async with self._discovery_lock:
            return await discover_partitions(
                self.master(masters),
                topic,
                client_id=consumer_id(group),
                group=group,
                host_name=local_ipv4(),
            )

    def close(self) -> None:
        """Close producers and the pool, then stop the loop; idempotent."""
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True

        async def shutdown() -> None:
            for producer in self._producers.values():
                await producer.close()
            await self.pool.close()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=5.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5.0)
            if not self._thread.is_alive():
                self.loop.close()  # its self-pipe sockets too (else ResourceWarnings at exit)


_lock = threading.Lock()
_cores: dict[tuple[str, str], SparkCore] = {}


def get_core(rpc_timeout: float = 10.0, tubemq: TubeMQSettings | None = None) -> SparkCore:
    """This process's core for ``tubemq``'s TLS and authentication settings, made on first use (again after a
    fork). Raises ValueError when a TLS file named there cannot be used."""
    settings = tubemq or TubeMQSettings()
    key = (settings.model_dump_json(), settings.auth.password.get_secret_value())
    with _lock:
        core = _cores.get(key)
        if core is None or core.pid != os.getpid():
            core = _cores[key] = SparkCore(rpc_timeout, upstream_options(settings))
        return core


def _close_at_exit() -> None:
    for core in list(_cores.values()):
        core.close()


atexit.register(_close_at_exit)


async def plan_topic(
    core: SparkCore, masters: str, topic: str, group_prefix: str
) -> dict[str, PlannedPartition]:
    """Every subscribable partition of ``topic`` by partition key, with its store's bounds (asked once per
    store: the partitions of a store share its index)."""
    layout = await core.discover(masters, topic, group_prefix)
    reader = core.reader(group_prefix)
    reader.visit_token = layout.visit_token
    stores: dict[tuple[int, int], Partition] = {}
    for p in layout.partitions:
        stores.setdefault((p.broker.broker_id, p.store_index), p)
    found = await asyncio.gather(*(reader.bounds(p) for p in stores.values()))
    bounds = dict(zip(stores, found, strict=True))
    return {
        p.partition_key: PlannedPartition(p, bounds[(p.broker.broker_id, p.store_index)], layout.visit_token)
        for p in layout.partitions
    }
