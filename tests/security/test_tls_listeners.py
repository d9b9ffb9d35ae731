"""TLS on the gateway's own listeners, with certificates made in the test: HTTPS publish, client certificates
required / optional, the verified subject in the ASGI scope (both uvicorn protocols), gRPC over TLS and the
gRPC mTLS identity. Everything talks to 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import uvicorn
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway import serve
from gateway.api.app import create_app
from gateway.api.tls_scope import TlsHttpToolsProtocol, rfc4514_name
from gateway.config import Settings, TlsSettings
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from gateway.serve import http_config
from gateway.tls import GRPC_SUBJECT_KEY, TlsConfigError, check_tls, grpc_server_credentials
from tests.support.consumer_support import environment
from tests.support.gateway_support import gateway, peer_settings
from tests.support.serving import bound_socket
from tests.support.tls_support import Issued, Pki, make_pki, odd_subject
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki: Pki, client_auth: str = "none") -> TlsSettings:
    ca = pki.ca if client_auth != "none" else None
    return TlsSettings(
        cert_file=pki.server.cert, key_file=pki.server.key, client_ca_file=ca, client_auth=client_auth
    )


@asynccontextmanager
async def listener(app: Any, settings: Settings, **options: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn as ``serve`` configures it, on a free loopback port; yields the base URL."""
    sock = bound_socket()
    config = http_config(settings, app, log_level=None, **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:

        async def up() -> bool:
            return server.started

        await eventually(up, timeout=10, what="uvicorn start")
        scheme = "https" if settings.tls.enabled else "http"
        yield f"{scheme}://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def echo_tls(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app answering the scope's TLS extension as JSON (null when there is none)."""
    assert scope["type"] == "http"
    body = json.dumps(scope.get("extensions", {}).get("tls")).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


async def get_tls(url: str, context: ssl.SSLContext | bool = False) -> Any:
    async with httpx.AsyncClient(verify=context) as client:
        answer = await client.get(url)
        assert answer.status_code == 200
        return answer.json()


async def refused(url: str, context: ssl.SSLContext) -> bool:
    """Whether the TLS listener refuses the connection (handshake alert or closed before answering)."""
    try:
        async with httpx.AsyncClient(verify=context) as client:
            await client.get(url)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


async def test_https_publish(pki: Pki) -> None:
    settings = Settings(
        http_host="127.0.0.1", embedded={"topics": "demo:2"}, tls=tls_settings(pki), grpc={"enabled": False}
    )
    app = create_app(settings)
    async with listener(app, settings, lifespan="on") as url:
        assert url.startswith("https://")
        async with httpx.AsyncClient(base_url=url, verify=pki.client_context()) as client:
            published = await client.post(
                "/v1/topics/demo/messages", json={"messages": [{"value": "over tls"}]}
            )
        assert published.status_code == 200, published.text
        assert published.json()["results"][0]["status"] == 200 if "results" in published.json() else True
        async with httpx.AsyncClient(verify=ssl.create_default_context()) as untrusting:
            with pytest.raises(httpx.ConnectError):
                await untrusting.get(f"{url}/healthz")  # the test CA is not a system CA
        plain = url.replace("https://", "http://")
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            async with httpx.AsyncClient() as client:
                await client.get(f"{plain}/healthz")


async def test_required_client_certificates_and_the_subject_in_the_scope(pki: Pki) -> None:
    settings = Settings(tls=tls_settings(pki, "required"))
    async with listener(echo_tls, settings, lifespan="off") as url:
        assert await refused(url, pki.client_context())
        assert await refused(url, pki.client_context(pki.stranger))
        tls = await get_tls(url, pki.client_context(pki.client))
    assert tls["client_cert_name"] == "CN=alice,OU=ingest,O=Example Corp,C=DE"
    assert tls["client_cert_name"] == pki.client.subject.rfc4514_string()
    assert tls["client_cert_chain"][0] == pki.client.cert.read_text()
    assert tls["client_cert_error"] is None and tls["tls_version"] in (0x0303, 0x0304)


async def test_optional_client_certificates(pki: Pki) -> None:
    async with listener(echo_tls, Settings(tls=tls_settings(pki, "optional")), lifespan="off") as url:
        assert (await get_tls(url, pki.client_context()))["client_cert_name"] is None
        assert (await get_tls(url, pki.client_context(pki.client)))[
            "client_cert_name"
        ] == "CN=alice,OU=ingest,O=Example Corp,C=DE"
        assert await refused(url, pki.client_context(pki.stranger))  # sent, but not verifiable
    async with listener(echo_tls, Settings(tls=tls_settings(pki)), lifespan="off") as url:
        # client_auth none: a certificate the client offers anyway is not asked for, so no name
        assert (await get_tls(url, pki.client_context(pki.client)))["client_cert_name"] is None
    async with listener(echo_tls, Settings(), lifespan="off") as url:
        assert await get_tls(url) is None  # plain HTTP: no TLS extension


def test_the_protocol_classes_are_uvicorns_httptools_with_the_header_guard(pki: Pki) -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert issubclass(TlsHttpToolsProtocol, HttpToolsProtocol)
    # With TLS and without: httptools with the header guard of gateway/api/http_guard.py, never h11.
    for settings in (Settings(), Settings(tls=tls_settings(pki, "required"))):
        http = http_config(settings, echo_tls).http
        assert isinstance(http, type) and issubclass(http, HttpToolsProtocol)
        # the guarded protocol, answering publishes and polls below ASGI (gateway/api/direct_protocol.py)
        assert http.__name__ == "DirectProtocol"
        assert http.__mro__[1].__name__ == "GuardedHttpToolsProtocol"
        assert issubclass(http, TlsHttpToolsProtocol) == (settings.tls.cert_file is not None)


async def test_rfc4514_subject_matches_cryptography(tmp_path: Path) -> None:
    odd = make_pki(tmp_path, odd_subject())
    settings = Settings(tls=tls_settings(odd, "required"))
    async with listener(echo_tls, settings, lifespan="off") as url:
        tls = await get_tls(url, odd.client_context(odd.client))
    assert tls["client_cert_name"] == odd.client.subject.rfc4514_string()
    assert rfc4514_name(((("commonName", "a"),), (("countryName", "DE"), ("organizationName", "x+y")))) == (
        "C=DE+O=x\\+y,CN=a"
    )


def test_settings_and_files_are_checked(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        TlsSettings(cert_file=pki.server.cert)
    with pytest.raises(ValueError, match="client_ca_file"):
        TlsSettings(cert_file=pki.server.cert, key_file=pki.server.key, client_auth="required")
    check_tls(tls_settings(pki, "required"))
    with pytest.raises(TlsConfigError, match=r"tls\.cert_file"):
        check_tls(TlsSettings(cert_file=pki.server.cert, key_file=pki.client.key))  # key of another cert
    with pytest.raises(TlsConfigError, match=r"tls\.cert_file"):
        check_tls(TlsSettings(cert_file=tmp_path / "missing.crt", key_file=pki.server.key))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(TlsConfigError, match=r"tls\.client_ca_file"):
        check_tls(
            TlsSettings(
                cert_file=pki.server.cert,
                key_file=pki.server.key,
                client_ca_file=junk,
                client_auth="optional",
            )
        )
    assert grpc_server_credentials(TlsSettings()) is None
    check_tls(TlsSettings(), pki.ca)
    with pytest.raises(TlsConfigError, match=r"consumers\.forward_ca_file"):
        check_tls(TlsSettings(), junk)
    with pytest.raises(TlsConfigError, match=r"consumers\.forward_ca_file"):
        check_tls(TlsSettings(), tmp_path / "missing-ca.pem")


def channel_credentials(pki: Pki, client: Issued | None = None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )


async def health(address: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return int(answer.status)


async def test_grpc_over_tls(pki: Pki) -> None:
    runtime = Runtime(Settings(http_host="127.0.0.1", embedded={"topics": "demo:1"}))
    await runtime.start()
    server = GrpcServer(
        runtime, credentials=grpc_server_credentials(tls_settings(pki, "required")), grace=0.2
    )
    try:
        await server.start()
        assert (
            await health(server.address, channel_credentials(pki, pki.client))
            == health_pb2.HealthCheckResponse.SERVING
        )
        for credentials in (None, channel_credentials(pki), channel_credentials(pki, pki.stranger)):
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await health(server.address, credentials)
            assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)
        await runtime.stop()


async def test_grpc_mtls_identity_is_visible(pki: Pki) -> None:
    """The credentials the gateway builds make gRPC verify the client and expose its subject in
    ``context.auth_context()`` (what an authenticating interceptor reads). With ``optional``, gRPC does not
    ask for a certificate at all (its Python API offers only "require and verify" or "do not ask"), so a
    client with or without one gets through and no subject is given."""

    async def who(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b"|".join(context.auth_context().get(GRPC_SUBJECT_KEY, []))

    for client_auth, expected in (("required", pki.client.subject.rfc4514_string()), ("optional", "")):
        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(who)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.Who", {"Am": handler})])
        credentials = grpc_server_credentials(tls_settings(pki, client_auth))
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        try:
            for client in (pki.client, None):
                async with grpc.aio.secure_channel(
                    f"127.0.0.1:{port}", channel_credentials(pki, client)
                ) as channel:
                    call = channel.unary_unary("/t.Who/Am")(b"", timeout=5)
                    if client is None and client_auth == "required":
                        with pytest.raises(grpc.aio.AioRpcError):
                            await call
                    else:
                        assert (await call).decode() == (expected if client else "")
        finally:
            await server.stop(0)


async def test_forwarding_between_tls_replicas(pki: Pki) -> None:
    """Replicas serving https with required client certificates forward to each other: the owner's
    certificate is verified against consumers.forward_ca_file, and the forwarder presents the replica's
    own certificate, which the other replica's client CA accepts."""
    async with environment() as env:
        first, second = bound_socket(), bound_socket()
        peers = {**peer_settings(first, second), "forward_ca_file": pki.ca}
        tls = TlsSettings(
            cert_file=pki.dual.cert, key_file=pki.dual.key, client_ca_file=pki.ca, client_auth="required"
        )
        async with (
            gateway(env, first, tls=tls, **peers) as owner,
            gateway(env, second, tls=tls, **peers) as other,
        ):
            assert owner.url.startswith("https://127.0.0.1:")
            context = pki.client_context(pki.client)
            async with (
                httpx.AsyncClient(base_url=owner.url, verify=context) as a,
                httpx.AsyncClient(base_url=other.url, verify=context) as b,
            ):
                created = await a.post("/v1/consumers/tls-g", json={"topics": ["solo"]})
                assert created.status_code == 201, created.text
                path = f"/v1/consumers/tls-g/instances/{created.json()['instanceId']}"
                polled = await b.get(f"{path}/messages", params={"timeout_ms": 0})
                assert polled.status_code == 200, polled.text
                assert owner.consumers.instance_count == 1 and other.consumers.instance_count == 0


def test_serve_flags(pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.__main__ import build_parser

    args = build_parser().parse_args(
        [
            "serve",
            "--tls-cert-file",
            str(pki.server.cert),
            "--tls-key-file",
            str(pki.server.key),
            "--tls-client-ca-file",
            str(pki.ca),
            "--tls-client-auth",
            "optional",
            "--admin-port",
            "9100",
        ]
    )
    settings = serve.settings_from_args(args)
    assert settings.tls == tls_settings(pki, "optional") and settings.admin.port == 9100
    assert settings.advertised_url().startswith("https://")
    bad = build_parser().parse_args(
        ["serve", "--tls-cert-file", str(pki.server.cert), "--tls-key-file", str(pki.client.key)]
    )
    assert serve.run_serve(bad) == 2
    assert "tls.key_file" in capsys.readouterr().err
