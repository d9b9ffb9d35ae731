"""A verified client certificate's subject as the principal (``auth.mtls_principal``).

The TLS listener (see the TLS settings) puts the subject of a certificate it verified into the ASGI TLS
extension, ``scope["extensions"]["tls"]["client_cert_name"]``; these tests hand the app such scopes directly,
as the listener would, so they check the authenticator's side of that contract.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from auth_support import MTLS_SUBJECT, SecureGateway, secure_gateway
from fastapi import FastAPI


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
    assert status == 403 and "'CN=someone-else,O=Example'" in body["error"]["message"]
    status, body = await asgi_get(gw.app, "/v1/topics/demo", None)
    assert status == 401


async def test_an_explicit_credential_wins_over_the_certificate(gw: SecureGateway) -> None:
    # the certificate's principal may describe, the key's principal nothing: the key is the one used
    status, body = await asgi_get(gw.app, "/v1/topics/demo", MTLS_SUBJECT, gw.files.headers("nobody"))
    assert status == 403 and "'nobody'" in body["error"]["message"]


async def test_without_mtls_principal_a_certificate_is_no_credential(tmp_path: Path) -> None:
    async with secure_gateway(tmp_path) as gateway:
        status, _ = await asgi_get(gateway.app, "/v1/topics/demo", MTLS_SUBJECT)
        assert status == 401
