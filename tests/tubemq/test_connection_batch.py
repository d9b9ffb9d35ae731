"""``Connection.request_many`` against a real socket: each request's own answer, error or timeout, read by a
batch decoder where one is given (the producer's ``decode_send_answers``) and the general way otherwise."""

from __future__ import annotations

import asyncio

from google.protobuf.message import Message

from gateway.embedded.calls import CallContext, RemoteFault
from gateway.embedded.server import RpcServer
from gateway.tubemq.errors import STATUS_ERROR, ConnectionClosed, RemoteException
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.send_answers import decode_send_answers, send_answer_of

SEND = 13


class Broker:
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


def _request(data: bytes) -> broker_pb.SendMessageRequestP2B:
    request = broker_pb.SendMessageRequestP2B(
        clientId="c", topicName="demo", partitionId=0, data=data, flag=0, checkSum=-1, sentAddr=1
    )
    request.authInfo.visitAuthorizedToken = 0
    return request


async def test_each_answer_is_its_own_with_or_without_the_batch_decoder() -> None:
    broker = Broker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        datas = [b"ok-1", b"busy", b"fault", b"ok-2", b"text", b"ok-3"]
        requests = [_request(d) for d in datas]
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
    broker = Broker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        requests = [_request(d) for d in (b"ok-1", b"hang", b"ok-2", b"hang")]
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
    broker = Broker()
    await broker.server.start()
    link = Connection(broker.server.address)
    try:
        await link.connect(2.0)
        link._serial = 2**31 - 3  # the next batch's serials run past int32's end and start again below it
        datas = [f"ok-{n}".encode() for n in range(6)]
        answers = await link.request_many(SEND, [_request(d) for d in datas], 5.0, decode=decode_send_answers)
        assert answers == [(True, 200, "OK", n, 1000 + n, n) for n in range(6)]
        again = await link.request_many(SEND, [_request(d) for d in datas[:2]], 5.0)
        assert [send_answer_of(a) for a in again if isinstance(a, broker_pb.SendMessageResponseB2P)] == [
            (True, 200, "OK", n, 1000 + n, n) for n in range(2)
        ]
        assert link.in_flight == 0 and link.is_open
    finally:
        await link.close()
        await broker.server.stop()
