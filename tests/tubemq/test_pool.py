"""ConnectionPool over real loopback sockets: sharing, idle reclaim, recovery, backoff, stats."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator

import pytest

from gateway.embedded.server import RpcServer
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import ClientClosed, ConnectError, ConnectionClosed, RequestTimeout
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.backoff import ConstantBackoff
from gateway.tubemq.net.link import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    CloseReason,
    ConnectionTerminated,
)
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.net.pool_state import PoolConnectFailed, PoolLinkOpened, PoolLinkReclaimed
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartResponseM2P
from tests.support.faultproxy import EchoHandler, FaultProxy, heartbeat
from tests.support.serving import free_port
from tests.support.waiting import ManualClock, eventually

HEARTBEAT = 2


@pytest.fixture
async def server() -> AsyncIterator[RpcServer]:
    async with RpcServer(EchoHandler()) as srv:
        yield srv


async def call(
    pool: ConnectionPool, address: NodeAddress, client_id: str, *steer: str, wait: float = 2.0
) -> str:
    response = await pool.request(address, HEARTBEAT, heartbeat(client_id, *steer), wait)
    assert isinstance(response, HeartResponseM2P)
    return response.topicInfos[0]


async def test_two_clients_of_one_node_share_one_socket(server: RpcServer) -> None:
    async with ConnectionPool() as pool:

        async def client(name: str) -> list[str]:
            return [await call(pool, server.address, f"{name}-{i}", "delay:0.001") for i in range(20)]

        a, b = await asyncio.gather(client("a"), client("b"))
        assert a == [f"a-{i}" for i in range(20)] and b == [f"b-{i}" for i in range(20)]
        assert server.connections == 1 and server.links_accepted == 1
        stats = pool.stats()
        assert stats.open_links == 1 and stats.in_flight == 0
        assert stats.nodes[server.address].open_links == 1
        assert "nodes=1 links=1 in_flight=0 per_node=1" in repr(pool)


async def test_idle_link_is_reclaimed_and_reopened(server: RpcServer) -> None:
    bus = EventBus()
    seen: list[object] = []
    bus.subscribe(seen.append, PoolLinkOpened, PoolLinkReclaimed)
    async with ConnectionPool(idle_timeout=0.4, events=bus) as pool:
        assert pool.sweep_interval == pytest.approx(0.1)
        # A request outlasting idle_timeout keeps its link: only links with nothing in flight are idle.
        assert await call(pool, server.address, "long", "delay:0.6") == "long"
        assert pool.stats().idle_reclaims == 0
        await eventually(lambda: pool.stats().idle_reclaims == 1)
        await eventually(lambda: server.connections == 0)
        assert pool.stats().open_links == 0
        assert await call(pool, server.address, "again") == "again"
        assert server.links_accepted == 2
    assert [type(e) for e in seen] == [PoolLinkOpened, PoolLinkReclaimed, PoolLinkOpened]
    reclaimed = seen[1]
    assert isinstance(reclaimed, PoolLinkReclaimed) and reclaimed.idle_seconds >= 0.4


async def test_server_stop_fails_pending_and_pool_recovers_on_restart() -> None:
    srv = RpcServer(EchoHandler())
    await srv.start()
    port = srv.port
    async with ConnectionPool(backoff=ConstantBackoff(0.05)) as pool:
        assert await call(pool, srv.address, "first") == "first"
        pending = [
            asyncio.create_task(call(pool, srv.address, f"p{i}", "delay:5", wait=10)) for i in range(3)
        ]
        await eventually(lambda: pool.stats().in_flight == 3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await srv.stop()
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert loop.time() - started < 1.0
        assert all(isinstance(r, ConnectionClosed) for r in results)
        async with RpcServer(EchoHandler(), port=port) as again:
            assert await call(pool, again.address, "recovered") == "recovered"
            assert again.connections == 1


async def test_failed_node_fails_fast_during_backoff() -> None:
    port = free_port()
    address = NodeAddress("127.0.0.1", port)
    bus = EventBus()
    failures: list[PoolConnectFailed] = []
    bus.subscribe(failures.append, PoolConnectFailed)
    clock = ManualClock()
    async with ConnectionPool(backoff=ConstantBackoff(0.3), events=bus, clock=clock) as pool:
        with pytest.raises(ConnectError, match=f"127.0.0.1:{port}"):
            await call(pool, address, "x")
        with pytest.raises(
            ConnectError,
            match=r"1 failed attempt\(s\), last: ConnectionRefusedError.*next attempt in 0\.30s",
        ):
            await call(pool, address, "x")
        assert pool.stats().connect_failures == 1
        assert pool.stats().nodes[address].connect_failures == 1
        assert failures and failures[0].address == address and failures[0].retry_in == 0.3
        async with RpcServer(EchoHandler(), port=port) as srv:
            with pytest.raises(ConnectError, match=r"next attempt in 0\.10s"):
                clock.advance(0.2)  # still in the backoff, though the node is up again
                await call(pool, srv.address, "up")
            clock.advance(0.1)
            assert await call(pool, srv.address, "up") == "up"
            assert pool.stats().nodes[address].connect_failures == 0


@pytest.fixture
async def silent_address() -> AsyncIterator[NodeAddress]:
    """A plain server that never says a word: a TLS handshake against it hangs."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    plain = await asyncio.start_server(silent, "127.0.0.1", 0)
    yield NodeAddress("127.0.0.1", plain.sockets[0].getsockname()[1])
    plain.close()
    await plain.wait_closed()


async def test_waiting_for_a_connect_is_bounded_by_the_request_timeout(silent_address: NodeAddress) -> None:
    async with ConnectionPool(ssl=ssl.create_default_context()) as pool:
        waits = [call(pool, silent_address, f"w{i}", wait=0.2) for i in range(2)]
        results = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(r, RequestTimeout) and "still connecting" in str(r) for r in results)
        assert pool.stats().nodes[silent_address].connecting  # the shared attempt carries on


async def test_close_while_connecting_fails_the_waiters(silent_address: NodeAddress) -> None:
    pool = ConnectionPool(ssl=ssl.create_default_context())
    waiter = asyncio.create_task(call(pool, silent_address, "w", wait=5))
    await eventually(lambda: pool.stats().nodes.get(silent_address) is not None)
    await pool.close()
    with pytest.raises(ClientClosed, match="while connecting"):
        await waiter


async def test_connections_per_node_spreads_load(server: RpcServer) -> None:
    async with ConnectionPool(connections_per_node=2) as pool:
        await call(pool, server.address, "warm")
        await asyncio.gather(*(call(pool, server.address, f"a{i}", "delay:0.05") for i in range(20)))
        await asyncio.gather(*(call(pool, server.address, f"b{i}", "delay:0.05") for i in range(20)))
        links = pool.links(server.address)
        assert len(links) == 2 and server.connections == 2
        assert all(link.requests_sent > 0 for link in links)


async def test_preconnect_opens_in_the_background(server: RpcServer) -> None:
    async with ConnectionPool() as pool:
        pool.preconnect([server.address])
        await eventually(lambda: pool.stats().open_links == 1)
        assert server.connections == 1
        assert await call(pool, server.address, "x") == "x"
        assert server.links_accepted == 1


async def test_broken_link_is_replaced_on_next_use(server: RpcServer) -> None:
    async with FaultProxy(server.address) as proxy, ConnectionPool() as pool:
        assert await call(pool, proxy.address, "one") == "one"
        proxy.corrupt_next()
        with pytest.raises(ConnectionClosed):
            await call(pool, proxy.address, "garbled")
        assert await call(pool, proxy.address, "two") == "two"
        assert proxy.links_accepted == 2 and pool.stats().open_links == 1


async def test_black_holed_link_is_replaced_within_two_request_timeouts(server: RpcServer) -> None:
    bus = EventBus()
    closed: list[ConnectionTerminated] = []
    bus.subscribe(closed.append, ConnectionTerminated)
    async with FaultProxy(server.address) as proxy, ConnectionPool(events=bus) as pool:
        assert await call(pool, proxy.address, "one") == "one"
        proxy.swallow()  # the link stays open but nothing comes back any more
        with pytest.raises(RequestTimeout):
            await call(pool, proxy.address, "lost", wait=0.3)
        # Nothing was read since that request went out: the link was retired, the next request opens a
        # new one and is answered within its own timeout.
        assert [e.reason for e in closed] == [CloseReason.NO_ANSWER]
        assert await call(pool, proxy.address, "two", wait=0.3) == "two"
        assert proxy.links_accepted == 2 and pool.stats().open_links == 1


async def test_a_slow_answer_on_a_live_link_keeps_the_link(server: RpcServer) -> None:
    async with ConnectionPool() as pool:
        slow = asyncio.create_task(call(pool, server.address, "slow", "delay:1.0", wait=0.3))
        await eventually(lambda: pool.stats().in_flight == 1)
        # Another answer arrives on the link after the slow request was sent: the link is alive.
        assert await call(pool, server.address, "quick") == "quick"
        with pytest.raises(RequestTimeout):
            await slow
        assert await call(pool, server.address, "after") == "after"
        assert server.links_accepted == 1


async def test_links_use_tcp_keepalive(server: RpcServer) -> None:
    async with ConnectionPool() as pool:
        assert await call(pool, server.address, "one") == "one"
        (link,) = pool.links(server.address)
        sock = link.socket
        assert sock is not None
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_COUNT


async def test_stats_count_unknown_answers(server: RpcServer) -> None:
    async with ConnectionPool() as pool:
        task = asyncio.create_task(call(pool, server.address, "abandoned", "delay:0.05"))
        await eventually(lambda: pool.stats().in_flight == 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await eventually(lambda: pool.stats().unknown_answers == 1)


async def test_close_fails_pending_and_refuses_new_requests(server: RpcServer) -> None:
    pool = ConnectionPool()
    pending = asyncio.create_task(call(pool, server.address, "p", "delay:5", wait=10))
    await eventually(lambda: pool.stats().in_flight == 1)
    await pool.close()
    with pytest.raises(ConnectionClosed):
        await pending
    with pytest.raises(ClientClosed):
        await call(pool, server.address, "x")
    assert "closed" in repr(pool)
    await pool.close()  # idempotent


def test_a_pool_belongs_to_one_event_loop() -> None:
    pool = ConnectionPool()

    async def use() -> None:
        pool.preconnect([])

    asyncio.run(use())
    with pytest.raises(RuntimeError, match="another event loop"):
        asyncio.run(use())


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        ConnectionPool(connections_per_node=0)
    with pytest.raises(ValueError):
        ConnectionPool(idle_timeout=0)
    assert ConnectionPool(idle_timeout=180).sweep_interval == 20.0
