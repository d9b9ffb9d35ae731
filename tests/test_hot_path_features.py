"""The publish hot path answers as the router does with every feature a deployment turns on (issue #26).

Like ``tests/test_hot_path.py``, each script of requests goes to two apps on one runtime: as built (a publish
enters at the app's own outermost middleware and is served by the hot path) and the long way (every FastAPI
and Starlette layer, no HotPathMiddleware: FastAPI's router serves publish). Here the runtime has the features
on: authentication by API key, JWT and client certificate (mTLS), with refusals of each kind; body limits,
concurrency and per-caller publish quotas (413, 429); gzip; CORS; tracing. For the same requests the two must
give the same status, headers and body, the same access log lines, the same HTTP metrics and the same spans.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from direct_support import access_lines as kept_access_lines
from direct_support import http_series, line, span_view, spans_exporter
from fastapi import FastAPI
from jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.app import create_app
from gateway.api.hot_path import HotPathMiddleware
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.observability import tracing
from gateway.runtime import Runtime
from tests.auth_support import MTLS_SUBJECT, write_auth_files

PUBLISH = "/v1/topics/demo/messages"
ORIGIN = "https://app.example"
ONE = json.dumps({"messages": [{"value": "a"}]}).encode()
JSON = {"content-type": "application/json"}
#: request headers that name no caller; the cert subject goes in the TLS extension (see :func:`_with_cert`)
CERT = "x-test-client-cert"

#: a script: the requests one client sends in a row (method, path, headers, body)
Script = list[tuple[str, str, dict[str, str], bytes]]


@dataclass
class Apps:
    hot: FastAPI
    plain: FastAPI
    runtime: Runtime


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2), TopicSpec("other_t", 1)], brokers=1) as c:
        yield c


@pytest.fixture
def spans() -> Iterator[Any]:
    with spans_exporter() as exporter:
        yield exporter


@pytest.fixture
def access_lines() -> Iterator[list[logging.LogRecord]]:
    with kept_access_lines() as records:
        yield records


async def _apps(cluster: EmbeddedCluster, **settings: Any) -> Apps:
    runtime = Runtime(
        Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
            producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
            **settings,
        )
    )
    await runtime.start()
    hot = create_app(runtime=runtime)
    plain = create_app(runtime=runtime)
    plain.user_middleware = [m for m in plain.user_middleware if m.cls is not HotPathMiddleware]
    return Apps(hot, plain, runtime)


def _long_way(app: FastAPI) -> ASGIApp:
    """``app`` entered as FastAPI enters it (GatewayApp's shorter way in for publish not taken)."""

    async def enter(scope: Scope, receive: Receive, send: Send) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return enter


def _with_cert(app: ASGIApp) -> ASGIApp:
    """The TLS extension a verified client certificate gives (uvicorn's), from the test header ``CERT``."""

    async def enter(scope: Scope, receive: Receive, send: Send) -> None:
        for name, value in scope.get("headers", ()):
            if name == CERT.encode():
                scope["extensions"] = {"tls": {"client_cert_name": value.decode()}}
        await app(scope, receive, send)

    return enter


_VOLATILE_RESULT = (
    "offset",
    "messageId",
    "appendTime",
    "partition",
    "partitionKey",
    "brokerId",
    "partitionId",
)


def _comparable(r: httpx.Response) -> tuple[int, Any, dict[str, str]]:
    headers = {k: v for k, v in r.headers.items() if k not in ("x-request-id", "content-length")}
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text
    if isinstance(body, dict):
        body.pop("requestId", None)
        for result in body.get("results", []):
            for volatile in _VOLATILE_RESULT:
                result.pop(volatile, None)
        error = body.get("error")
        if isinstance(error, dict) and "retryAfterSeconds" in error:  # the time left in a bucket
            error["retryAfterSeconds"] = "<seconds>"
            # each app's script comes from a client address of its own
            error["message"] = re.sub(
                r"client [\d.]+ (.*) retry in [\d.]+ s", r"client <a> \1 retry in <n> s", error["message"]
            )
    for timed in ("retry-after", "ratelimit-reset", "ratelimit"):
        if timed in headers:
            headers[timed] = re.sub(r"\d+(\.\d+)?", "<n>", headers[timed])
    return r.status_code, body, headers


async def _run(
    apps: Apps,
    script: Script,
    access_lines: list[logging.LogRecord],
    spans: Any,
    client: tuple[str, str],
) -> None:
    """Send ``script`` to both apps (each from a client address of its own: quotas start alike) and compare
    everything the two leave behind."""
    seen: list[Any] = []
    for app, address in ((apps.hot, client[0]), (_long_way(apps.plain), client[1])):
        access_lines.clear()
        transport = httpx.ASGITransport(app=_with_cert(app), client=(address, 40000))
        answers = []
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            for method, path, headers, body in script:
                answers.append(await http.request(method, path, headers=headers, content=body))
        # every answer but a CORS preflight's (answered outside the request ids and the access log)
        answered = [a for a in answers if a.request.method != "OPTIONS"]
        assert all(a.headers.get("x-request-id") for a in answered)
        view = [_comparable(a) for a in answers]
        lines = [line(r) for r in access_lines]
        seen.append((view, lines, span_view(spans) if spans is not None else None))
    assert seen[0][0] == seen[1][0]
    assert seen[0][1] == seen[1][1] and len(seen[0][1]) == sum(m != "OPTIONS" for m, *_ in script)
    assert seen[0][2] == seen[1][2]
    assert http_series(apps.hot) == http_series(apps.plain)


async def test_every_auth_method_and_refusal(
    cluster: EmbeddedCluster, tmp_path: Path, access_lines: list[logging.LogRecord]
) -> None:
    files = write_auth_files(tmp_path)
    signer = SigningKey.rsa("hot-key")
    async with jwks_server(signer) as issuer:
        jwt_settings = {
            "issuer": ISSUER,
            "audience": [AUDIENCE],
            "jwks_url": issuer.url,
            "roles_claim": "roles",
        }
        apps = await _apps(
            cluster,
            auth=files.auth_settings(mtls_principal=True, jwt=jwt_settings),
            consumers={"id_secret": "hot-path-secret-0123456789"},
        )
        try:
            token = signer.token(roles=["app"])
            narrow = signer.token(sub="narrow-user", roles=["narrow"])
            script: Script = [
                ("POST", PUBLISH, {**JSON, **files.headers("alice")}, ONE),  # API key
                ("POST", PUBLISH, {**JSON, "x-api-key": files.keys["bob"]}, ONE),
                ("POST", PUBLISH, {**JSON, "authorization": f"Bearer {token}"}, ONE),  # JWT
                ("POST", PUBLISH, {**JSON, CERT: "CN=nobody"}, ONE),  # mTLS, no rule
                ("POST", PUBLISH, {**JSON, CERT: MTLS_SUBJECT}, ONE),  # mTLS, describe only: 403
                ("POST", PUBLISH, {**JSON, "authorization": f"Bearer {narrow}"}, ONE),  # 403 on demo
                ("POST", "/v1/topics/other_t/messages", {**JSON, "authorization": f"Bearer {narrow}"}, ONE),
                ("POST", PUBLISH, {**JSON, **files.headers("nobody")}, ONE),  # valid key, no rule: 403
                ("POST", PUBLISH, {**JSON, "authorization": "Bearer not-a-key"}, ONE),  # 401
                ("POST", PUBLISH, JSON, ONE),  # no credentials: 401
                ("POST", PUBLISH, {**JSON, "authorization": f"Bearer {token}x"}, ONE),  # bad signature
                ("POST", PUBLISH, {**JSON, **files.headers("alice")}, b"{"),  # authenticated, then 400
            ]
            await _run(apps, script, access_lines, None, ("10.1.0.1", "10.1.0.2"))
            statuses = [line["status"] for line in (line(r) for r in access_lines)]
            assert statuses == [200, 200, 200, 403, 403, 403, 200, 403, 401, 401, 401, 400], statuses
        finally:
            await apps.runtime.stop()


async def test_limits_gzip_cors_and_tracing(
    cluster: EmbeddedCluster, access_lines: list[logging.LogRecord], spans: Any
) -> None:
    apps = await _apps(
        cluster,
        limits={"max_batch_messages": 3, "max_request_bytes": 2048, "max_concurrent_per_caller": 4},
        rate_limits={"publish_messages_per_second": 4, "burst_seconds": 1},
        compression={"min_bytes": 0},
        cors={"allow_origins": [ORIGIN]},
    )
    try:
        assert tracing.enabled()  # the spans fixture: TracingMiddleware is installed
        gzip = {"accept-encoding": "gzip"}
        browser = {"origin": ORIGIN}
        traced = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
        script: Script = [
            ("POST", PUBLISH, {**JSON, **gzip, **browser, **traced}, ONE),
            ("POST", PUBLISH, {**JSON, **gzip}, json.dumps({"messages": [{"value": "b"}] * 2}).encode()),
            ("POST", PUBLISH, {**JSON, "origin": "https://evil.example"}, ONE),  # 1 token left: 429 next
            ("POST", PUBLISH, {**JSON, **browser}, ONE),  # above the quota: 429
            ("POST", PUBLISH, {**JSON, **gzip}, json.dumps({"messages": [{"value": "x" * 3000}]}).encode()),
            ("POST", PUBLISH, {**JSON, **browser}, json.dumps({"messages": [{"value": "v"}] * 4}).encode()),
            ("POST", PUBLISH, {"content-type": "text/plain", **browser}, b"a"),
            ("OPTIONS", PUBLISH, {**browser, "access-control-request-method": "POST"}, b""),
        ]
        await _run(apps, script, access_lines, spans, ("10.2.0.1", "10.2.0.2"))
        statuses = [line["status"] for line in (line(r) for r in access_lines)]
        assert statuses[:5] == [200, 200, 200, 429, 413], statuses
    finally:
        await apps.runtime.stop()


class Exchange:
    """One request sent straight into an ASGI app: the body as the client sends it (``None``: the client goes
    away instead; ``stall``: it never comes), and the answer's messages."""

    def __init__(self, body: bytes | None, stall: bool = False) -> None:
        self.body = body
        self.stall = stall
        self.messages: list[dict[str, Any]] = []
        self._sent = False

    async def run(self, app: ASGIApp, client: str) -> None:
        headers = [(b"content-type", b"application/json")]
        if self.body is not None:
            headers.append((b"content-length", str(len(self.body)).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8080),
            "client": (client, 40000),
            "scheme": "http",
            "method": "POST",
            "root_path": "",
            "path": PUBLISH,
            "raw_path": PUBLISH.encode(),
            "query_string": b"",
            "headers": headers,
            "state": {},
        }
        await app(scope, self.receive, self.send)

    async def receive(self) -> dict[str, Any]:
        if self.stall or self._sent:
            await asyncio.Event().wait()  # nothing more comes (a disconnect is not sent here)
        self._sent = True
        if self.body is None:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def comparable(self) -> list[Any]:
        found: list[Any] = []
        for message in self.messages:
            if message["type"] == "http.response.start":
                headers = sorted(
                    (k, v) for k, v in message["headers"] if k not in (b"x-request-id", b"content-length")
                )
                found.append((message["status"], headers))
            else:
                body = message.get("body", b"")
                try:
                    document = json.loads(body)
                except ValueError:
                    found.append(body)
                    continue
                document.pop("requestId", None)
                error = document.get("error", {})
                error["message"] = re.sub(r"request id \w+", "request id <id>", error.get("message", ""))
                found.append(document)
        return found


async def test_errors_the_client_leaving_and_a_stalled_body(
    cluster: EmbeddedCluster, access_lines: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unhandled error (500 with the request id), a client that leaves before its body (499, nothing sent)
    and a body that never comes (408): alike on both ways, access lines and metrics included."""
    apps = await _apps(cluster, limits={"body_timeout": 0.2})
    try:
        service = apps.runtime.publisher()

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        cases = [(Exchange(ONE), True), (Exchange(None), False), (Exchange(ONE, stall=True), False)]
        seen = []
        for app, client in ((apps.hot, "10.3.0.1"), (_long_way(apps.plain), "10.3.0.2")):
            access_lines.clear()
            views = []
            for case, fails in cases:
                exchange = Exchange(case.body, case.stall)
                with monkeypatch.context() as patch:
                    if fails:  # either entry: the usual batch comes prepared (publish_json.c)
                        patch.setattr(service, "publish", broken)
                        patch.setattr(service, "publish_prepared", broken)
                    await asyncio.wait_for(exchange.run(app, client), 10)
                views.append(exchange.comparable())
            seen.append((views, [line(r) for r in access_lines]))
        assert seen[0] == seen[1]
        assert [line["status"] for line in seen[0][1]] == [500, 499, 408]
        assert seen[0][0][1] == []  # nothing is sent to a client that left
        assert http_series(apps.hot) == http_series(apps.plain)
    finally:
        await apps.runtime.stop()
