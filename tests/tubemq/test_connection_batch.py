"""``Connection.request_many`` against a real socket: each request's own answer, error or timeout, read by a
batch decoder where one is given (the producer's ``decode_send_answers``) and the general way otherwise."""

from __future__ import annotations

import asyncio

from gateway.tubemq.errors import ConnectionClosed, RemoteException
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.send_answers import decode_send_answers, send_answer_of
from tests.support.producer_support import SEND, SendBroker, send_request


async def test_each_answer_is_its_own_with_or_without_the_batch_decoder() -> None:
    broker = SendBroker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        datas = [b"ok-1", b"busy", b"fault", b"ok-2", b"text", b"ok-3"]
        requests = [send_request(d) for d in datas]
        plain = await link.request_many(SEND, requests, 5.0)
        decoded = await link.request_many(SEND, requests, 5.0, decode=decode_send_answers)
        assert link.in_flight == 0 and link.is_open
        for data, general, fast in zip(datas, plain, decoded, strict=True):
            if data == b"fault":
                assert isinstance(general, RemoteException) and isinstance(fast, RemoteException)
                assert general.exception_name == fast.exception_name == "java.lang.IllegalStateException"
                continue
            assert isinstance(general, broker_pb.SendMessageResponseB2P)
            # a decoded answer is its fields; one the decoder declined (C: non-ASCII text) is parsed
            fields = send_answer_of(fast) if isinstance(fast, broker_pb.SendMessageResponseB2P) else fast
            assert fields == send_answer_of(general), data
        assert decoded[0] == (True, 200, "OK", 1, 1001, 1)
        assert decoded[1] == (False, 503, "busy", None, None, None)
    finally:
        await link.close()
        await broker.server.stop()


async def test_a_link_closed_under_a_batch_fails_only_the_unanswered() -> None:
    broker = SendBroker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        requests = [send_request(d) for d in (b"ok-1", b"hang", b"ok-2", b"hang")]
        task = asyncio.create_task(link.request_many(SEND, requests, 5.0, decode=decode_send_answers))
        for _ in range(200):
            if broker.hanging == 2 and link.in_flight == 2:
                break
            await asyncio.sleep(0.01)
        assert link.in_flight == 2, "the two stored answers came, the two hanging ones are in flight"
        link.begin_close()
        answers = await asyncio.wait_for(task, 5.0)
        assert answers[0] == (True, 200, "OK", 1, 1001, 1) and answers[2] == (True, 200, "OK", 2, 1002, 2)
        assert isinstance(answers[1], ConnectionClosed) and isinstance(answers[3], ConnectionClosed)
        assert link.in_flight == 0
    finally:
        await link.close()
        await broker.server.stop()


async def test_a_batch_across_the_serial_wrap_around_gets_each_answer() -> None:
    broker = SendBroker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        link._serial = 2**31 - 3  # the next batch's serials run past int32's end and start again below it
        datas = [f"ok-{n}".encode() for n in range(6)]
        answers = await link.request_many(
            SEND, [send_request(d) for d in datas], 5.0, decode=decode_send_answers
        )
        assert answers == [(True, 200, "OK", n, 1000 + n, n) for n in range(6)]
        again = await link.request_many(SEND, [send_request(d) for d in datas[:2]], 5.0)
        assert [send_answer_of(a) for a in again if isinstance(a, broker_pb.SendMessageResponseB2P)] == [
            (True, 200, "OK", n, 1000 + n, n) for n in range(2)
        ]
        assert link.in_flight == 0 and link.is_open
    finally:
        await link.close()
        await broker.server.stop()
