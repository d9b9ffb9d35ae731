"""Authentication and authorization of every gRPC method, enumerated from the service descriptors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.security.operations import GRPC_METHODS
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.every_operation import GROUP, SERVICE_METHODS, method_path, method_request
from tests.support.grpc_support import describe


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    async with secure_gateway(tmp_path) as gateway:
        yield gateway


async def _code(
    gw: SecureGateway,
    method: MethodDescriptor,
    metadata: tuple[tuple[str, str], ...],
    instance_id: str = "x.y.z",
) -> tuple[grpc.StatusCode, str]:
    """Call ``method`` once; the status code (OK after the first answer of a stream) and details."""
    request = method_request(method, instance_id)
    codec = {"request_serializer": type(request).SerializeToString, "response_deserializer": lambda b: b}
    channel = gw.channel
    try:
        if method.client_streaming:
            # Every client-streaming call here is one the gateway refuses before reading: send no request.
            # grpc's asyncio client turns a write that races with the server's early status into INTERNAL
            # "Internal error from Core" (grpc/grpc#36066).
            call = channel.stream_stream(method_path(method), **codec)(iter(()), metadata=metadata)
            await call.read()
        elif method.server_streaming:
            call = channel.unary_stream(method_path(method), **codec)(request, metadata=metadata)
            await call.read()
        else:
            await channel.unary_unary(method_path(method), **codec)(request, metadata=metadata)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_every_method_is_in_the_table_and_every_entry_is_a_method() -> None:
    served = {method_path(m) for m in SERVICE_METHODS}
    served |= {
        f"/grpc.health.v1.Health/{m.name}" for m in health_pb2.DESCRIPTOR.services_by_name["Health"].methods
    }
    served |= {f"/grpc.reflection.{v}.ServerReflection/ServerReflectionInfo" for v in ("v1", "v1alpha")}
    assert len(SERVICE_METHODS) >= 8
    assert served - set(GRPC_METHODS) == set(), "add these methods to GRPC_METHODS"
    assert set(GRPC_METHODS) - served == set(), "GRPC_METHODS lists methods no service has"


@pytest.mark.parametrize("method", SERVICE_METHODS, ids=lambda m: m.name)
async def test_without_credentials_every_method_is_unauthenticated(
    gw: SecureGateway, method: MethodDescriptor
) -> None:
    code, details = await _code(gw, method, ())
    assert code is grpc.StatusCode.UNAUTHENTICATED, details
    assert "authentication required" in details


@pytest.mark.parametrize("method", SERVICE_METHODS, ids=lambda m: m.name)
async def test_a_principal_no_rule_allows_is_permission_denied(
    gw: SecureGateway, method: MethodDescriptor
) -> None:
    code, details = await _code(gw, method, gw.files.metadata("nobody"))
    assert code is grpc.StatusCode.PERMISSION_DENIED, details
    action = GRPC_METHODS[method_path(method)].action
    assert f"'api_key:nobody' may not {action}" in details


async def test_another_principals_instance_is_not_found_on_every_instance_method(gw: SecureGateway) -> None:
    created = await gw.stub.CreateConsumer(
        pb.CreateConsumerRequest(group=GROUP, topics=["demo"]), metadata=gw.files.metadata("alice")
    )
    instance_methods = [m for m in SERVICE_METHODS if "instance_id" in m.input_type.fields_by_name]
    assert {m.name for m in instance_methods} == {
        "Poll",
        "Commit",
        "Nack",
        "ExtendDeadlines",
        "Seek",
        "DeleteConsumer",
        "Subscribe",
    }
    for method in sorted(instance_methods, key=lambda m: m.name == "DeleteConsumer"):
        code, details = await _code(gw, method, gw.files.metadata("bob"), created.instance_id)
        assert code is grpc.StatusCode.NOT_FOUND, (method.name, details)
        forged = created.instance_id[:-4] + ("AAAA" if not created.instance_id.endswith("AAAA") else "BBBB")
        assert (await _code(gw, method, gw.files.metadata("bob"), forged))[0] is grpc.StatusCode.NOT_FOUND
        if method.name != "Subscribe":
            code, details = await _code(gw, method, gw.files.metadata("alice"), created.instance_id)
            # an instance without a retry topic cannot nack: the owner gets past the lookup to that answer
            wanted = grpc.StatusCode.INVALID_ARGUMENT if method.name == "Nack" else grpc.StatusCode.OK
            assert code is wanted, (method.name, details)


async def test_publish_stream_answers_a_denied_topic_per_message(gw: SecureGateway) -> None:
    call = gw.stub.PublishStream(
        iter([pb.PublishStreamRequest(topic="demo", messages=[pb.Message(value=b"x")])]),
        metadata=gw.files.metadata("carol"),
    )
    answer = await call.read()
    assert describe(answer.acks[0].error).code == "permission_denied"
    assert answer.acks[0].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_health_is_open_and_reflection_needs_admin(gw: SecureGateway, version: str) -> None:
    from grpc_health.v1 import health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2

    health = health_pb2_grpc.HealthStub(gw.channel)
    assert (
        await health.Check(health_pb2.HealthCheckRequest())
    ).status == health_pb2.HealthCheckResponse.SERVING
    # v1 has v1alpha's messages under another package: the same bytes on the wire.
    reflection = gw.channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    for metadata, code in (
        ((), grpc.StatusCode.UNAUTHENTICATED),
        (gw.files.metadata("alice"), grpc.StatusCode.PERMISSION_DENIED),
    ):
        call = reflection(iter(()), metadata=metadata)  # no request: see _code
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() is code
    call = reflection(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=gw.files.metadata("root")
    )
    assert (await call.read()).list_services_response.service


async def test_api_key_metadata_forms(gw: SecureGateway) -> None:
    request = pb.GetTopicRequest(topic="demo")
    assert (
        await gw.stub.GetTopic(request, metadata=(("x-api-key", gw.files.keys["alice"]),))
    ).topic == "demo"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.GetTopic(request, metadata=(("authorization", "Basic abc"),))
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
