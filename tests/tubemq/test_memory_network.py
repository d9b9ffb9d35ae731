"""The in-memory network (gateway/tubemq/net/memory.py): streams with a socket's order, flow control and ends,
carrying the real frames between the client core and the real embedded master and brokers with no socket."""

from __future__ import annotations

import asyncio
import errno
import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.server import RpcServer
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.errors import ConnectError, ConnectionClosed
from gateway.tubemq.net import ConnectionPool, MemoryNetwork
from gateway.tubemq.producer import Producer, ProducerConfig
from gateway.tubemq.wire.payload import decode_payload
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartResponseM2P
from tests.support.faultproxy import EchoHandler, heartbeat

HEARTBEAT = 2


class Sink(asyncio.Protocol):
    """A plain protocol recording what it reads and how its stream ended."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.lost: list[Exception | None] = []
        self.paused = 0
        self.resumed = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        self.resumed += 1


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _settle(turns: int = 10) -> None:
    """Let the loop turn ``turns`` times: deliveries happen on later turns, as a socket's reads do."""
    for _ in range(turns):
        await asyncio.sleep(0)


@given(pieces=st.lists(st.binary(min_size=1, max_size=4096), max_size=40))
async def test_what_is_written_arrives_whole_and_in_order(pieces: list[bytes]) -> None:
    network = MemoryNetwork()
    listener, port = await network.start_server(_echo, "127.0.0.1")
    transport, sink = await network.create_connection(Sink, "127.0.0.1", port)
    assert isinstance(sink, Sink)
    for piece in pieces:
        transport.write(piece)
    expected = b"".join(pieces)
    await _settle(len(pieces) + 10)  # one delivery per loop turn at most
    assert bytes(sink.data) == expected
    transport.close()
    await _settle()
    assert sink.lost == [None]
    listener.close()


async def test_a_receiver_that_stops_reading_pushes_back_on_the_writer() -> None:
    network = MemoryNetwork()
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing: its reader's buffer fills and pauses the stream

    _, port = await network.start_server(hold, "127.0.0.1", limit=1024)
    transport, sink = await network.create_connection(Sink, "127.0.0.1", port)
    assert isinstance(sink, Sink)
    transport.write(b"x" * (1 << 20))
    await _settle()
    assert sink.paused == 1 and sink.resumed == 0
    assert transport.get_write_buffer_size() > 0  # waiting with the sender, not lost
    transport.abort()
    await _settle()


async def test_close_delivers_then_ends_and_abort_resets_the_peer() -> None:
    network = MemoryNetwork()
    peers: list[asyncio.StreamReader] = []

    async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(reader)

    _, port = await network.start_server(keep, "127.0.0.1")
    transport, _ = await network.create_connection(Sink, "127.0.0.1", port)
    transport.write(b"last words")
    transport.close()
    await _settle()
    assert await peers[0].read() == b"last words"  # then the end of the stream

    transport, _ = await network.create_connection(Sink, "127.0.0.1", port)
    transport.write(b"dropped")
    transport.abort()
    await _settle()
    with pytest.raises(ConnectionResetError):
        await peers[1].read()


async def test_addresses_are_the_networks_own() -> None:
    network = MemoryNetwork()
    listener, port = await network.start_server(_echo, "127.0.0.1", 9999)
    assert port == 9999
    with pytest.raises(OSError) as taken:
        await network.start_server(_echo, "127.0.0.1", 9999)
    assert taken.value.errno == errno.EADDRINUSE
    listener.close()
    with pytest.raises(ConnectionRefusedError):
        await network.create_connection(Sink, "127.0.0.1", 9999)
    with pytest.raises(ValueError, match="TLS"):
        await network.create_connection(Sink, "127.0.0.1", 9999, ssl=ssl.create_default_context())


@pytest.fixture
async def network() -> MemoryNetwork:
    return MemoryNetwork()


async def test_the_pool_talks_to_an_embedded_server_without_a_socket(network: MemoryNetwork) -> None:
    async with (
        RpcServer(EchoHandler(), start_server=network.start_server) as server,
        ConnectionPool(connector=network.create_connection) as pool,
    ):
        answer = await pool.request(server.address, HEARTBEAT, heartbeat("memory"), 2.0)
        assert isinstance(answer, HeartResponseM2P) and answer.topicInfos[0] == "memory"
        [link] = pool.links(server.address)
        assert link.socket is None and network.connections == 1
        await server.stop()  # the server's end goes: the link closes and the pool says so
        with pytest.raises((ConnectionClosed, ConnectError)):
            await pool.request(server.address, HEARTBEAT, heartbeat("gone"), 2.0)


async def test_a_producer_publishes_to_an_embedded_cluster_in_memory(network: MemoryNetwork) -> None:
    async with (
        EmbeddedCluster([TopicSpec("demo", 2)], brokers=2, start_server=network.start_server) as cluster,
        ConnectionPool(connector=network.create_connection) as pool,
    ):
        producer = Producer(
            cluster.master_addresses, pool=pool, config=ProducerConfig(heartbeat_interval=0.5)
        )
        await producer.start()
        await producer.register_topic("demo")
        try:
            big = b"b" * (900 << 10)  # a frame over three reads' worth: it crosses in pieces
            results = [await producer.send("demo", body) for body in (b"small", big)]
        finally:
            await producer.close()
        for result, body in zip(results, (b"small", big), strict=True):
            store = cluster.broker(result.broker_id).store("demo", result.partition_id // 10000)
            [stored] = store.read(result.partition_id, result.append_offset, max_entries=1).messages
            assert decode_payload(stored.data, stored.flag).body == body
