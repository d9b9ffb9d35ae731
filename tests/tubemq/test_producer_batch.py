"""``Producer.send_batch`` and the batch path of ``PublishService`` against embedded brokers over loopback.

Each message of a batch is its own request with its own broker answer: these tests hold the batch path to
the rules of a lone send (partial failures, retries elsewhere, shielding, timeouts, nothing acknowledged
that a broker did not store) and the service to its ordering and in-flight bounds.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.embedded.broker import EmbeddedBroker
from gateway.service.errors import UpstreamError
from gateway.service.publish import OutgoingMessage, PublishService
from gateway.tubemq.errors import BadRequest, ClientError, MessageTooLarge, RequestTimeout
from gateway.tubemq.net.connection import Connection, Outcome, RequestCompleted
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import ProducerConfig, SendResult
from gateway.tubemq.producer.events import BrokerShielded, SendCompleted
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from tests.support.producer_support import (
    QUIET,
    Recorder,
    Scripted,
    brokers,
    held_payload,
    pool,
    rec,
    running,
    stored,
)

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins(
    "gateway.tubemq.producer._send_request",
    "gateway.tubemq.wire._send_answers",
    "gateway.tubemq.wire._rpc",
)

__all__ = ["brokers", "pool", "rec"]  # the shared fixtures, used here by name


def _bodies(prefix: str, count: int) -> list[tuple[bytes, dict[str, str] | None, str | None, str | None]]:
    return [(f"{prefix}{i}".encode(), {"n": str(i)}, None, None) for i in range(count)]


async def test_batch_results_are_each_messages_own_answer(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    async with running(network, brokers, pool, rec, QUIET) as producer:
        messages = _bodies("m", 300)
        results = await producer.send_batch("demo", messages)
        assert len(results) == 300
        ids = set()
        for (body, attributes, _, _), result in zip(messages, results, strict=True):
            assert isinstance(result, SendResult)
            held = held_payload(brokers, result)
            assert (held.body, held.attributes) == (body, attributes)
            ids.add((result.broker_id, result.partition_id, result.append_offset))
        assert len(ids) == 300, "one stored message per request"
        assert {r.broker_id for r in results if isinstance(r, SendResult)} == {1, 2}
        sends = rec.of(SendCompleted)
        assert sum(e.count for e in sends if e.outcome == "ok") == 300 and len(sends) <= 2, "per broker"
        assert sum(e.bytes for e in sends) == sum(
            len(stored(brokers, r).data) for r in results if isinstance(r, SendResult)
        )
        requests = [e for e in rec.of(RequestCompleted) if e.method == 13]
        assert sum(e.count for e in requests) == 300 and {e.outcome for e in requests} == {Outcome.OK}
        assert all(link.in_flight == 0 for b in brokers for link in pool.links(b.address))
        health = producer.broker_health()  # the breaker counted every attempt and every success
        assert sum(h.sends for h in health) == sum(h.successes for h in health) == 300


async def test_local_checks_fail_only_their_message(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    async with running(network, brokers, pool, rec, QUIET) as producer:
        route = producer.topic_route("demo")
        assert route is not None
        results = await producer.send_batch(
            "demo",
            [
                (b"a", None, None, None),
                (b"", None, None, None),
                (b"x" * (route.max_msg_size + 1), None, None, None),
                (b"b", {"bad=key": "v"}, None, None),
                (b"c", None, "stream", "202401311530"),
            ],
        )
        assert isinstance(results[0], SendResult) and isinstance(results[4], SendResult)
        assert isinstance(results[1], ClientError) and "empty" in str(results[1])
        assert isinstance(results[2], MessageTooLarge)
        assert isinstance(results[3], ClientError)
        held = held_payload(brokers, results[4])
        assert (held.body, held.msg_type, held.msg_time) == (b"c", "stream", "202401311530")


async def test_503_shields_once_and_the_batch_lands_elsewhere(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, 503, "Write StoreService temporary unavailable!")
    async with running(network, [brokers[0], scripted], pool, rec, QUIET) as producer:
        messages = _bodies("m", 40)
        results = await producer.send_batch("demo", messages)
        assert all(isinstance(r, SendResult) and r.broker_id == 1 for r in results)
        assert 1 <= scripted.calls <= 40, "only the first round reaches the 503 broker"
        assert [(e.broker_id, e.reason) for e in rec.of(BrokerShielded)] == [(2, "unavailable")]
        for (body, _, _, _), result in zip(messages, results, strict=True):
            assert isinstance(result, SendResult)
            assert held_payload(brokers, result).body == body
        before = scripted.calls
        again = await producer.send_batch("demo", messages)
        assert all(isinstance(r, SendResult) for r in again)
        assert scripted.calls == before, "a shielded broker gets no request"


async def test_non_retriable_code_fails_only_the_messages_it_answered(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, 400, "data length over max length")
    async with running(network, [brokers[0], scripted], pool, rec, QUIET) as producer:
        results = await producer.send_batch("demo", _bodies("m", 20))
        failed = [r for r in results if not isinstance(r, SendResult)]
        assert failed and all(isinstance(r, BadRequest) and r.errno == 400 for r in failed)
        assert len(failed) == scripted.calls, "no retry after a non-retriable code"
        assert len(results) - len(failed) >= 1
        for result in results:
            if isinstance(result, SendResult):
                assert result.broker_id == 1
                assert stored(brokers, result).message_id == result.message_id


async def test_silent_broker_times_out_and_messages_move(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, silent=True)
    config = ProducerConfig(
        heartbeat_interval=60.0, rpc_timeout=0.3, send_timeout=3.0, failure_threshold=1, failure_cooldown=30.0
    )
    async with running(network, [brokers[0], scripted], pool, rec, config) as producer:
        messages = _bodies("m", 30)
        results = await producer.send_batch("demo", messages)
        assert all(isinstance(r, SendResult) and r.broker_id == 1 for r in results)
        timeouts = [e for e in rec.of(RequestCompleted) if e.outcome is Outcome.TIMEOUT]
        assert sum(e.count for e in timeouts) == scripted.calls >= 1
        assert [e.broker_id for e in rec.of(BrokerShielded)] == [2]
        for (body, _, _, _), result in zip(messages, results, strict=True):
            assert isinstance(result, SendResult)
            assert held_payload(brokers, result).body == body


async def test_no_broker_answers_within_the_deadline(
    network: MemoryNetwork, pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, silent=True)
    scripted.broker_id = 1
    config = ProducerConfig(heartbeat_interval=60.0, rpc_timeout=0.2, send_timeout=0.5, failure_threshold=100)
    async with running(network, [scripted], pool, rec, config) as producer:
        results = await producer.send_batch("demo", _bodies("m", 5))
        assert all(isinstance(r, RequestTimeout) for r in results)
        assert all(link.in_flight == 0 for link in pool.links(scripted.address))


async def test_cancelled_batch_leaves_nothing_pending(
    network: MemoryNetwork, pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, silent=True)
    await scripted.server.start()
    try:
        link = Connection(scripted.address, connector=network.create_connection)
        await link.connect(1.0)
        request = broker_pb.SendMessageRequestP2B(
            clientId="c", topicName="demo", partitionId=0, data=b"x", flag=0, checkSum=-1, sentAddr=1
        )
        request.authInfo.visitAuthorizedToken = 0
        scripted.expected = 4
        task = asyncio.create_task(link.request_many(13, [request] * 4, 5.0))
        await asyncio.wait_for(scripted.arrived.wait(), 5.0)
        assert link.in_flight == 4
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert link.in_flight == 0 and link.is_open
        answers = await link.request_many(13, [request] * 2, 0.2)
        assert all(isinstance(a, RequestTimeout) for a in answers)
        assert not link.is_open, "nothing read since the batch was sent: the path is dead"
        await link.close()
    finally:
        await scripted.server.stop()


async def test_broker_stopped_under_batches_loses_no_acknowledged_message(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    config = ProducerConfig(heartbeat_interval=60.0, failure_cooldown=30.0, send_timeout=3.0)
    async with running(network, brokers, pool, rec, config) as producer:
        acknowledged: list[tuple[bytes, SendResult]] = []

        async def caller(c: int) -> None:
            for b in range(6):
                messages = _bodies(f"c{c}-b{b}-", 50)
                for (body, _, _, _), result in zip(
                    messages, await producer.send_batch("demo", messages), strict=True
                ):
                    assert isinstance(result, SendResult), result
                    acknowledged.append((body, result))
                if c == 0 and b == 1:
                    await brokers[1].stop()

        await asyncio.gather(*(caller(c) for c in range(4)))
        assert len(acknowledged) == 1200
        assert [e.broker_id for e in rec.of(BrokerShielded)] == [2]
        for body, result in acknowledged:
            assert held_payload(brokers, result).body == body


@pytest.mark.parametrize("concurrency", [1, 3, 256])
async def test_service_keeps_chain_order_and_windows(
    network: MemoryNetwork,
    brokers: list[EmbeddedBroker],
    pool: ConnectionPool,
    rec: Recorder,
    concurrency: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with running(network, brokers, pool, rec, QUIET) as producer:
        service = PublishService(producer, concurrency=concurrency)
        messages = []
        for i in range(40):
            if i % 4 == 0:
                messages.append(OutgoingMessage(f"k{i}".encode(), key="same"))
            elif i % 4 == 1:
                messages.append(OutgoingMessage(f"p{i}".encode(), partition=1))
            else:
                messages.append(OutgoingMessage(f"f{i}".encode(), attributes={"i": str(i)}))
        peak = 0
        flush = Connection._flush

        def watched(link: Connection) -> None:  # observes what is in flight when frames leave
            nonlocal peak
            peak = max(peak, sum(len(c.pending) for b in brokers for c in pool.links(b.address)))
            flush(link)

        monkeypatch.setattr(Connection, "_flush", watched)
        outcomes = await service.publish("demo", messages)
        assert all(o.ok for o in outcomes)
        assert 1 <= peak <= concurrency
        for prefix in ("k", "p"):
            mine = [
                o.result
                for o, m in zip(outcomes, messages, strict=True)
                if m.value.startswith(prefix.encode())
            ]
            assert len({(r.broker_id, r.partition_id) for r in mine if r}) == 1
            offsets = [r.append_offset for r in mine if r]
            assert offsets == sorted(offsets), "pinned messages are stored in batch order"
        for o, m in zip(outcomes, messages, strict=True):
            assert o.result is not None
            assert held_payload(brokers, o.result).body == m.value


async def test_service_reports_partial_failure_per_message(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    scripted = Scripted(network, 400, "data length over max length")
    async with running(network, [brokers[0], scripted], pool, rec, QUIET) as producer:
        service = PublishService(producer)
        outcomes = await service.publish("demo", [OutgoingMessage(f"m{i}".encode()) for i in range(12)])
        failed = [o for o in outcomes if not o.ok]
        assert failed and len(failed) < 12
        for o in failed:
            assert isinstance(o.error, UpstreamError) and o.error.index == o.index
