"""MasterClient fail-over against scripted master servers on loopback sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message

from gateway.embedded.server import CallContext, RemoteFault, RpcServer
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import (
    STATUS_ERROR,
    ConnectError,
    RemoteException,
    StandbyException,
)
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.master import MasterClient, MasterSwitched
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method
from tests.support.serving import free_port

STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"


class ScriptedMaster:
    """Answers a producer close with 200, or with the RPC exception ``fault`` when set."""

    def __init__(self, network: MemoryNetwork, host: str, fault: tuple[int, str] | None = None) -> None:
        self.fault = fault
        self.calls = 0
        self.server = RpcServer(self.handle, host=host, start_server=network.start_server)

    async def handle(self, method: int, request: Message, ctx: CallContext) -> Message:
        self.calls += 1
        if self.fault is not None:
            status, name = self.fault
            raise RemoteFault(status, name, f"{self.server.address} is not master now.")
        return master_pb.CloseResponseM2P(success=True, errCode=200, errMsg=f"OK from {self.server.port}")

    @property
    def address(self) -> NodeAddress:
        return self.server.address


@pytest.fixture
async def pool(network: MemoryNetwork) -> AsyncIterator[ConnectionPool]:
    async with ConnectionPool(connect_timeout=1.0, connector=network.create_connection) as p:
        yield p


@pytest.fixture
async def masters(network: MemoryNetwork) -> AsyncIterator[tuple[ScriptedMaster, ScriptedMaster]]:
    # 127.0.0.1:* sorts before 127.0.0.2:*, so the first one is tried first
    first, second = ScriptedMaster(network, "127.0.0.1"), ScriptedMaster(network, "127.0.0.2")
    await first.server.start()
    await second.server.start()
    yield first, second
    await first.server.stop()
    await second.server.stop()


def close_request() -> master_pb.CloseRequestP2M:
    return master_pb.CloseRequestP2M(clientId="test-client")


def dead_address() -> NodeAddress:
    return NodeAddress("127.0.0.1", free_port())


def test_addresses_are_deduplicated_and_sorted() -> None:
    pool = ConnectionPool()
    a, b, c = NodeAddress("10.0.0.2", 8715), NodeAddress("10.0.0.1", 8715), NodeAddress("10.0.0.1", 8000)
    client = MasterClient([a, b, a, c], pool)
    assert client.addresses == (c, b, a)
    assert client.current == c
    assert "current=10.0.0.1:8000" in repr(client)
    with pytest.raises(ValueError):
        MasterClient([], pool)


async def test_standby_first_in_the_list_is_skipped(
    pool: ConnectionPool, masters: tuple[ScriptedMaster, ScriptedMaster]
) -> None:
    standby, active = masters
    standby.fault = (STATUS_ERROR, STANDBY)
    bus = EventBus()
    switches: list[MasterSwitched] = []
    bus.subscribe(switches.append, MasterSwitched)
    client = MasterClient([active.address, standby.address], pool, timeout=2.0, events=bus)
    assert client.current == standby.address
    answer = await client.call(Method.PRODUCER_CLOSE, close_request())
    assert isinstance(answer, master_pb.CloseResponseM2P)
    assert answer.errMsg == f"OK from {active.address.port}"
    assert client.current == active.address
    assert [(s.previous, s.current) for s in switches] == [(standby.address, active.address)]
    assert "StandbyException" in switches[0].reason
    # the next call goes straight to the active master
    await client.call(Method.PRODUCER_CLOSE, close_request())
    assert (standby.calls, active.calls) == (1, 2)


async def test_unreachable_master_is_skipped(
    pool: ConnectionPool, masters: tuple[ScriptedMaster, ScriptedMaster]
) -> None:
    active = masters[1]
    dead = dead_address()
    client = MasterClient([dead, active.address], pool, timeout=2.0)
    assert client.current == dead
    await client.call(Method.PRODUCER_CLOSE, close_request())
    assert client.current == active.address


async def test_other_remote_exceptions_are_raised_at_once(
    pool: ConnectionPool, masters: tuple[ScriptedMaster, ScriptedMaster]
) -> None:
    first, second = masters
    first.fault = (STATUS_ERROR, "java.lang.Exception")
    client = MasterClient([first.address, second.address], pool, timeout=2.0)
    with pytest.raises(RemoteException) as caught:
        await client.call(Method.PRODUCER_CLOSE, close_request())
    assert not isinstance(caught.value, StandbyException)
    assert client.current == first.address
    assert second.calls == 0


async def test_all_masters_failing_names_every_master(
    pool: ConnectionPool, masters: tuple[ScriptedMaster, ScriptedMaster]
) -> None:
    first, second = masters
    first.fault = second.fault = (STATUS_ERROR, STANDBY)
    client = MasterClient([first.address, second.address], pool, timeout=2.0)
    with pytest.raises(StandbyException) as caught:
        await client.call(Method.PRODUCER_CLOSE, close_request())
    text = str(caught.value)
    assert str(first.address) in text and str(second.address) in text
    assert isinstance(caught.value.__cause__, StandbyException)
    assert (first.calls, second.calls) == (1, 1)


async def test_all_masters_unreachable_raises_connect_error(pool: ConnectionPool) -> None:
    first = dead_address()
    dead = [first, next(a for a in iter(dead_address, None) if a != first)]
    client = MasterClient(dead, pool, timeout=1.0)
    with pytest.raises(ConnectError, match="no master answered \\(2 tried\\)"):
        await client.call(Method.PRODUCER_CLOSE, close_request())


async def test_single_master_fails_without_switch_events(
    pool: ConnectionPool, masters: tuple[ScriptedMaster, ScriptedMaster]
) -> None:
    only = masters[0]
    only.fault = (STATUS_ERROR, STANDBY)
    bus = EventBus()
    seen: list[object] = []
    bus.subscribe(seen.append)
    client = MasterClient([only.address], pool, timeout=1.0, events=bus)
    with pytest.raises(StandbyException):
        await client.call(Method.PRODUCER_CLOSE, close_request())
    assert not any(isinstance(e, MasterSwitched) for e in seen)
