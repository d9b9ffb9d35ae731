"""RpcServer answers like the Java server (§1.5), checked with hand-built frames over loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.embedded.server import CallContext, RemoteFault, RpcServer, service_offers
from gateway.tubemq.errors import STATUS_ERROR, STATUS_FATAL
from gateway.tubemq.wire.frame import encode_frame
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartResponseM2P
from gateway.tubemq.wire.pb.RPC_pb2 import (
    RspExceptionBody,
    RspResponseBody,
)
from tests.support.faultproxy import EchoHandler, heartbeat
from tests.support.raw_client import HEARTBEAT, RawClient

PREFIX_READ = "IPC server unable to read call parameters:"
PREFIX_HANDLE = "IPC server handle request error :"


@pytest.fixture
def handler() -> EchoHandler:
    return EchoHandler()


@pytest.fixture
async def server(handler: EchoHandler) -> AsyncIterator[RpcServer]:
    async with RpcServer(handler) as srv:
        yield srv


@pytest.fixture
async def client(server: RpcServer) -> AsyncIterator[RawClient]:
    raw = await RawClient.open(server)
    yield raw
    await raw.close()


def beat(client_id: str, *steer: str) -> bytes:
    return heartbeat(client_id, *steer).SerializeToString()


async def test_success_answer(client: RawClient, handler: EchoHandler) -> None:
    client.send(41, HEARTBEAT, beat("p1"))
    serial, head, body = await client.answer()
    assert serial == 41 and head.status == 0 and head.protocolVer == 3
    assert isinstance(body, RspResponseBody) and body.method == HEARTBEAT
    assert HeartResponseM2P.FromString(body.data).topicInfos == ["p1"]
    ctx = handler.last_context
    assert isinstance(ctx, CallContext)
    assert (ctx.serial, ctx.service, ctx.protocol_version, ctx.timeout) == (41, 1, 3, 5.0)
    assert ctx.peer.host == "127.0.0.1" and not ctx.tls and ctx.deadline == ctx.received_at + 5.0


async def test_answers_go_out_of_order(client: RawClient) -> None:
    client.send(1, HEARTBEAT, beat("slow", "delay:0.1"))
    client.send(2, HEARTBEAT, beat("fast"))
    assert (await client.answer())[0] == 2
    assert (await client.answer())[0] == 1


@pytest.mark.parametrize("method", [11, 12, 14, 19, 10, 99, -1])
async def test_unsupported_method_ids_get_fatal(client: RawClient, method: int) -> None:
    client.send(7, method, beat("p"), service=2)
    serial, head, body = await client.answer()
    assert serial == 7 and head.status == STATUS_FATAL and not head.HasField("protocolVer")
    assert isinstance(body, RspExceptionBody)
    assert body.exceptionName == "java.lang.Exception"
    assert body.stackTrace == f"{PREFIX_HANDLE}Unsupported method ID :{method}"


async def test_unparsable_envelope_gets_fatal(client: RawClient) -> None:
    client.writer.write(encode_frame(9, b"\x02\x08\x00\x05\x08"))  # RequestHeader runs past the end
    serial, head, body = await client.answer()
    assert serial == 9 and head.status == STATUS_FATAL and not head.HasField("protocolVer")
    assert isinstance(body, RspExceptionBody)
    assert body.exceptionName == "com.google.protobuf.InvalidProtocolBufferException"
    assert body.stackTrace.startswith(PREFIX_READ)


async def test_missing_required_field_gets_fatal(client: RawClient) -> None:
    client.send(3, HEARTBEAT, b"\x0a\x02p1")  # clientId only: brokerCheckSum, hostName missing
    serial, head, body = await client.answer()
    assert serial == 3 and head.status == STATUS_FATAL
    assert isinstance(body, RspExceptionBody)
    assert body.exceptionName == "com.google.protobuf.InvalidProtocolBufferException"
    assert "missing required fields" in body.stackTrace


@pytest.mark.parametrize(("service", "text"), [(2, "Unsupported method 2in service type 2!"),
                                               (None, "Service Type is invalid!")])  # fmt: skip
async def test_service_method_mismatch_gets_error(client: RawClient, service: int | None, text: str) -> None:
    client.send(5, HEARTBEAT, beat("p"), service=service)
    serial, head, body = await client.answer()
    assert serial == 5 and head.status == STATUS_ERROR and head.protocolVer == 3
    assert isinstance(body, RspExceptionBody)
    assert (body.exceptionName, body.stackTrace) == ("java.lang.Exception", text)


def test_service_table() -> None:
    assert service_offers(1, 22) and service_offers(2, 13) and service_offers(3, 13)
    assert not service_offers(1, 13) and not service_offers(3, 15) and not service_offers(4, 1)


@pytest.mark.parametrize("timeout_ms", [0, None])
async def test_no_answer_without_a_timeout(
    client: RawClient, handler: EchoHandler, timeout_ms: int | None
) -> None:
    client.send(1, HEARTBEAT, beat("never"), timeout_ms=timeout_ms)
    await client.no_answer(0.2)
    assert handler.calls == 1  # processed, like Java, only the answer is dropped
    client.send(2, HEARTBEAT, beat("later"))
    assert (await client.answer())[0] == 2


async def test_answer_after_the_request_timeout_is_dropped(client: RawClient) -> None:
    client.send(1, HEARTBEAT, beat("late", "delay:0.1"), timeout_ms=20)
    await client.no_answer(0.3)


async def test_remote_fault_answers(client: RawClient) -> None:
    name = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"
    client.send(1, HEARTBEAT, beat("s", f"fault:{name}"))
    _, head, body = await client.answer()
    assert head.status == STATUS_ERROR and isinstance(body, RspExceptionBody)
    assert body.exceptionName == name and body.stackTrace == f"fault {name} requested"
    # Older clients get the class name with their own package prefix.
    client.send(2, HEARTBEAT, beat("s", f"fault:{name}"), version=2)
    _, _, body = await client.answer()
    assert isinstance(body, RspExceptionBody)
    assert body.exceptionName == "com.apache.tubemq.corerpc.exception.StandbyException"


async def test_fatal_remote_fault() -> None:
    async def fatal(method: int, request: object, ctx: CallContext) -> HeartResponseM2P:
        raise RemoteFault(STATUS_FATAL, "java.lang.Exception", "broken")

    async with RpcServer(fatal) as srv:  # type: ignore[arg-type]
        raw = await RawClient.open(srv)
        raw.send(1, HEARTBEAT, beat("x"))
        _, head, body = await raw.answer()
        assert head.status == STATUS_FATAL and isinstance(body, RspExceptionBody)
        assert body.stackTrace == "broken"
        await raw.close()
    with pytest.raises(ValueError):
        RemoteFault(0, "x")


async def test_handler_crash_gives_invocation_target_exception(
    client: RawClient, caplog: pytest.LogCaptureFixture
) -> None:
    client.send(1, HEARTBEAT, beat("c", "crash"))
    _, head, body = await client.answer()
    assert head.status == STATUS_ERROR and isinstance(body, RspExceptionBody)
    assert body.exceptionName == "java.lang.reflect.InvocationTargetException"
    assert body.stackTrace == ""
    assert "handler failed" in caplog.text


async def test_stopping_answers_service_stopping_then_still_processes(
    server: RpcServer, client: RawClient
) -> None:
    server.mark_stopping()
    assert "stopping" in repr(server)
    client.send(1, HEARTBEAT, beat("s"))
    serial, head, body = await client.answer()
    assert serial == 1 and head.status == STATUS_ERROR and isinstance(body, RspExceptionBody)
    assert body.exceptionName.endswith("ServiceStoppingException")
    assert body.stackTrace == "service is stopping..."
    serial, head, _ = await client.answer()
    assert serial == 1 and head.status == 0


async def test_garbage_closes_only_that_link(server: RpcServer, client: RawClient) -> None:
    other = await RawClient.open(server)
    await asyncio.sleep(0.01)
    assert server.connections == 2
    client.writer.write(b"GET / HTTP/1.1\r\n\r\n")
    assert await client.reader.read() == b""
    other.send(1, HEARTBEAT, beat("ok"))
    assert (await other.answer())[0] == 1
    assert server.connections == 1
    await other.close()


async def test_drop_connections_keeps_listening(server: RpcServer, client: RawClient) -> None:
    client.send(1, HEARTBEAT, beat("a"))
    await client.answer()
    await server.drop_connections()
    assert server.connections == 0
    assert await client.reader.read() == b""
    again = await RawClient.open(server)
    again.send(2, HEARTBEAT, beat("b"))
    assert (await again.answer())[0] == 2
    await again.close()


async def test_stop_is_prompt_with_calls_in_flight(handler: EchoHandler) -> None:
    srv = RpcServer(handler)
    await srv.start()
    raw = await RawClient.open(srv)
    raw.send(1, HEARTBEAT, beat("slow", "delay:10"))
    for _ in range(400):
        if handler.calls:
            break
        await asyncio.sleep(0.005)
    async with asyncio.timeout(1):
        await srv.stop()
        assert await raw.reader.read() == b""
    assert srv.connections == 0 and "stopped" in repr(srv)
    await raw.close()
    with pytest.raises(OSError):
        await asyncio.open_connection(srv.host, srv.port)
