"""Connection: correlation, timeouts, failures and TLS over real loopback sockets."""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.embedded.server import RpcServer
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import (
    ConnectError,
    ConnectionClosed,
    ProtocolError,
    RemoteException,
    RequestTimeout,
    ServiceStoppingException,
    StandbyException,
)
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.connection import _WRITE_HIGH_WATER, Connection, Outcome, RequestCompleted
from gateway.tubemq.net.link import CloseReason, ConnectionOpened, ConnectionState, ConnectionTerminated
from gateway.tubemq.wire.frame import encode_frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartResponseM2P
from tests.support.faultproxy import EchoHandler, FaultProxy, heartbeat
from tests.support.waiting import eventually

HEARTBEAT = 2
STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"
STOPPING = "org.apache.inlong.tubemq.corerpc.exception.ServiceStoppingException"


@pytest.fixture
def handler() -> EchoHandler:
    return EchoHandler()


@pytest.fixture
async def server(handler: EchoHandler) -> AsyncIterator[RpcServer]:
    async with RpcServer(handler) as srv:
        yield srv


@pytest.fixture
async def conn(server: RpcServer) -> AsyncIterator[Connection]:
    link = Connection(server.address)
    await link.connect(1.0)
    yield link
    await link.close()


async def call(link: Connection, client_id: str, *steer: str, wait: float = 2.0) -> str:
    response = await link.request(HEARTBEAT, heartbeat(client_id, *steer), wait)
    assert isinstance(response, HeartResponseM2P)
    return response.topicInfos[0]


async def test_thousand_concurrent_requests_are_correlated(server: RpcServer, conn: Connection) -> None:
    rng = random.Random(7)

    async def one(i: int) -> None:
        # Random delays make the server answer out of order.
        # A generous request timeout: 1000 requests on a busy machine may take seconds; what the test checks
        # is that every answer reaches its caller, not how fast.
        steer = f"delay:{rng.random() * 0.05:.4f}"
        assert await call(conn, f"client-{i}", steer, wait=30.0) == f"client-{i}"

    await asyncio.gather(*(one(i) for i in range(1000)))
    assert server.connections == 1
    assert conn.in_flight == 0 and conn.unknown_answers == 0
    assert conn.requests_sent == 1000 and conn.idle_since is not None


async def test_serial_numbers_wrap_around_int32(conn: Connection) -> None:
    conn._serial = 2**31 - 2  # two requests away from the wrap
    for i in range(4):
        assert await call(conn, f"w{i}") == f"w{i}"
    assert conn._serial == -(2**31) + 2


async def test_request_timeout_with_traffic_on_the_link_leaves_it_usable(conn: Connection) -> None:
    # The server drops its answer too: it is past the request's timeout as sent on the wire.
    slow = asyncio.create_task(call(conn, "slow", "delay:0.2", wait=0.05))
    await eventually(lambda: conn.in_flight == 1)
    assert await call(conn, "quick") == "quick"  # read after the slow request went out: the link lives
    with pytest.raises(RequestTimeout, match=r"within 0\.05s"):
        await slow
    assert conn.in_flight == 0 and conn.is_open
    assert await call(conn, "after") == "after"


async def test_request_timeout_with_nothing_read_retires_the_link(conn: Connection) -> None:
    other = asyncio.create_task(call(conn, "other", "delay:1.0", wait=2.0))
    await eventually(lambda: conn.in_flight == 1)
    with pytest.raises(RequestTimeout):
        await call(conn, "slow", "delay:0.2", wait=0.05)
    assert conn.is_closed and conn.close_reason is CloseReason.NO_ANSWER
    with pytest.raises(ConnectionClosed, match="nothing read"):
        await other  # the rest of the link's requests fail at once, retriable elsewhere


async def test_cancelling_a_request_leaves_the_link_usable(conn: Connection) -> None:
    task = asyncio.create_task(call(conn, "cancelled", "delay:0.1"))
    await eventually(lambda: conn.in_flight == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert conn.in_flight == 0 and conn.is_open
    assert await call(conn, "next") == "next"
    await eventually(lambda: conn.unknown_answers == 1)


async def test_timeout_bounds_are_validated(conn: Connection) -> None:
    with pytest.raises(ValueError, match="timeout"):
        await conn.request(HEARTBEAT, heartbeat("x"), 0)


async def test_remote_io_exception_is_delivered_then_closes_the_link(conn: Connection) -> None:
    other = asyncio.create_task(call(conn, "bystander", "delay:1"))
    await eventually(lambda: conn.in_flight == 1)
    with pytest.raises(StandbyException) as info:
        await call(conn, "standby", f"fault:{STANDBY}")
    assert info.value.exception_name == STANDBY and "fault" in info.value.message
    assert conn.is_closed and conn.close_reason is CloseReason.REMOTE_IO_EXCEPTION
    with pytest.raises(ConnectionClosed) as closed:
        await other
    assert isinstance(closed.value.__cause__, StandbyException)


async def test_other_remote_exceptions_keep_the_link(conn: Connection) -> None:
    with pytest.raises(ServiceStoppingException):
        await call(conn, "x", f"fault:{STOPPING}")
    with pytest.raises(RemoteException, match="InvocationTargetException"):
        await call(conn, "x", "crash")
    assert conn.is_open
    assert await call(conn, "still") == "still"


async def test_server_stop_fails_pending_requests_promptly(server: RpcServer, conn: Connection) -> None:
    tasks = [asyncio.create_task(call(conn, f"p{i}", "delay:5", wait=10)) for i in range(5)]
    await eventually(lambda: conn.in_flight == 5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await server.stop()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert loop.time() - started < 1.0
    assert all(isinstance(r, ConnectionClosed) for r in results)
    assert conn.is_closed and conn.close_reason in (CloseReason.PEER_CLOSED, CloseReason.RESET)
    with pytest.raises(ConnectionClosed, match="closed"):
        await call(conn, "late")


async def test_connect_error_names_the_address() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    link = Connection(NodeAddress("127.0.0.1", port))
    with pytest.raises(ConnectError, match=f"127.0.0.1:{port}"):
        await link.connect(1.0)
    assert link.is_closed and link.close_reason is CloseReason.CONNECT_FAILED
    with pytest.raises(ConnectionClosed):
        await call(link, "x")


async def raw_server(on_data: Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]) -> asyncio.Server:
    """A plain asyncio server that hands every chunk it reads to ``on_data``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await on_data(data, writer)
        except OSError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_garbage_from_the_peer_fails_pending_and_closes() -> None:
    async def junk(data: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    srv = await raw_server(junk)
    link = Connection(NodeAddress("127.0.0.1", srv.sockets[0].getsockname()[1]))
    try:
        await link.connect(1.0)
        with pytest.raises(ConnectionClosed) as info:
            await call(link, "x", wait=5)
        assert isinstance(info.value.__cause__, ProtocolError)
        assert link.is_closed and link.close_reason is CloseReason.PROTOCOL_ERROR
        assert "unparsable" in repr(link)
    finally:
        await link.close()
        srv.close()
        await srv.wait_closed()


async def test_answers_for_unknown_serials_are_counted() -> None:
    answer = HeartResponseM2P(success=True, errCode=200, errMsg="OK!", brokerCheckSum=-1, topicInfos=["r"])

    async def reply_twice(data: bytes, writer: asyncio.StreamWriter) -> None:
        from gateway.tubemq.wire.rpc_server import encode_response

        for frame in decoder.feed(data):
            writer.write(encode_response(frame.serial + 1000, HEARTBEAT, answer))
            writer.write(encode_response(frame.serial, HEARTBEAT, answer))
            writer.write(encode_response(frame.serial, HEARTBEAT, answer))

    decoder = FrameDecoder()
    srv = await raw_server(reply_twice)
    link = Connection(NodeAddress("127.0.0.1", srv.sockets[0].getsockname()[1]))
    try:
        await link.connect(1.0)
        assert await call(link, "x") == "r"
        await eventually(lambda: link.unknown_answers == 2)
        assert link.is_open
    finally:
        await link.close()
        srv.close()
        await srv.wait_closed()


async def test_an_answer_of_another_method_is_a_protocol_error() -> None:
    async def wrong_method(data: bytes, writer: asyncio.StreamWriter) -> None:
        from gateway.tubemq.wire.pb.MasterService_pb2 import CloseResponseM2P
        from gateway.tubemq.wire.rpc_server import encode_response

        for frame in decoder.feed(data):
            close = CloseResponseM2P(success=True, errCode=200, errMsg="OK!")
            writer.write(encode_response(frame.serial, 3, close))

    decoder = FrameDecoder()
    srv = await raw_server(wrong_method)
    link = Connection(NodeAddress("127.0.0.1", srv.sockets[0].getsockname()[1]))
    try:
        await link.connect(1.0)
        with pytest.raises(ProtocolError, match="method 3"):
            await call(link, "x")
    finally:
        await link.close()
        srv.close()
        await srv.wait_closed()


async def test_frame_bytes_that_are_not_an_rpc_answer_close_the_link() -> None:
    async def bad_payload(data: bytes, writer: asyncio.StreamWriter) -> None:
        for frame in decoder.feed(data):
            writer.write(encode_frame(frame.serial, b"\xff\xff\xff"))

    decoder = FrameDecoder()
    srv = await raw_server(bad_payload)
    link = Connection(NodeAddress("127.0.0.1", srv.sockets[0].getsockname()[1]))
    try:
        await link.connect(1.0)
        with pytest.raises(ConnectionClosed) as info:
            await call(link, "x")
        assert isinstance(info.value.__cause__, ProtocolError)
        assert link.close_reason is CloseReason.PROTOCOL_ERROR
    finally:
        await link.close()
        srv.close()
        await srv.wait_closed()


async def test_cut_links_fail_pending_requests(server: RpcServer, handler: EchoHandler) -> None:
    async with FaultProxy(server.address) as proxy:
        link = Connection(proxy.address)
        await link.connect(1.0)
        assert await call(link, "through") == "through"
        pending = asyncio.create_task(call(link, "cut", "delay:5", wait=10))
        await eventually(lambda: handler.calls >= 2)
        proxy.cut()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(pending, 1.0)
        assert link.is_closed
        await link.close()


async def test_stalled_link_times_out_and_is_retired(server: RpcServer) -> None:
    async with FaultProxy(server.address) as proxy:
        link = Connection(proxy.address)
        await link.connect(1.0)
        proxy.stall()
        with pytest.raises(RequestTimeout):
            await call(link, "stalled", wait=0.1)
        assert link.close_reason is CloseReason.NO_ANSWER
        proxy.resume()
        with pytest.raises(ConnectionClosed):
            await call(link, "resumed")
        await link.close()


async def test_corrupted_bytes_close_the_link(server: RpcServer) -> None:
    async with FaultProxy(server.address) as proxy:
        link = Connection(proxy.address)
        await link.connect(1.0)
        proxy.corrupt_next()
        with pytest.raises(ConnectionClosed) as info:
            await call(link, "garbled")
        assert isinstance(info.value.__cause__, ProtocolError)
        await link.close()


async def test_events_and_repr(server: RpcServer) -> None:
    bus = EventBus()
    seen: list[object] = []
    bus.subscribe(seen.append, ConnectionOpened, RequestCompleted, ConnectionTerminated)
    link = Connection(server.address, events=bus)
    assert "new" in repr(link) and link.state is ConnectionState.NEW
    await link.connect(1.0)
    await call(link, "a")
    assert "open in_flight=0 sent=1" in repr(link)
    with pytest.raises(RequestTimeout):
        await call(link, "b", "delay:0.2", wait=0.01)
    assert "closed (request timed out with nothing read since it was sent) in_flight=0 sent=2" in repr(link)
    await link.close()
    opened, ok, closed, timed_out = seen
    assert isinstance(opened, ConnectionOpened) and opened.address == server.address and not opened.tls
    assert isinstance(ok, RequestCompleted) and ok.outcome is Outcome.OK and ok.method == HEARTBEAT
    assert isinstance(closed, ConnectionTerminated) and closed.reason is CloseReason.NO_ANSWER
    assert isinstance(timed_out, RequestCompleted) and timed_out.outcome is Outcome.TIMEOUT


async def test_idle_questions(conn: Connection) -> None:
    now = conn.last_activity
    assert not conn.is_idle(now, 1.0)
    assert conn.is_idle(now + 1.0, 1.0)
    task = asyncio.create_task(call(conn, "busy", "delay:0.05"))
    await eventually(lambda: conn.in_flight == 1)
    assert conn.idle_since is None and not conn.is_idle(now + 100, 1.0)
    await task
    assert conn.idle_since is not None and conn.idle_since >= now


async def _writes_held_back(
    link: Connection, proxy: FaultProxy
) -> tuple[list[asyncio.Task[str]], asyncio.Task[str]]:
    """Stall ``proxy`` and write past the link's high-water mark; return the calls written and one more
    that waits for the socket to drain (nothing of it is sent yet)."""
    proxy.stall()
    big = "x" * (1 << 20)
    written = [asyncio.create_task(call(link, f"{i}{big}", wait=60.0)) for i in range(16)]
    transport = link._transport
    assert transport is not None
    await eventually(
        lambda: transport.get_write_buffer_size() > _WRITE_HIGH_WATER, what="a full write buffer"
    )
    waiting = asyncio.create_task(call(link, "after the backlog", wait=60.0))
    protocol = link._protocol
    assert protocol is not None
    await eventually(lambda: protocol._waiters, what="a call waiting for the socket to drain")
    assert not any(task.done() for task in [*written, waiting])
    return written, waiting


async def test_writes_wait_while_the_peer_reads_nothing_and_flow_when_it_reads(server: RpcServer) -> None:
    async with FaultProxy(server.address) as proxy:
        link = Connection(proxy.address)
        await link.connect(1.0)
        written, waiting = await _writes_held_back(link, proxy)
        proxy.resume()
        assert await waiting == "after the backlog"
        assert [len(await task) for task in written] == [(1 << 20) + len(str(i)) for i in range(16)]
        assert link.is_open and link.unknown_answers == 0
        await link.close()


async def test_a_link_cut_while_a_call_waits_to_write_fails_it(server: RpcServer) -> None:
    async with FaultProxy(server.address) as proxy:
        link = Connection(proxy.address)
        await link.connect(1.0)
        written, waiting = await _writes_held_back(link, proxy)
        proxy.cut()
        for task in [*written, waiting]:
            with pytest.raises(ConnectionClosed):
                await task
        assert link.close_reason in (CloseReason.RESET, CloseReason.PEER_CLOSED)
        await link.close()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_round_trip(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    async with RpcServer(EchoHandler(), ssl=server_ctx) as srv:
        link = Connection(srv.address, ssl=client_ctx)
        await link.connect(2.0)
        results = await asyncio.gather(*(call(link, f"tls-{i}", "delay:0.01") for i in range(20)))
        assert results == [f"tls-{i}" for i in range(20)]
        assert "tls" in repr(link) and srv.connections == 1
        await link.close()
        untrusted = Connection(srv.address, ssl=ssl.create_default_context())
        with pytest.raises(ConnectError, match="SSL"):
            await untrusted.connect(2.0)
