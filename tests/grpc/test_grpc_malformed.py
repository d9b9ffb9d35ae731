"""A gRPC request message protobuf cannot read (real sockets, API keys required, so the calls authenticate
from their metadata and grpc reads the message before the handler runs, as in production):
INVALID_ARGUMENT naming ``request``, logged as a refusal and counted, and a publish message's bytes given
back at once.

Before: the reader's DecodeError left the request deserializer, grpc answered UNKNOWN ("Unexpected <class
'google.protobuf.message.DecodeError'>") without running the handler, and the bytes the message had
reserved in ``limits.max_inflight_publish_bytes`` were never given back: a few malformed messages held the
whole budget and every later publish, HTTP or gRPC, was refused UNAVAILABLE for good."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.observability.grpc_events import GrpcCallFinished
from tests.support.auth_support import SecureGateway, secure_gateway

SERVICE = "/tubemq.gateway.v1.GatewayService"


def malformed(size: int) -> bytes:
    """A PublishRequest of ``size`` bytes whose first message claims more bytes than the request holds: a
    message the protobuf reader refuses."""
    head = b"\x0a\x04demo\x12\xff\xff\xff\x0f"
    return head + b"x" * (size - len(head))


CAP = 1_000_000


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    limits = {"max_inflight_publish_bytes": CAP, "max_concurrent_per_caller": 0}
    async with secure_gateway(tmp_path, limits=limits) as gateway:
        yield gateway


def raw_call(gw: SecureGateway, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
    return gw.channel.unary_unary(f"{SERVICE}/{method}", request_serializer=None, response_deserializer=None)


async def refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


def invalid_request(error: grpc.aio.AioRpcError) -> bool:
    details = error.details() or ""
    return (
        error.code() is grpc.StatusCode.INVALID_ARGUMENT
        and details.startswith("request: the request message is not valid protobuf")
        and "proto/" in details
    )


async def test_malformed_publishes_give_their_bytes_back(
    gw: SecureGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.grpc")
    finished: list[GrpcCallFinished] = []
    gw.runtime.events.subscribe(finished.append, GrpcCallFinished)
    publish = raw_call(gw, "Publish")
    metadata = gw.files.metadata("alice")
    for _ in range(5):  # 1.5 MB of malformed messages against a cap of 1 MB
        error = await refused(publish(malformed(300_000), metadata=metadata))
        assert invalid_request(error), error
        assert gw.runtime.admission.inflight_bytes == 0
    # the budget is whole: a valid publish of the same size is stored
    request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=bytes(300_000))])
    answer = await gw.stub.Publish(request, metadata=metadata)
    assert answer.failed == 0 and len(answer.results) == 1
    assert gw.runtime.admission.inflight_bytes == 0
    # each refusal was answered by the gateway: counted and logged with its cause
    codes = [e.code for e in finished if e.method == f"{SERVICE}/Publish"]
    assert codes == ["INVALID_ARGUMENT"] * 5 + ["OK"]
    lines = [r for r in caplog.records if r.getMessage() == "gRPC call refused"]
    assert len(lines) == 5 and all(vars(r)["field"] == "request" for r in lines)


async def test_a_malformed_stream_request_gives_its_bytes_back(gw: SecureGateway) -> None:
    stream = gw.channel.stream_stream(
        f"{SERVICE}/PublishStream", request_serializer=None, response_deserializer=None
    )

    async def requests() -> AsyncIterator[bytes]:
        yield malformed(300_000)

    call = stream(requests(), metadata=gw.files.metadata("alice"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert invalid_request(caught.value), caught.value
    assert gw.runtime.admission.inflight_bytes == 0


async def test_a_malformed_message_of_another_method_is_invalid_argument(gw: SecureGateway) -> None:
    error = await refused(
        raw_call(gw, "GetTopic")(b"\x0a\xff\xff\x03demo", metadata=gw.files.metadata("alice"))
    )
    assert invalid_request(error), error
