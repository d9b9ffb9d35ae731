"""``tubemq-gateway serve`` with gRPC: one process, HTTP and gRPC over one runtime, exiting cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.files import ROOT
from tests.support.serve_support import free_port, stop_serve


def _serving(channel: grpc.Channel) -> bool:
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def test_serve_answers_grpc_and_http_from_one_runtime(tmp_path: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_MASTERS": ""}
    command = [sys.executable, "-m", "gateway", "serve", "--http-host", "127.0.0.1"]
    command += ["--http-port", str(http_port), "--grpc-port", str(grpc_port), "--embedded-topics", "orders:3"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            deadline = time.monotonic() + 30
            while not _serving(channel):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "gRPC health did not report SERVING in 30 s"
                time.sleep(0.2)
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
