"""Test helpers for the gRPC adapter: a runtime on the embedded cluster, a started GrpcServer, a client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.errors import unpack_status
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


def message(value: bytes | str, **fields: Any) -> pb.Message:
    return pb.Message(value=value.encode() if isinstance(value, str) else value, **fields)


def detail_of(error: grpc.aio.AioRpcError) -> pb.ErrorDetail:
    """The ErrorDetail in a failed call's trailers (fails the test when there is none)."""
    unpacked = unpack_status(error.trailing_metadata())
    assert unpacked is not None, f"no status details in {error.trailing_metadata()}"
    status, detail = unpacked
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    return detail


def trailer(error: grpc.aio.AioRpcError, key: str) -> Any:
    return dict(error.trailing_metadata() or ()).get(key)
