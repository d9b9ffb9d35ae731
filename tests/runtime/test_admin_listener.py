"""The admin listener: with ``admin.port`` set, /metrics, /docs, /redoc and /openapi.json leave the main
listener and are served on their own port (started and stopped with the gateway); by default they stay."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.api.admin import ADMIN_PATHS
from gateway.api.app import create_app
from gateway.api.docs import ASSETS
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.process_server import ProcessServer
from gateway.runtime import Runtime
from gateway.serve import admin_config, http_config
from gateway.shutdown import ShutdownPlan
from tests.support.grpc_support import TOPICS, gateway_settings


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as c:
        yield c


async def test_by_default_they_stay_on_the_main_listener() -> None:
    app = create_app(Settings())
    assert app.state.admin_app is None
    assert admin_config(Settings(), app) is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        for path in ADMIN_PATHS:
            assert (await client.get(path)).status_code == 200, path


def _serving(cluster: EmbeddedCluster, admin_port: int = 0) -> tuple[ProcessServer, Runtime]:
    settings = gateway_settings(
        cluster, http_host="127.0.0.1", grpc={"enabled": False}, admin={"port": admin_port}
    )
    runtime = Runtime(settings)
    app = create_app(runtime=runtime, owns_runtime=False)
    plan = ShutdownPlan(grace_period=3.0)

    def drain() -> None:
        runtime.draining = True

    server = ProcessServer(
        http_config(settings, app, host="127.0.0.1", port=0, log_level=None, timeout_graceful_shutdown=1),
        runtime=runtime,
        grpc_server=None,
        on_drain=drain,
        plan=plan,
        admin_config=admin_config(settings, app, log_level=None),
    )
    return server, runtime


async def test_an_admin_port_moves_them_to_their_own_listener(cluster: EmbeddedCluster) -> None:
    server, runtime = _serving(cluster)
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                assert not serving.done()
                await asyncio.sleep(0.02)
        main_port = server.servers[0].sockets[0].getsockname()[1]
        admin_port = server.admin_port
        assert admin_port is not None and admin_port != main_port
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{main_port}") as main,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{admin_port}") as admin,
        ):
            for path in ADMIN_PATHS:
                assert (await main.get(path)).status_code == 404, path
            assert (await main.get("/healthz")).status_code == 200
            published = await main.post("/v1/topics/demo/messages", json={"messages": [{"value": "x"}]})
            assert published.status_code == 200
            metrics = await admin.get("/metrics")
            assert metrics.status_code == 200 and "tubemq_gateway_" in metrics.text
            assert 'route="/v1/topics/{topic}/messages"' in metrics.text  # the main app's own metrics
            document = (await admin.get("/openapi.json")).json()
            assert "/v1/topics/{topic}/messages" in document["paths"]
            assert "/metrics" not in document["paths"]
            for page in ("/docs", "/redoc"):
                # The pages name the document and their assets relative to themselves (offline, any prefix).
                answer = await admin.get(page)
                assert answer.status_code == 200 and "openapi.json" in answer.text
            for name in ASSETS:
                assert (await admin.get(f"/docs/assets/{name}")).status_code == 200, name
                assert (await main.get(f"/docs/assets/{name}")).status_code == 404, name
            assert (await admin.get("/v1/topics/demo")).status_code == 404  # the API is not here
            assert (await admin.get("/healthz")).status_code == 200  # probes work on both
            ready = await admin.get("/readyz")
            assert ready.status_code == 200 and ready.json()["ready"] is True
            assert "x-request-id" in metrics.headers
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
    assert server.admin is None and runtime.producer is None
    with socket.socket() as probe:  # the admin port is closed again
        assert probe.connect_ex(("127.0.0.1", admin_port)) != 0


async def test_a_taken_admin_port_stops_the_gateway(cluster: EmbeddedCluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server, runtime = _serving(cluster, taken.getsockname()[1])
        await server.serve()
    assert not server.started and runtime.producer is None


def test_the_admin_listener_asks_for_no_client_certificate(tmp_path: Path) -> None:
    from tests.support.tls_support import make_pki

    pki = make_pki(tmp_path)
    tls = {"cert_file": pki.server.cert, "key_file": pki.server.key}
    settings = Settings(admin={"port": 0}, tls={**tls, "client_ca_file": pki.ca, "client_auth": "required"})
    config = admin_config(settings, create_app(settings))
    assert config is not None and config.ssl_certfile == str(pki.server.cert)
    assert config.ssl_cert_reqs == ssl.CERT_NONE and config.ssl_ca_certs is None
