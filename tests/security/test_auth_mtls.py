"""A verified client certificate's subject as the principal (``auth.mtls_principal``).

The TLS listener puts the subject of a certificate it verified into the ASGI TLS extension,
``scope["extensions"]["tls"]["client_cert_name"]`` (gRPC: ``auth_context()["x509_subject_name"]``). The first
tests hand the app such scopes directly, as the listener would; the last one goes through the real TLS
listeners (HTTPS and gRPC) with certificates made in the test.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from fastapi import FastAPI

from gateway.config import Settings, TlsSettings
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import MTLS_SUBJECT, SecureGateway, secure_gateway, tls_listeners
from tests.support.tls_support import make_pki


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    async with secure_gateway(tmp_path, auth={"mtls_principal": True}) as gateway:
        yield gateway


async def asgi_get(
    app: FastAPI, path: str, subject: str | None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")]
        + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8443),
        "extensions": {"tls": {"client_cert_name": subject, "server_cert": None}},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body) if body else {}


async def test_the_certificate_subject_is_the_principal(gw: SecureGateway) -> None:
    status, body = await asgi_get(gw.app, "/v1/topics/demo", MTLS_SUBJECT)
    assert status == 200, body
    status, body = await asgi_get(gw.app, "/v1/topics/demo", "CN=someone-else,O=Example")
    assert status == 403 and "'mtls:CN=someone-else,O=Example'" in body["error"]["message"]
    status, body = await asgi_get(gw.app, "/v1/topics/demo", None)
    assert status == 401


async def test_an_explicit_credential_wins_over_the_certificate(gw: SecureGateway) -> None:
    # the certificate's principal may describe, the key's principal nothing: the key is the one used
    status, body = await asgi_get(gw.app, "/v1/topics/demo", MTLS_SUBJECT, gw.files.headers("nobody"))
    assert status == 403 and "'api_key:nobody'" in body["error"]["message"]


async def test_without_mtls_principal_a_certificate_is_no_credential(tmp_path: Path) -> None:
    async with secure_gateway(tmp_path) as gateway:
        status, _ = await asgi_get(gateway.app, "/v1/topics/demo", MTLS_SUBJECT)
        assert status == 401


async def test_end_to_end_over_the_tls_listeners(tmp_path: Path) -> None:
    """HTTPS and gRPC over TLS with required client certificates: the certificate's subject is the
    principal a rule names, on both adapters; another trusted certificate is a principal without rights."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    subject = pki.client.subject.rfc4514_string()
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"rules": [{"principals": [f"mtls:{subject}"], "actions": ["describe"], "topics": ["*"]}]})
    )
    tls = TlsSettings(
        cert_file=pki.server.cert, key_file=pki.server.key, client_ca_file=pki.ca, client_auth="required"
    )
    settings = Settings(
        http_host="127.0.0.1",
        embedded={"topics": "demo:1"},
        tls=tls,
        auth={"mode": "required", "mtls_principal": True, "rules_file": str(rules)},
        consumers={"id_secret": "mtls-test-secret"},
    )
    async with tls_listeners(settings, tls) as (base_url, rpc):
        url = f"{base_url}/v1/topics/demo"
        for client, status in ((pki.client, 200), (pki.dual, 403)):
            async with httpx.AsyncClient(verify=pki.client_context(client)) as http:
                answer = await http.get(url)
            assert answer.status_code == status, answer.text
        for client, code in ((pki.client, None), (pki.dual, grpc.StatusCode.PERMISSION_DENIED)):
            credentials = grpc.ssl_channel_credentials(
                root_certificates=pki.ca.read_bytes(),
                private_key=client.key.read_bytes(),
                certificate_chain=client.cert.read_bytes(),
            )
            async with grpc.aio.secure_channel(rpc.address, credentials) as channel:
                call = gateway_pb2_grpc.GatewayServiceStub(channel).GetTopic(
                    pb.GetTopicRequest(topic="demo"), timeout=10
                )
                if code is None:
                    assert (await call).topic == "demo"
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call
                    assert caught.value.code() is code
                    assert "'mtls:CN=replica'" in (caught.value.details() or "")


async def test_a_websocket_is_refused_when_auth_is_required(gw: SecureGateway) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "path": "/v1/topics/demo",
        "headers": [],
        "query_string": b"",
        "root_path": "",
    }
    await gw.app(scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008, "reason": "no WebSocket operations"}]
