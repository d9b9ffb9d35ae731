"""The server-balanced pull consumer against the embedded cluster over real loopback sockets."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.client import Consumer, InvalidConfirmContext
from gateway.tubemq.consumer.config import BoundConsumption, StartPosition
from gateway.tubemq.consumer.events import ConsumerRegistered, FetchOutcome, PartitionReleased, RebalanceEvent
from gateway.tubemq.errors import ClientClosed, TopicNotDeployed, TransportError
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method
from tests.support.consumer_support import RecordingPool, bodies_of, drain, fast, publish, running_cluster
from tests.support.files import CAPTURE_FILE
from tests.support.waiting import eventually


async def test_one_consumer_receives_everything(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("demo", 4)], network=network) as cluster:
        sent = [f"m{i}".encode() for i in range(40)]
        await publish(pool, cluster, "demo", sent)
        consumer = Consumer(
            [cluster.master_address],
            "g1",
            {"demo": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST),
        )
        await consumer.start()
        try:
            assert await consumer.wait_for_assignment(5.0)
            batches = await drain(consumer, len(sent))
            assert sorted(bodies_of(batches)) == sorted(sent)
            assert await consumer.poll(0.1) is None
        finally:
            await consumer.close()


def keys(consumer: Consumer) -> set[str]:
    return {p.partition_key for p in consumer.assignment()}


ALL_DEMO = {f"1:demo:{i}" for i in range(4)}


async def test_two_consumers_split_and_receive_each_message_once(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 4)], network=network) as cluster:
        masters = [cluster.master_address]
        a = Consumer(masters, "g2", {"demo": None}, pool=pool, config=fast())
        b = Consumer(masters, "g2", {"demo": None}, pool=pool, config=fast())
        await a.start()
        await b.start()
        try:
            await eventually(lambda: len(keys(a)) == 2 and len(keys(b)) == 2)
            assert keys(a) | keys(b) == ALL_DEMO
            sent = [f"m{i}".encode() for i in range(60)]
            await publish(pool, cluster, "demo", sent)
            got_a, got_b = await asyncio.gather(drain(a, 30), drain(b, 30))
            assert sorted(bodies_of(got_a) + bodies_of(got_b)) == sorted(sent)
            assert {batch.partition_key for batch in got_a} <= keys(a)
        finally:
            await a.close()
            await b.close()


async def test_close_hands_partitions_over_with_unconfirmed_messages(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 4)], network=network) as cluster:
        masters = [cluster.master_address]
        a = Consumer(masters, "g3", {"demo": None}, pool=pool, config=fast())
        b = Consumer(masters, "g3", {"demo": None}, pool=pool, config=fast())
        await a.start()
        await b.start()
        try:
            await eventually(lambda: len(keys(a)) == 2 and len(keys(b)) == 2)
            sent = [f"m{i}".encode() for i in range(40)]
            await publish(pool, cluster, "demo", sent)
            unconfirmed = await a.poll(2.0)
            assert unconfirmed is not None and unconfirmed.messages
            confirmed = await drain(a, 40, seconds=0.5)  # everything else a can see, confirmed
            await a.close()
            await eventually(lambda: keys(b) == ALL_DEMO)
            got_b = await drain(b, 40 - len(bodies_of(confirmed)))
            # a's unconfirmed batch was rolled back by its unregistration and comes again to b
            assert set(bodies_of([unconfirmed])) <= set(bodies_of(got_b))
            assert sorted(bodies_of(confirmed) + bodies_of(got_b)) == sorted(sent)
        finally:
            await a.close()
            await b.close()


async def test_silent_member_expires_and_its_partitions_move(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 4)], consumer_timeout=0.6, network=network) as cluster:
        masters = [cluster.master_address]
        pool_a = ConnectionPool(connector=network.create_connection)
        a = Consumer(masters, "g4", {"demo": None}, pool=pool_a, config=fast())
        b = Consumer(masters, "g4", {"demo": None}, pool=pool, config=fast())
        await a.start()
        await b.start()
        try:
            await eventually(lambda: len(keys(a)) == 2 and len(keys(b)) == 2)
            sent = [f"m{i}".encode() for i in range(20)]
            await publish(pool, cluster, "demo", sent)
            unconfirmed = await a.poll(2.0)
            assert unconfirmed is not None and unconfirmed.messages
            await pool_a.close()  # a goes silent: no heartbeat reaches the master or the brokers
            await eventually(lambda: keys(b) == ALL_DEMO, timeout=8.0)
            got_b = await drain(b, 20)
            assert sorted(bodies_of(got_b)) == sorted(sent)
        finally:
            await a.close()
            await b.close()


async def test_rollback_redelivers_and_confirm_commits(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        sent = [f"m{i}".encode() for i in range(5)]
        await publish(pool, cluster, "one", sent)
        consumer = Consumer(
            [cluster.master_address],
            "g5",
            {"one": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST),
        )
        async with consumer:
            first = await consumer.poll(5.0)
            assert first is not None and bodies_of([first]) == sent
            assert await consumer.poll(0.1) is None  # the only partition is out, unconfirmed
            assert await consumer.confirm(first.confirm_context, consumed=False) == 0
            again = await consumer.poll(2.0)
            assert again is not None and bodies_of([again]) == sent
            assert [m.message_id for m in again.messages] == [m.message_id for m in first.messages]
            committed = await consumer.confirm(again.confirm_context, consumed=True)
            assert committed == 5 * 28 == again.dense_end
            assert await consumer.poll(0.1) is None
            with pytest.raises(InvalidConfirmContext):
                await consumer.confirm(again.confirm_context)
            with pytest.raises(InvalidConfirmContext):
                await consumer.confirm("garbage")


async def test_start_positions(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        masters = [cluster.master_address]
        old = [b"old-1", b"old-2"]
        await publish(pool, cluster, "one", old)
        latest = Consumer(masters, "g-latest", {"one": None}, pool=pool, config=fast())
        earliest = Consumer(
            masters,
            "g-earliest",
            {"one": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST),
        )
        async with latest, earliest:
            assert await latest.wait_for_assignment(5.0)
            assert await earliest.wait_for_assignment(5.0)
            assert latest.assignment()[0].curr_offset == 56
            assert earliest.assignment()[0].curr_offset == 0
            await publish(pool, cluster, "one", [b"new"])
            assert bodies_of(await drain(latest, 1)) == [b"new"]
            assert bodies_of(await drain(earliest, 3)) == [*old, b"new"]
        # The group now has a stored offset: LATEST continues from it, LATEST_ALWAYS jumps to the end.
        await publish(pool, cluster, "one", [b"later"])
        again = Consumer(masters, "g-earliest", {"one": None}, pool=pool, config=fast())
        async with again:
            assert bodies_of(await drain(again, 1)) == [b"later"]
        await publish(pool, cluster, "one", [b"skipped"])
        jump = Consumer(
            masters,
            "g-earliest",
            {"one": None},
            pool=pool,
            config=fast(start_position=StartPosition.LATEST_ALWAYS),
        )
        async with jump:
            assert await jump.wait_for_assignment(5.0)
            assert jump.assignment()[0].curr_offset == 5 * 28
            assert await jump.poll(0.1) is None


async def test_bound_consumption_starts_at_the_requested_offset(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        sent = [f"m{i}".encode() for i in range(10)]
        offsets = await publish(pool, cluster, "one", sent)
        assert offsets == [28 * i for i in range(10)]
        bound = BoundConsumption("session-1", 1, offsets={"1:one:0": 28 * 6})
        consumer = Consumer(
            [cluster.master_address], "g-bound", {"one": None}, pool=pool, config=fast(bound=bound)
        )
        async with consumer:
            batch = await consumer.poll(5.0)
            assert batch is not None
            assert batch.curr_offset == 168 and batch.max_offset == 280
            assert bodies_of([batch]) == sent[6:]
            assert batch.offsets_exact
            assert [m.offset for m in batch.messages] == [168, 196, 224, 252]


async def test_stream_id_filter(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("demo", 2)], network=network) as cluster:
        consumer = Consumer(
            [cluster.master_address], "g-filter", {"demo": ["paid"]}, pool=pool, config=fast()
        )
        async with consumer:
            assert await consumer.wait_for_assignment(5.0)
            await eventually(lambda: len(keys(consumer)) == 2)
            await publish(pool, cluster, "demo", [b"p1", b"p2"], msg_type="paid")
            await publish(pool, cluster, "demo", [b"n1", b"n2"], msg_type="new")
            await publish(pool, cluster, "demo", [b"x1"])
            await publish(pool, cluster, "demo", [b"p3"], msg_type="paid")
            batches = await drain(consumer, 3)
            assert sorted(bodies_of(batches)) == [b"p1", b"p2", b"p3"]
            assert {m.stream_id for b in batches for m in b.messages} == {"paid"}
            assert await consumer.poll(0.1) is None


async def test_broker_restart_recovers_partitions(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("demo", 2)], brokers=2, network=network) as cluster:
        consumer = Consumer([cluster.master_address], "g-restart", {"demo": None}, pool=pool, config=fast())
        async with consumer:
            await eventually(lambda: len(keys(consumer)) == 4)
            await cluster.stop_broker(2)
            await eventually(lambda: {k[0] for k in keys(consumer)} == {"1"})
            await cluster.start_broker(2)
            await eventually(lambda: len(keys(consumer)) == 4, timeout=8.0)
            sent = [f"m{i}".encode() for i in range(8)]
            await publish(pool, cluster, "demo", sent[:4], broker_id=1)
            await publish(pool, cluster, "demo", sent[4:], broker_id=2)
            assert sorted(bodies_of(await drain(consumer, 8))) == sorted(sent)


def captured_field_sets() -> dict[tuple[int, int], set[str]]:
    """Field names the Java consumer set, per (method, opType or 0), from the real capture."""
    data = json.loads(CAPTURE_FILE.read_text())
    fields: dict[tuple[int, int], set[str]] = {}
    for connection in data["connections"]:
        for call in connection["calls"]:
            method, request = call["method"], call["request"]
            if method in (4, 5, 6, 15, 16, 17, 18):
                names = set(request) - {"jdkVersion"}
                fields.setdefault((method, request.get("opType", 0)), set()).update(names)
    return fields


def _broker_heartbeats(pool: RecordingPool) -> int:
    return sum(1 for method, _ in pool.sent if method == Method.CONSUMER_BROKER_HEARTBEAT)


async def test_requests_carry_the_fields_the_java_consumer_sends(network: MemoryNetwork) -> None:
    recording = RecordingPool(network)
    try:
        async with running_cluster([TopicSpec("demo", 2)], network=network) as cluster:
            consumer = Consumer(
                [cluster.master_address], "g-fields", {"demo": None}, pool=recording, config=fast()
            )
            async with consumer:
                await eventually(lambda: len(keys(consumer)) == 2)
                await eventually(
                    lambda: any(
                        isinstance(r, master_pb.HeartRequestC2M) and r.HasField("event")
                        for _, r in recording.sent
                    )
                )
                await publish(recording, cluster, "demo", [b"x", b"y"])
                await drain(consumer, 2)
                before = _broker_heartbeats(recording)
                await eventually(lambda: _broker_heartbeats(recording) > before, what="a broker heartbeat")
    finally:
        await recording.close()
    ours: dict[tuple[int, int], set[str]] = {}
    for method, request in recording.sent:
        if method in (4, 5, 6, 15, 16, 17, 18):
            op = request.opType if isinstance(request, broker_pb.RegisterRequestC2B) else 0
            ours.setdefault((method, op), set()).update(f.name for f, _ in request.ListFields())
    assert ours == captured_field_sets()


async def test_unconfirmed_batch_expires_and_comes_again(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        await publish(pool, cluster, "one", [b"a", b"b"])
        consumer = Consumer(
            [cluster.master_address],
            "g-expire",
            {"one": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST, confirm_timeout=0.3),
        )
        async with consumer:
            first = await consumer.poll(5.0)
            assert first is not None
            again = await consumer.poll(2.0)  # waits for the expiry, then fetches from the committed offset
            assert again is not None and bodies_of([again]) == bodies_of([first]) == [b"a", b"b"]
            with pytest.raises(InvalidConfirmContext):
                await consumer.confirm(first.confirm_context)
            await consumer.confirm(again.confirm_context)


async def test_disconnect_waits_for_the_batch_out_to_be_confirmed(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 2)], network=network) as cluster:
        masters = [cluster.master_address]
        bus = EventBus()
        leaving = asyncio.Event()
        bus.subscribe(
            lambda e: leaving.set() if not e.done and e.event_type.endswith("DISCONNECT") else None,
            RebalanceEvent,
        )
        a = Consumer(
            masters, "g-wait", {"demo": None}, pool=pool, events=bus, config=fast(rebalance_confirm_wait=3.0)
        )
        async with a:
            await eventually(lambda: len(keys(a)) == 2)
            sent = [f"m{i}".encode() for i in range(20)]
            await publish(pool, cluster, "demo", sent)
            held = [await a.poll(2.0), await a.poll(2.0)]
            assert all(held)
            c = Consumer(masters, "g-wait", {"demo": None}, pool=pool, config=fast())
            async with c:
                await asyncio.wait_for(leaving.wait(), 5.0)
                for batch in held:
                    assert batch is not None
                    await a.confirm(batch.confirm_context)  # in time: committed, not rolled back
                await eventually(lambda: len(keys(a)) == 1 and len(keys(c)) == 1)
                assert await drain(c, 1, seconds=0.15) == []
                assert sorted(bodies_of(held)) == sorted(sent)


async def test_master_that_forgot_the_consumer_gets_a_new_registration(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 2)], network=network) as cluster:
        bus = EventBus()
        seen: list[object] = []
        bus.subscribe(seen.append)
        consumer = Consumer(
            [cluster.master_address], "g-411", {"demo": None}, pool=pool, events=bus, config=fast()
        )
        async with consumer:
            await eventually(lambda: len(keys(consumer)) == 2)
            cluster.master.consumers.release(consumer.client_id, "g-411")
            await eventually(lambda: any(isinstance(e, ConsumerRegistered) and e.again for e in seen))
            registered = next(e for e in seen if isinstance(e, ConsumerRegistered) and e.again)
            assert isinstance(registered, ConsumerRegistered) and registered.held == 2
            await publish(pool, cluster, "demo", [b"after"])
            assert bodies_of(await drain(consumer, 1)) == [b"after"]
            assert len(keys(consumer)) == 2


async def test_standby_master_is_skipped(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("demo", 1)], standby=True, network=network) as cluster:
        masters = cluster.master_addresses
        assert len(masters) == 2
        consumer = Consumer(masters, "g-standby", {"demo": None}, pool=pool, config=fast())
        async with consumer:
            assert await consumer.wait_for_assignment(5.0)
            await publish(pool, cluster, "demo", [b"x"])
            assert bodies_of(await drain(consumer, 1)) == [b"x"]


async def test_events_tell_the_story(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("one", 1)], network=network) as cluster:
        bus = EventBus()
        seen: list[object] = []
        bus.subscribe(seen.append)
        consumer = Consumer(
            [cluster.master_address], "g-events", {"one": None}, pool=pool, events=bus, config=fast()
        )
        async with consumer:
            assert await consumer.wait_for_assignment(5.0)
            assert await consumer.poll(0.1) is None
            await publish(pool, cluster, "one", [b"x"])
            await drain(consumer, 1)
        kinds = {type(e).__name__ for e in seen}
        assert {
            "ConsumerRegistered",
            "RebalanceEvent",
            "PartitionRegistered",
            "FetchOutcome",
            "OffsetCommitted",
            "PartitionReleased",
            "ConsumerClosed",
        } <= kinds
        outcomes = {e.outcome for e in seen if isinstance(e, FetchOutcome)}
        assert {"ok", "not_found"} <= outcomes
        ok = next(e for e in seen if isinstance(e, FetchOutcome) and e.outcome == "ok")
        assert (ok.topic, ok.messages, ok.bytes, ok.lag_messages) == ("one", 1, 1, 0)
        released = next(e for e in seen if isinstance(e, PartitionReleased))
        assert isinstance(released, PartitionReleased) and released.reason == "close"
        with pytest.raises(ClientClosed):
            await consumer.poll(0.1)


async def test_start_fails_fast_on_answers_retrying_cannot_fix(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    async with running_cluster([TopicSpec("demo", 1)], network=network) as cluster:
        consumer = Consumer([cluster.master_address], "g-bad", {"nosuch": None}, pool=pool, config=fast())
        with pytest.raises(TopicNotDeployed):
            await consumer.start()
        assert consumer.closed
        with pytest.raises(ClientClosed):
            await consumer.poll(0.1)
        await consumer.close()


async def test_start_gives_up_after_its_attempts(network: MemoryNetwork, pool: ConnectionPool) -> None:
    async with running_cluster([TopicSpec("demo", 1)], network=network) as cluster:
        masters = [cluster.master_address]
    consumer = Consumer(masters, "g-down", {"demo": None}, pool=pool, config=fast(register_attempts=2))
    with pytest.raises(TransportError):
        await consumer.start()
    with pytest.raises(ValueError):
        Consumer(masters, "g", {}, pool=pool)
    with pytest.raises(ValueError):
        Consumer(masters, "g", {"demo": [""]}, pool=pool)


async def test_unassigned_member_heartbeats_often_to_learn_its_partitions(
    network: MemoryNetwork, pool: ConnectionPool
) -> None:
    # With the periodic beat far away, the first assignment still arrives promptly: while no partition is
    # held the consumer beats every unassigned_heartbeat_interval.
    async with running_cluster([TopicSpec("demo", 4)], network=network) as cluster:
        config = fast(heartbeat_interval=60.0, unassigned_heartbeat_interval=0.1)
        consumer = Consumer([cluster.master_address], "g-fast", {"demo": None}, pool=pool, config=config)
        await consumer.start()
        try:
            assert await consumer.wait_for_assignment(5.0)
            assert keys(consumer) == ALL_DEMO
        finally:
            await consumer.close()
        slow = Consumer(
            [cluster.master_address],
            "g-slow",
            {"demo": None},
            pool=pool,
            config=fast(heartbeat_interval=60.0, unassigned_heartbeat_interval=60.0),
        )
        await slow.start()
        try:
            # the first beat goes out at once, before the balancer ran: nothing more for a minute
            assert not await slow.wait_for_assignment(1.0)
        finally:
            await slow.close()
