"""The one-message send (``producer/single.py``) and the decoded lone request under it
(``ConnectionPool.request_decoded``, ``Connection.request_decoded``), over loopback.

A one-message publish is a batch of one that skips the batch's bookkeeping: these tests hold it to what a
batch of one gives (its result, its events, its retries), its answer read by the send decoder to the same
fields the general parse gives, and a cancelled send to leave nothing in flight.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.embedded.broker import EmbeddedBroker
from gateway.tubemq.errors import ConnectionClosed, RemoteException, RequestTimeout, ServerError
from gateway.tubemq.net.connection import Connection, Outcome, RequestCompleted
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import SendResult
from gateway.tubemq.producer.events import BrokerShielded, SendCompleted
from gateway.tubemq.wire import prepare_message
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.send_answers import decode_send_answers, send_answer_of
from tests.support.producer_support import (
    SEND,
    Recorder,
    Scripted,
    SendBroker,
    brokers,
    held_payload,
    pool,
    rec,
    running,
    send_request,
)

__all__ = ["brokers", "pool", "rec"]  # the shared fixtures, used here by name


async def test_a_decoded_request_gives_the_fields_the_general_parse_gives() -> None:
    broker = SendBroker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        for data in (b"ok-1", b"busy", b"text", b"ok-2"):
            general = await link.request(SEND, send_request(data), 5.0)
            fast = await link.request_decoded(SEND, send_request(data), 5.0, decode=decode_send_answers)
            plain = await link.request_decoded(SEND, send_request(data), 5.0)
            assert isinstance(general, broker_pb.SendMessageResponseB2P)
            assert isinstance(plain, broker_pb.SendMessageResponseB2P)
            # decoded: its fields; declined by the decoder (C: a non-ASCII errMsg): the parsed message
            fields = send_answer_of(fast) if isinstance(fast, broker_pb.SendMessageResponseB2P) else fast
            assert fields == send_answer_of(general) == send_answer_of(plain), data
        assert await link.request_decoded(SEND, send_request(b"ok-7"), 5.0, decode=decode_send_answers) == (
            True, 200, "OK", 7, 1007, 7,
        )  # fmt: skip
        with pytest.raises(RemoteException) as raised:  # an RPC exception answer is raised, as ever
            await link.request_decoded(SEND, send_request(b"fault"), 5.0, decode=decode_send_answers)
        assert raised.value.exception_name == "java.lang.IllegalStateException"
        assert link.in_flight == 0 and link.is_open
    finally:
        await link.close()
        await broker.server.stop()


async def test_the_pool_connects_first_for_a_decoded_request() -> None:
    broker = SendBroker()  # a scripted broker on loopback (tests/tubemq/test_connection_batch.py)
    await broker.server.start()
    try:
        async with ConnectionPool(connect_timeout=1.0) as pool:
            answer = await pool.request_decoded(
                broker.server.address, SEND, send_request(b"ok-3"), 5.0, decode=decode_send_answers
            )
            assert answer == (True, 200, "OK", 3, 1003, 3)
            assert len(pool.links(broker.server.address)) == 1
    finally:
        await broker.server.stop()


async def test_one_message_gives_what_a_batch_of_one_gives(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    async with running(network, brokers, pool, rec) as producer:
        route = producer.topic_route("demo")
        assert route is not None
        for i in range(6):  # round robin over both brokers' partitions
            rec.events.clear()
            message = prepare_message(f"m{i}".encode(), {"n": str(i)}, None, None)
            (result,) = await producer.send_prepared("demo", [message])
            assert isinstance(result, SendResult)
            assert held_payload(brokers, result).body == f"m{i}".encode()
            place = route.partitions[result.partition_index]
            assert (place.partition_key, place.broker_id) == (result.partition_key, result.broker_id)
            assert result.message_id >= 0 and result.append_time_ms > 0
            sent = rec.of(SendCompleted)
            assert [(e.broker_id, e.outcome, e.count, e.bytes) for e in sent] == [
                (result.broker_id, "ok", 1, len(message.data))
            ]
            done = [e for e in rec.of(RequestCompleted) if e.method == SEND]
            assert [(e.outcome, e.count) for e in done] == [(Outcome.OK, 1)]


async def test_one_message_is_retried_elsewhere_and_a_final_code_is_raised(
    network: MemoryNetwork, brokers: list[EmbeddedBroker], pool: ConnectionPool, rec: Recorder
) -> None:
    busy = Scripted(network, 503)  # broker 2 answers 503: shielded, the message goes to broker 1
    async with running(network, [brokers[0], busy], pool, rec) as producer:
        results = [await producer.send("demo", f"r{i}".encode()) for i in range(4)]
        assert {r.broker_id for r in results} == {1}
        assert [e.broker_id for e in rec.of(BrokerShielded)] == [2]
        outcomes = {e.outcome for e in rec.of(SendCompleted) if e.broker_id == 2}
        assert outcomes <= {"unavailable"}
    refused = Scripted(network, 400, "bad message")  # a final code: raised at once, one attempt
    refused.broker_id = 1
    async with running(network, [refused], pool, rec) as producer:
        with pytest.raises(ServerError) as raised:
            await producer.send("demo", b"x")
        assert raised.value.errno == 400 and refused.calls == 1


async def test_a_cancelled_one_message_send_leaves_nothing_in_flight(
    network: MemoryNetwork, pool: ConnectionPool, rec: Recorder
) -> None:
    silent = Scripted(network, silent=True)
    silent.broker_id = 1
    silent.expected = 1
    async with running(network, [silent], pool, rec) as producer:
        task = asyncio.create_task(producer.send("demo", b"gone"))
        await asyncio.wait_for(silent.arrived.wait(), 5.0)
        (link,) = pool.links(silent.address)
        assert link.in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert link.in_flight == 0 and link.is_open
        cancelled = [e for e in rec.of(RequestCompleted) if e.outcome is Outcome.CANCELLED]
        assert [e.count for e in cancelled] == [1]
        with pytest.raises(RequestTimeout):  # and a send that gets no answer times out, as ever
            await producer.send("demo", b"late", timeout=0.3)
        assert link.in_flight == 0


async def test_lone_requests_share_one_deadline_watch_and_each_keeps_its_own_deadline() -> None:
    """Deadlines of lone requests (``Multiplexed._watch``): each unanswered request times out at its own
    deadline, a later request with an earlier deadline is not held to the earlier one's timer, an answered
    request is not failed and leaves the watch, and a closed link leaves no timer behind."""
    broker = SendBroker()
    await broker.server.start()
    link = Connection(broker.server.address)
    loop = asyncio.get_running_loop()
    try:
        await link.connect(2.0)

        async def timed_out(seconds: float) -> float:
            started = loop.time()
            with pytest.raises(RequestTimeout):
                await link.request_decoded(SEND, send_request(b"hang"), seconds, decode=decode_send_answers)
            return loop.time() - started

        slow = asyncio.ensure_future(timed_out(1.5))
        await asyncio.sleep(0.05)
        fast = asyncio.ensure_future(timed_out(0.3))  # armed after, due before: the watch is re-armed
        answered = [
            await link.request_decoded(
                SEND, send_request(f"ok-{i}".encode()), 0.2, decode=decode_send_answers
            )
            for i in range(50)
        ]
        assert [a[3] for a in answered] == list(range(50))  # type: ignore[index]
        assert len(link._deadlines) <= 3  # the two waiting, at most the last answered: the rest left
        fast_took = await fast
        assert 0.25 <= fast_took < 1.0, fast_took  # its own deadline, not the slow one's
        assert not slow.done()
        assert await slow >= 1.4
        assert len(link._deadlines) <= 1  # answered and timed-out requests left the watch
        assert link.in_flight == 0 and link.is_open  # (traffic was read meanwhile: the link stays)
        pending = asyncio.ensure_future(link.request_decoded(SEND, send_request(b"hang"), 30.0))
        await asyncio.sleep(0.05)
        assert link._sweeper is not None
        await link.close()
        with pytest.raises(ConnectionClosed):
            await pending
        assert link._sweeper is None and not link._deadlines
    finally:
        await link.close()
        await broker.server.stop()
