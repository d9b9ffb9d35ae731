"""The producer against an embedded master and brokers over loopback sockets."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import (
    BadRequest,
    ClientClosed,
    ClientError,
    ConnectError,
    MessageTooLarge,
    NoPartition,
    ServerReceiveOverflow,
    ServiceUnavailable,
    TopicNotPublished,
)
from gateway.tubemq.net.backoff import ConstantBackoff
from gateway.tubemq.net.master import MasterSwitched
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig, SendResult
from gateway.tubemq.producer.events import (
    BrokerShielded,
    BrokerUnshielded,
    ProducerHeartbeatFailed,
    ProducerRegistered,
    RegisterFailed,
    SendCompleted,
)
from gateway.tubemq.wire.payload import decode_payload, java_string_hash
from tests.support.producer_support import FAST, Recorder, Scripted, stored
from tests.support.waiting import ManualClock, eventually


@pytest.fixture
async def pool(network: MemoryNetwork) -> AsyncIterator[ConnectionPool]:
    async with ConnectionPool(
        connect_timeout=1.0, backoff=ConstantBackoff(0.05), connector=network.create_connection
    ) as p:
        yield p


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def clocked_pool(network: MemoryNetwork, clock: ManualClock) -> AsyncIterator[ConnectionPool]:
    """A pool whose reconnect backoff runs on the test's clock: given to a producer with the same clock, one
    ``clock.advance`` ends the breaker's cooldown and the pool's backoff alike, however busy the machine."""
    async with ConnectionPool(
        connect_timeout=1.0, backoff=ConstantBackoff(0.05), clock=clock, connector=network.create_connection
    ) as p:
        yield p


@pytest.fixture
async def brokers(network: MemoryNetwork) -> AsyncIterator[list[EmbeddedBroker]]:
    started = [
        EmbeddedBroker(i, [TopicSpec("demo", 2), TopicSpec("other", 1)], start_server=network.start_server)
        for i in (1, 2)
    ]
    for broker in started:
        await broker.start()
    yield started
    for broker in started:
        await broker.stop()


@pytest.fixture
async def master(network: MemoryNetwork, brokers: list[EmbeddedBroker]) -> AsyncIterator[EmbeddedMaster]:
    async with EmbeddedMaster(brokers, start_server=network.start_server) as m:
        yield m


@pytest.fixture
async def producer(master: EmbeddedMaster, pool: ConnectionPool) -> AsyncIterator[Producer]:
    p = Producer([master.address], pool=pool, config=FAST)
    await p.start()
    yield p
    await p.close()


# --- session ---------------------------------------------------------------------------------------


async def test_register_heartbeat_close(master: EmbeddedMaster, pool: ConnectionPool) -> None:
    rec = Recorder()
    producer = Producer([master.address], pool=pool, config=FAST, events=rec.bus)
    with pytest.raises(ClientError, match="start"):
        await producer.register_topic("demo")
    await producer.start()
    assert producer.registered
    assert [e.again for e in rec.of(ProducerRegistered)] == [False]
    assert producer.client_id in master.producers.producers
    route = await producer.register_topic("demo")
    assert [p.partition_key for p in route.partitions] == ["1:demo:0", "1:demo:1", "2:demo:0", "2:demo:1"]
    assert route.max_msg_size == 1024 * 1024
    assert producer.published_topics == {"demo"}
    assert await producer.register_topic("demo") == route  # already published: no new heartbeat needed
    first = master.producers.producers[producer.client_id].deadline
    await eventually(lambda: master.producers.producers[producer.client_id].deadline > first + 0.3)
    assert master.producers.producers[producer.client_id].topics == {"demo"}
    assert "registered" in repr(producer)
    await producer.close()
    assert producer.client_id not in master.producers.producers
    assert producer.closed and not producer.registered
    with pytest.raises(ClientClosed):
        await producer.send("demo", b"x")
    await producer.close()


async def test_start_fails_when_no_master_answers(pool: ConnectionPool) -> None:
    producer = Producer([NodeAddress("127.0.0.1", 1)], pool=pool, config=FAST)
    with pytest.raises(ConnectError, match="no master answered"):
        await producer.start()
    await producer.close()


async def test_unknown_topic_and_local_checks(producer: Producer) -> None:
    with pytest.raises(NoPartition, match="nope"):
        await producer.register_topic("nope")
    assert producer.published_topics == frozenset()
    with pytest.raises(TopicNotPublished):
        await producer.send("nope", b"x")
    with pytest.raises(ClientError, match="blank"):
        await producer.register_topic("  ")
    await producer.register_topic("demo")
    with pytest.raises(ClientError, match="empty"):
        await producer.send("demo", b"")
    with pytest.raises(ClientError, match="either a key or an explicit partition"):
        await producer.send("demo", b"x", key="k", partition=0)
    with pytest.raises(ClientError, match="out of range"):
        await producer.send("demo", b"x", partition=4)
    assert producer.topic_route("nope") is None
    producer.unpublish("demo")
    assert producer.topic_route("demo") is None
    with pytest.raises(TopicNotPublished):
        await producer.send("demo", b"x")


async def test_oversize_message_is_refused_locally(producer: Producer, brokers: list[EmbeddedBroker]) -> None:
    route = await producer.register_topic("demo")
    limit = route.max_msg_size
    attrs = {"k": "v"}
    room = limit - len("k=v")
    result = await producer.send("demo", b"a" * room, attributes=attrs)
    assert len(decode_payload(stored(brokers, result).data, 1).body) == room
    with pytest.raises(MessageTooLarge, match=str(limit)) as caught:
        await producer.send("demo", b"a" * (room + 1), attributes=attrs)
    assert caught.value.limit == limit and caught.value.size == limit + 1


# --- sending ---------------------------------------------------------------------------------------


async def test_thousand_sends_arrive_intact(producer: Producer, brokers: list[EmbeddedBroker]) -> None:
    await producer.register_topic("demo")

    async def one(i: int) -> SendResult:
        stream = "even" if i % 2 == 0 else None
        return await producer.send(
            "demo",
            f"body-{i}".encode(),
            attributes={"idx": str(i)},
            stream_id=stream,
            msg_time="202611221200",
        )

    results: list[SendResult] = []
    for start in range(0, 1000, 100):
        results.extend(await asyncio.gather(*(one(i) for i in range(start, start + 100))))
    # round-robin over the four partitions: exactly a quarter each
    assert set(Counter(r.partition_key for r in results).values()) == {250}
    for i, result in enumerate(results):
        message = stored(brokers, result)
        assert message.message_id == result.message_id
        payload = decode_payload(message.data, message.flag)
        assert payload.body == f"body-{i}".encode()
        assert payload.attributes == {"idx": str(i)}
        assert payload.msg_time == "202611221200"
        if i % 2 == 0:
            assert payload.msg_type == "even"
            assert message.msg_type_hash == java_string_hash("even")
        else:
            assert payload.msg_type is None
    assert len({(r.broker_id, r.partition_id, r.append_offset) for r in results}) == 1000


async def test_plain_message_has_no_attribute_prefix(
    producer: Producer, brokers: list[EmbeddedBroker]
) -> None:
    await producer.register_topic("demo")
    result = await producer.send("demo", b"plain")
    message = stored(brokers, result)
    assert (message.flag, message.data) == (0, b"plain")
    assert (
        result.append_time_ms > 0 and result.partition_key == f"{result.broker_id}:demo:{result.partition_id}"
    )


async def test_key_routing_is_stable(
    producer: Producer, master: EmbeddedMaster, pool: ConnectionPool
) -> None:
    route = await producer.register_topic("demo")
    refs = [p.partition_key for p in route.partitions]
    for key in ("alpha", "beta", "gamma", "order-42"):
        keys = {(await producer.send("demo", b"k", key=key)).partition_key for _ in range(10)}
        assert len(keys) == 1
        assert keys == {refs[(java_string_hash(key) & 0x7FFFFFFF) % len(refs)]}
    # another producer (as in another process) places a key on the same partition
    other = Producer([master.address], pool=pool, config=FAST)
    await other.start()
    try:
        await other.register_topic("demo")
        mine = await producer.send("demo", b"k", key="order-42")
        theirs = await other.send("demo", b"k", key="order-42")
        assert mine.partition_key == theirs.partition_key
        assert other.client_id != producer.client_id
    finally:
        await other.close()


async def test_explicit_partition(producer: Producer) -> None:
    route = await producer.register_topic("demo")
    for index, part in enumerate(route.partitions):
        result = await producer.send("demo", b"x", partition=index)
        assert result.partition_key == part.partition_key
        assert (result.broker_id, result.partition_id) == (part.broker_id, part.partition_id)
    result = await producer.send("demo", b"x", partition="2:demo:1")
    assert (result.broker_id, result.partition_id) == (2, 1)
    with pytest.raises(ClientError, match="not a current partition"):
        await producer.send("demo", b"x", partition="3:demo:0")


async def test_topic_route_lists_brokers(producer: Producer, brokers: list[EmbeddedBroker]) -> None:
    await producer.register_topic("other")
    route = producer.topic_route("other")
    assert route is not None
    assert [(p.index, p.partition_key, p.broker_address, p.available) for p in route.partitions] == [
        (0, "1:other:0", brokers[0].address, True),
        (1, "2:other:0", brokers[1].address, True),
    ]


# --- resilience ------------------------------------------------------------------------------------


async def test_stopped_broker_is_shielded_and_sending_continues(
    master: EmbeddedMaster, brokers: list[EmbeddedBroker], clocked_pool: ConnectionPool, clock: ManualClock
) -> None:
    rec = Recorder()
    # no heartbeat during the run: the master's view cannot hide the stopped broker, the breaker must
    config = ProducerConfig(
        heartbeat_interval=60.0, failure_threshold=3, failure_cooldown=0.5, send_timeout=3.0
    )
    # The breaker's and the pool's time is the test's: the cooldown cannot run out while 300 sends crawl on a
    # busy machine.
    producer = Producer([master.address], pool=clocked_pool, config=config, events=rec.bus, clock=clock)
    await producer.start()
    try:
        await producer.register_topic("demo")
        results: list[SendResult] = []
        for i in range(300):
            if i == 100:
                await brokers[1].stop()
            results.append(await producer.send("demo", f"m{i}".encode()))
        shielded = rec.of(BrokerShielded)
        assert [(e.broker_id, e.reason) for e in shielded] == [(2, "failures")]
        failed = [e for e in rec.of(SendCompleted) if e.outcome == "transport"]
        assert 1 <= len(failed) <= 3, "the stopped broker is shielded after a few failures"
        assert all(r.broker_id == 1 for r in results[110:])
        topic_route = producer.topic_route("demo")
        assert topic_route is not None
        assert [p.available for p in topic_route.partitions] == [True, True, False, False]
        # the broker comes back: after the cooldown one trial send closes the breaker again
        await brokers[1].start()
        clock.advance(
            0.5
        )  # past the breaker's cooldown and the pool's backoff: the next send to 2 is the trial
        later = [await producer.send("demo", f"n{i}".encode()) for i in range(20)]
        assert {r.broker_id for r in later} == {1, 2}
        assert [e.broker_id for e in rec.of(BrokerUnshielded)] == [2]
        recovered = producer.topic_route("demo")
        assert recovered is not None and all(p.available for p in recovered.partitions)
        for i, result in enumerate(results + later):
            assert (
                decode_payload(stored(brokers, result).data, 0).body
                == (f"m{i}" if i < 300 else f"n{i - 300}").encode()
            )
    finally:
        await producer.close()


async def test_standby_master_first_in_the_list_is_skipped(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    rec = Recorder()
    async with (
        EmbeddedMaster(brokers, host="127.0.0.1", standby=True, start_server=network.start_server) as standby,
        EmbeddedMaster(brokers, host="127.0.0.2", start_server=network.start_server) as active,
    ):
        producer = Producer([active.address, standby.address], pool=pool, config=FAST, events=rec.bus)
        await producer.start()
        try:
            assert producer.master == active.address
            assert [(e.previous, e.current) for e in rec.of(MasterSwitched)] == [
                (standby.address, active.address)
            ]
            assert producer.client_id in active.producers.producers
            assert producer.client_id not in standby.producers.producers
            await producer.register_topic("demo")
            assert (await producer.send("demo", b"x")).message_id > 0
        finally:
            await producer.close()
        assert producer.client_id not in active.producers.producers


async def test_master_restart_leads_to_reregistration(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    rec = Recorder()
    first = EmbeddedMaster(brokers, start_server=network.start_server)
    await first.start()
    address = first.address
    producer = Producer([address], pool=pool, config=FAST, events=rec.bus)
    await producer.start()
    try:
        await producer.register_topic("demo")
        await first.stop()
        # heartbeats fail meanwhile, and registration is retried (with backoff) while the master is away
        await eventually(lambda: rec.of(ProducerHeartbeatFailed) and rec.of(RegisterFailed))
        async with EmbeddedMaster(
            brokers, host=address.host, port=address.port, start_server=network.start_server
        ) as second:
            await eventually(lambda: producer.client_id in second.producers.producers)
            await eventually(lambda: second.producers.producers[producer.client_id].topics == {"demo"})
            assert rec.of(ProducerHeartbeatFailed)
            # The master records the producer before its answer reaches the client: wait for the event.
            await eventually(lambda: [e.again for e in rec.of(ProducerRegistered)][-1] is True)
            assert producer.registered
            assert (await producer.send("demo", b"after restart")).message_id > 0
    finally:
        await producer.close()


async def test_forgotten_producer_gets_411_and_registers_again(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    rec = Recorder()
    async with EmbeddedMaster(brokers, producer_timeout=0.15, start_server=network.start_server) as master:
        config = ProducerConfig(heartbeat_interval=0.3, register_backoff_base=0.05, register_backoff_max=0.1)
        producer = Producer([master.address], pool=pool, config=config, events=rec.bus)
        await producer.start()
        try:
            await producer.register_topic("demo")
            await eventually(lambda: len(rec.of(ProducerRegistered)) >= 2)
            assert any(e.error.startswith("411") and e.reregister for e in rec.of(ProducerHeartbeatFailed))
            assert producer.published_topics == {"demo"}
            assert (await producer.send("demo", b"still here")).message_id > 0
        finally:
            await producer.close()


@pytest.fixture
async def mixed(
    network: MemoryNetwork, brokers: list[EmbeddedBroker]
) -> AsyncIterator[tuple[EmbeddedMaster, Scripted]]:
    """Real broker 1 and a scripted broker 2 (answering 503 unless a test changes its code)."""
    scripted = Scripted(network, 503, "Write StoreService temporary unavailable!")
    await scripted.server.start()
    async with EmbeddedMaster([brokers[0], scripted], start_server=network.start_server) as master:
        yield master, scripted
    await scripted.server.stop()


async def test_503_shields_the_broker_and_the_send_goes_elsewhere(
    mixed: tuple[EmbeddedMaster, Scripted], pool: ConnectionPool, brokers: list[EmbeddedBroker]
) -> None:
    master, scripted = mixed
    rec = Recorder()
    producer = Producer([master.address], pool=pool, config=FAST, events=rec.bus)
    await producer.start()
    try:
        await producer.register_topic("demo")
        results = [await producer.send("demo", f"m{i}".encode()) for i in range(12)]
        assert {r.broker_id for r in results} == {1}
        assert scripted.calls == 1, "one 503 shields the broker for unavailable_cooldown"
        assert [(e.broker_id, e.reason) for e in rec.of(BrokerShielded)] == [(2, "unavailable")]
        assert [e.error_code for e in rec.of(SendCompleted) if e.outcome == "unavailable"] == [503]
        # a key pinned to the shielded broker fails fast instead of moving
        pinned = next(k for k in (f"k{i}" for i in range(100)) if _partition_broker(producer, k) == 2)
        with pytest.raises(ServiceUnavailable, match="pinned"):
            await producer.send("demo", b"x", key=pinned)
        assert scripted.calls == 1
        for result in results:
            assert stored(brokers, result).message_id == result.message_id
    finally:
        await producer.close()


def _partition_broker(producer: Producer, key: str) -> int:
    route = producer.topic_route("demo")
    assert route is not None
    refs = list(route.partitions)
    return refs[(java_string_hash(key) & 0x7FFFFFFF) % len(refs)].broker_id


async def test_non_retriable_code_is_raised_without_retry(
    mixed: tuple[EmbeddedMaster, Scripted], pool: ConnectionPool
) -> None:
    master, scripted = mixed
    scripted.code, scripted.message = 400, "data length over max length"
    producer = Producer([master.address], pool=pool, config=FAST)
    await producer.start()
    try:
        await producer.register_topic("demo")
        with pytest.raises(BadRequest, match="data length over max length") as caught:
            await producer.send("demo", b"x", partition="2:demo:0")
        assert caught.value.errno == 400
        assert scripted.calls == 1
    finally:
        await producer.close()


async def test_overflow_is_retried_on_another_partition_but_pinned_sends_stay(
    mixed: tuple[EmbeddedMaster, Scripted], pool: ConnectionPool
) -> None:
    master, scripted = mixed
    scripted.code = 419
    rec = Recorder()
    producer = Producer([master.address], pool=pool, config=FAST, events=rec.bus)
    await producer.start()
    try:
        await producer.register_topic("demo")
        results = [await producer.send("demo", b"x") for _ in range(8)]
        assert {r.broker_id for r in results} == {1}
        assert scripted.calls >= 1 and not rec.of(BrokerShielded), "419 does not shield the broker"
        before = scripted.calls
        with pytest.raises(ServerReceiveOverflow, match="419"):
            await producer.send("demo", b"x", partition="2:demo:1")
        assert scripted.calls - before == FAST.max_send_attempts, "pinned retries stay on the partition"
    finally:
        await producer.close()


@pytest.mark.parametrize(
    "bad",
    [{"heartbeat_interval": 0}, {"send_timeout": -1}, {"max_send_attempts": 0}, {"client_id": " "}],
)
def test_config_validation(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ProducerConfig(**bad)


async def test_broker_stopped_under_concurrent_load_loses_no_acknowledged_message(
    master: EmbeddedMaster, brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    rec = Recorder()
    config = ProducerConfig(heartbeat_interval=60.0, failure_cooldown=30.0, send_timeout=3.0)
    producer = Producer([master.address], pool=pool, config=config, events=rec.bus)
    await producer.start()
    try:
        await producer.register_topic("demo")
        sent: list[tuple[bytes, SendResult]] = []

        async def worker(w: int) -> None:
            for i in range(40):
                body = f"w{w}-{i}".encode()
                sent.append((body, await producer.send("demo", body)))
                if w == 0 and i == 10:
                    await brokers[1].stop()

        await asyncio.gather(*(worker(w) for w in range(20)))
        assert len(sent) == 800, "every send succeeded, on the surviving broker if need be"
        assert [e.broker_id for e in rec.of(BrokerShielded)] == [2]
        for body, result in sent:
            assert decode_payload(stored(brokers, result).data, 0).body == body
    finally:
        await producer.close()


async def test_embedded_cluster_with_standby_and_a_broker_restart(
    network: MemoryNetwork, tmp_path: Path, clocked_pool: ConnectionPool, clock: ManualClock
) -> None:
    rec = Recorder()
    async with EmbeddedCluster(
        [TopicSpec("demo", 2)],
        brokers=2,
        data_dir=tmp_path,
        standby_master=True,
        start_server=network.start_server,
    ) as cluster:
        config = ProducerConfig(heartbeat_interval=60.0, failure_cooldown=0.3)
        # the cooldown (and the pool's backoff) ends when the test says so, not when a busy machine lets it
        producer = Producer(
            cluster.master_addresses, pool=clocked_pool, config=config, events=rec.bus, clock=clock
        )
        await producer.start()
        try:
            assert producer.master == cluster.master_address
            await producer.register_topic("demo")
            sent: list[tuple[bytes, SendResult]] = []
            for i in range(80):
                if i == 20:
                    await cluster.stop_broker(2)
                if i == 60:
                    await cluster.start_broker(2)
                    clock.advance(
                        0.35
                    )  # past the cooldown and the pool's backoff: the next send to 2 is the trial
                body = f"c{i}".encode()
                sent.append((body, await producer.send("demo", body)))
            assert [e.broker_id for e in rec.of(BrokerShielded)] == [2]
            assert [e.broker_id for e in rec.of(BrokerUnshielded)] == [2]
            assert {r.broker_id for _, r in sent[22:60]} == {1}
            assert 2 in {r.broker_id for _, r in sent[60:]}
            brokers = [cluster.broker(1), cluster.broker(2)]
            for body, result in sent:  # broker 2 reloaded its file store on restart
                assert decode_payload(stored(brokers, result).data, 0).body == body
        finally:
            await producer.close()
