"""``tubemq-gateway serve`` with TLS and an admin listener, as an operator runs it: a real process with
``--tls-*`` flags and ``--admin-port``; the API over HTTPS with a required client certificate, metrics and
probes on the admin port (no client certificate), gRPC over TLS."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.serve_support import http_ready, start_serve, stop_serve, wait_ready
from tests.support.serving import free_port
from tests.support.tls_support import make_pki


def test_serve_with_tls_flags_and_an_admin_port(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    port, admin_port, grpc_port = free_port(), free_port(), free_port()
    proc = start_serve(
        [
            *("--http-host", "127.0.0.1", "--http-port", str(port), "--grpc-port", str(grpc_port)),
            *("--admin-port", str(admin_port), "--embedded-topics", "secure:1"),
            *("--tls-cert-file", str(pki.server.cert), "--tls-key-file", str(pki.server.key)),
            *("--tls-client-ca-file", str(pki.ca), "--tls-client-auth", "required"),
        ]
    )
    admin = httpx.Client(base_url=f"https://127.0.0.1:{admin_port}", verify=pki.client_context(), timeout=5)
    api = httpx.Client(
        base_url=f"https://127.0.0.1:{port}", verify=pki.client_context(pki.client), timeout=10
    )
    try:
        wait_ready(proc, http_ready(admin))  # no client certificate needed on the admin listener
        published = api.post("/v1/topics/secure/messages", json={"messages": [{"value": "tls"}]})
        assert published.status_code == 200, published.text
        assert api.get("/metrics").status_code == 404  # moved to the admin listener
        metrics = admin.get("/metrics")
        assert metrics.status_code == 200 and "tubemq_gateway_" in metrics.text
        assert admin.get("/openapi.json").json()["paths"]
        try:
            httpx.get(f"https://127.0.0.1:{port}/healthz", verify=pki.client_context(), timeout=5)
            raise AssertionError("the API listener served a client without a certificate")
        except httpx.HTTPError:
            pass
        credentials = grpc.ssl_channel_credentials(
            pki.ca.read_bytes(), pki.client.key.read_bytes(), pki.client.cert.read_bytes()
        )
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        admin.close()
        api.close()
        code, _ = stop_serve(proc)
    assert code == 0
