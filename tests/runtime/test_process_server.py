"""ProcessServer: runtime, HTTP and gRPC in one event loop; startup failure and graceful shutdown order."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import uvicorn

from gateway.api.app import create_app
from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import create_grpc_server
from gateway.process_server import ProcessServer
from gateway.runtime import Runtime
from gateway.shutdown import ShutdownPlan
from tests.support.grpc_support import TOPICS, gateway_settings, message


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as c:
        yield c


def _server(runtime: Runtime, plan: ShutdownPlan) -> ProcessServer:
    config = uvicorn.Config(
        create_app(runtime=runtime, owns_runtime=False),
        host="127.0.0.1",
        port=0,
        log_config=None,  # leave the process's logging alone (other tests configure it)
        timeout_graceful_shutdown=max(1, round(plan.requests_timeout)),
    )

    def drain() -> None:
        runtime.draining = True

    return ProcessServer(
        config, runtime=runtime, grpc_server=create_grpc_server(runtime), on_drain=drain, plan=plan
    )


async def test_a_taken_grpc_port_stops_the_runtime_and_never_starts(cluster: EmbeddedCluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = gateway_settings(cluster, http_host="127.0.0.1", grpc={"port": taken.getsockname()[1]})
        runtime = Runtime(settings)
        server = _server(runtime, ShutdownPlan(grace_period=3.0))
        await server.serve()
    assert not server.started
    assert runtime.producer is None and runtime.pool is None  # released


async def test_drain_lets_a_grpc_stream_finish_before_the_runtime_stops(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(gateway_settings(cluster, http_host="127.0.0.1", grpc={"port": 0}))
    server = _server(runtime, ShutdownPlan(grace_period=6.0))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        assert not serving.done()
        await asyncio.sleep(0.02)
    assert server.grpc_server is not None
    release = asyncio.Event()

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(topic="demo", messages=[message("before the drain")])
        await release.wait()
        yield pb.PublishStreamRequest(messages=[message("during the drain")])

    async with grpc.aio.insecure_channel(server.grpc_server.address) as channel:
        call = gateway_pb2_grpc.GatewayServiceStub(channel).PublishStream(requests())
        assert (await call.read()).acks[0].WhichOneof("outcome") == "stored"
        server.begin_drain("test")
        await asyncio.sleep(0.3)
        assert runtime.draining and runtime.producer is not None  # the runtime waits for the stream
        release.set()
        last = (await call.read()).acks[0]
        assert last.sequence == 1 and last.WhichOneof("outcome") == "stored"
        assert (await call.code()) is grpc.StatusCode.OK
    await asyncio.wait_for(serving, 6.0)
    assert runtime.producer is None  # stopped after the stream ended
