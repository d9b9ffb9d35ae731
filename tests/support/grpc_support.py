"""Test helpers for the gRPC adapter: a runtime on the embedded cluster, a started GrpcServer, a client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.errors import DOMAIN
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime

TOPICS = [TopicSpec("demo", 4), TopicSpec("small", 2)]


def gateway_settings(cluster: EmbeddedCluster, **extra: Any) -> Settings:
    producer = {"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0}
    producer.update(extra.pop("producer", {}))
    return Settings(masters=",".join(str(a) for a in cluster.master_addresses), producer=producer, **extra)


@dataclass
class Gateway:
    runtime: Runtime
    server: GrpcServer
    channel: grpc.aio.Channel
    stub: gateway_pb2_grpc.GatewayServiceStub


@asynccontextmanager
async def running_gateway(
    cluster: EmbeddedCluster, settings: Settings | None = None, **server_options: Any
) -> AsyncIterator[Gateway]:
    """A started Runtime on ``cluster``, a GrpcServer on a free loopback port and a channel to it."""
    runtime = Runtime(settings or gateway_settings(cluster))
    await runtime.start()
    server = GrpcServer(runtime, grace=server_options.pop("grace", 0.5), **server_options)
    try:
        await server.start()
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield Gateway(runtime, server, channel, gateway_pb2_grpc.GatewayServiceStub(channel))
    finally:
        await server.stop(0)
        await runtime.stop()


@asynccontextmanager
async def consumer_gateway(topics: list[TopicSpec], data_dir: Path) -> AsyncIterator[Gateway]:
    """An embedded cluster of ``topics`` and a gateway on it with fast consumer timings (consumer tests)."""
    async with EmbeddedCluster(topics, brokers=1, data_dir=data_dir, balance_period=0.1) as cluster:
        consumers = {
            "heartbeat_interval": 0.1,
            "empty_fetch_wait": 0.05,
            "assignment_wait": 5.0,
            "lease": 30.0,
        }
        settings = gateway_settings(cluster, http_host="127.0.0.1", consumers=consumers)
        async with running_gateway(cluster, settings, subscribe_step=0.1) as served:
            yield served


def message(value: bytes | str, **fields: Any) -> pb.Message:
    return pb.Message(value=value.encode() if isinstance(value, str) else value, **fields)


@dataclass(frozen=True)
class ErrorView:
    """What a client reads from a google.rpc.Status with the gateway's error details: the REST error body's
    fields (``code`` is ErrorInfo.reason in lower case) plus the status code and the RetryInfo delay."""

    grpc_code: int
    message: str
    code: str
    metadata: dict[str, str]
    field: str | None
    index: int | None
    limit: int | None
    tubemq_error_code: int | None
    retry_after_seconds: float | None  # RetryInfo.retry_delay
    violations: list[tuple[str, str]]  # BadRequest: (field, description)
    resource: tuple[str, str] | None  # ResourceInfo: (resource_type, resource_name)


def _unpacked(status: status_pb2.Status, kind: Any) -> list[Any]:
    found = []
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            message = kind()
            detail.Unpack(message)
            found.append(message)
    return found


def describe(status: status_pb2.Status) -> ErrorView:
    """Read ``status`` with the standard types only; asserts the gateway's conventions (an ErrorInfo first, of
    the gateway's domain; RetryInfo and the metadata's retryAfterSeconds agree)."""
    assert status.details, f"no error details in {status}"
    assert status.details[0].Is(error_details_pb2.ErrorInfo.DESCRIPTOR), "ErrorInfo is not the first detail"
    (info,) = _unpacked(status, error_details_pb2.ErrorInfo)
    assert info.domain == DOMAIN and info.reason == info.reason.upper()
    meta = dict(info.metadata)
    retries = _unpacked(status, error_details_pb2.RetryInfo)
    assert len(retries) <= 1
    delay = retries[0].retry_delay.ToNanoseconds() / 1e9 if retries else None
    if delay is not None or "retryAfterSeconds" in meta:
        assert delay is not None and abs(delay - float(meta["retryAfterSeconds"])) < 1e-9  # Duration: ns
    requests = _unpacked(status, error_details_pb2.BadRequest)
    violations = [(v.field, v.description) for r in requests for v in r.field_violations]
    resources = _unpacked(status, error_details_pb2.ResourceInfo)
    assert len(resources) <= 1

    def number(key: str) -> int | None:
        return int(meta[key]) if key in meta else None

    return ErrorView(
        grpc_code=status.code,
        message=status.message,
        code=info.reason.lower(),
        metadata=meta,
        field=meta.get("field"),
        index=number("index"),
        limit=number("limit"),
        tubemq_error_code=number("tubemqErrorCode"),
        retry_after_seconds=delay,
        violations=violations,
        resource=(resources[0].resource_type, resources[0].resource_name) if resources else None,
    )


def detail_of(error: grpc.aio.AioRpcError) -> ErrorView:
    """The error details of a failed call, decoded as any client would, with grpcio-status's
    ``rpc_status.from_call`` (which checks the status's code and message against the call's); fails the test
    when there are none."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no google.rpc.Status in {error.trailing_metadata()}"
    return describe(status)


def trailer(error: grpc.aio.AioRpcError, key: str) -> Any:
    return dict(error.trailing_metadata() or ()).get(key)
