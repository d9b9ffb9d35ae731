"""What the producer tests share: timings (``FAST``; ``QUIET`` without heartbeats), an event ``Recorder``,
what a broker holds of a send (``stored``, ``held_payload``), the batch tests' harness (brokers 1 and 2 on the
in-memory network, a pool whose events are recorded, a master and a producer ``running`` over them, a
``Scripted`` broker answering every send with one code or never) and a loopback ``SendBroker`` that answers
a send by its data (``send_request``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from google.protobuf.message import Message

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.calls import CallContext, RemoteFault
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.server import RpcServer
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.backoff import ConstantBackoff
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig, SendResult
from gateway.tubemq.wire.payload import DecodedPayload, decode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb

__all__ = [
    "FAST",
    "QUIET",
    "SEND",
    "Recorder",
    "Scripted",
    "SendBroker",
    "brokers",
    "held_payload",
    "pool",
    "rec",
    "running",
    "send_request",
    "start_producer",
    "stored",
]

FAST = ProducerConfig(
    heartbeat_interval=0.2,
    rpc_timeout=2.0,
    send_timeout=3.0,
    publish_timeout=3.0,
    register_backoff_base=0.05,
    register_backoff_max=0.2,
    failure_cooldown=0.3,
)


@dataclass
class Recorder:
    """Every event the bus delivers, in order."""

    bus: EventBus = field(default_factory=EventBus)
    events: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bus.subscribe(self.events.append)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def stored(brokers: list[EmbeddedBroker], result: SendResult) -> Any:
    """The message the broker holds at the result's offset."""
    broker = next(b for b in brokers if b.broker_id == result.broker_id)
    store = broker.store(result.topic, result.partition_id // 10000)
    read = store.read(result.partition_id, result.append_offset, max_entries=1)
    assert len(read.messages) == 1, result
    return read.messages[0]


#: FAST without heartbeats: none hides what a batch test stages
QUIET = replace(FAST, heartbeat_interval=60.0)


class Scripted:
    """Broker 2 for the embedded master: answers every send with ``code``, or never when ``silent``."""

    def __init__(
        self, network: MemoryNetwork, code: int = 503, message: str = "scripted", *, silent: bool = False
    ) -> None:
        self.broker_id = 2
        self.code = code
        self.message = message
        self.silent = silent
        self.topics = {"demo": TopicSpec("demo", 2)}
        self.is_serving = True
        self.calls = 0
        self.expected = 0
        self.arrived = asyncio.Event()
        self.server = RpcServer(self.handle, start_server=network.start_server)

    @property
    def address(self) -> NodeAddress:
        return self.server.address

    async def handle(self, method: int, request: Message, ctx: CallContext) -> Message:
        self.calls += 1
        if self.expected and self.calls >= self.expected:
            self.arrived.set()
        if self.silent:
            await asyncio.sleep(30)
        return broker_pb.SendMessageResponseB2P(success=False, errCode=self.code, errMsg=self.message)


@pytest.fixture
def rec() -> Recorder:
    """The events of the producer and pool the batch fixtures make."""
    return Recorder()


@pytest.fixture
async def pool(network: MemoryNetwork, rec: Recorder) -> AsyncIterator[ConnectionPool]:
    """A pool on the test's in-memory network whose events ``rec`` records."""
    async with ConnectionPool(
        connect_timeout=1.0,
        backoff=ConstantBackoff(0.05),
        events=rec.bus,
        connector=network.create_connection,
    ) as p:
        yield p


@pytest.fixture
async def brokers(network: MemoryNetwork) -> AsyncIterator[list[EmbeddedBroker]]:
    """Brokers 1 and 2 holding "demo" (2 partitions each) on the test's in-memory network."""
    started = [EmbeddedBroker(i, [TopicSpec("demo", 2)], start_server=network.start_server) for i in (1, 2)]
    for broker in started:
        await broker.start()
    yield started
    for broker in started:
        await broker.stop()


async def start_producer(
    master: EmbeddedMaster, pool: ConnectionPool, config: ProducerConfig, rec: Recorder
) -> Producer:
    producer = Producer([master.address], pool=pool, config=config, events=rec.bus)
    await producer.start()
    await producer.register_topic("demo")
    return producer


@asynccontextmanager
async def running(
    network: MemoryNetwork,
    nodes: list[Any],
    pool: ConnectionPool,
    rec: Recorder,
    config: ProducerConfig = QUIET,
) -> AsyncIterator[Producer]:
    """A master over ``nodes`` (scripted ones started here) and a producer that has published "demo"."""
    scripted = [node for node in nodes if isinstance(node, Scripted)]
    for node in scripted:
        await node.server.start()
    try:
        async with EmbeddedMaster(nodes, start_server=network.start_server) as master:
            producer = await start_producer(master, pool, config, rec)
            try:
                yield producer
            finally:
                await producer.close()
    finally:
        for node in scripted:
            await node.server.stop()


def held_payload(brokers: list[EmbeddedBroker], result: SendResult) -> DecodedPayload:
    """The payload the broker holds at the result's offset, decoded."""
    message = stored(brokers, result)
    return decode_payload(message.data, message.flag)


SEND = 13


class SendBroker:
    """Answers a send by its data: ``ok-N`` stored as message N, ``busy`` errCode 503, ``fault`` an RPC
    exception, ``text`` a non-ASCII errMsg, ``hang`` never."""

    def __init__(self) -> None:
        self.server = RpcServer(self.handle)
        self.hanging = 0

    async def handle(self, method: int, request: Message, ctx: CallContext) -> Message:
        assert isinstance(request, broker_pb.SendMessageRequestP2B)
        data = request.data
        if data.startswith(b"ok-"):
            n = int(data[3:])
            return broker_pb.SendMessageResponseB2P(
                success=True, errCode=200, errMsg="OK", messageId=n, appendTime=1000 + n, appendOffset=n
            )
        if data == b"busy":
            return broker_pb.SendMessageResponseB2P(success=False, errCode=503, errMsg="busy")
        if data == b"text":
            return broker_pb.SendMessageResponseB2P(success=True, errCode=200, errMsg="süß 7")
        if data == b"fault":
            raise RemoteFault(STATUS_ERROR, "java.lang.IllegalStateException", "scripted")
        self.hanging += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def send_request(data: bytes) -> broker_pb.SendMessageRequestP2B:
    """A SendMessage request of ``data`` to partition 0 of "demo", as the producer writes one."""
    request = broker_pb.SendMessageRequestP2B(
        clientId="c", topicName="demo", partitionId=0, data=data, flag=0, checkSum=-1, sentAddr=1
    )
    request.authInfo.visitAuthorizedToken = 0
    return request
