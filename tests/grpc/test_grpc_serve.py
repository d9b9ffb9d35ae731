"""``tubemq-gateway serve`` with gRPC: one process, HTTP and gRPC over one runtime, exiting cleanly."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.serve_support import start_serve, stop_serve, wait_ready
from tests.support.serving import free_port


def _serving(channel: grpc.Channel) -> bool:
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def test_serve_answers_grpc_and_http_from_one_runtime(tmp_path: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    proc = start_serve(
        [
            *("--http-host", "127.0.0.1", "--http-port", str(http_port), "--grpc-port", str(grpc_port)),
            *("--embedded-topics", "orders:3"),
        ]
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            wait_ready(proc, lambda: _serving(channel), what="SERVING on gRPC health")
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            response = stub.Publish(
                pb.PublishRequest(topic="orders", messages=[pb.Message(value=b"hi")] * 3), timeout=10
            )
            assert response.failed == 0 and len(response.results) == 3
            assert len(stub.GetTopic(pb.GetTopicRequest(topic="orders"), timeout=10).partitions) == 3
        # the HTTP side runs on the same runtime: it sees the topic the gRPC side published
        topic = httpx.get(f"http://127.0.0.1:{http_port}/v1/topics/orders", timeout=10).json()
        assert len(topic["partitions"]) == 3
    finally:
        code, output = stop_serve(proc)
    assert code == 0, output
