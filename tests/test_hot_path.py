"""The publish hot path (gateway/api/hot_path.py) answers exactly as the FastAPI route does.

Each request goes to the app twice: as built (a publish enters at the app's own outermost middleware and is
handled by HotPathMiddleware) and the long way (every FastAPI and Starlette layer, with HotPathMiddleware left
out, so publish is handled by FastAPI's router); status, body and headers must match, the route template must
reach the metrics, and requests the hot path does not take must be untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.app import create_app
from gateway.api.hot_path import HotPathMiddleware
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

JSON = {"content-type": "application/json"}
OCTETS = "application/octet-stream"


@pytest.fixture
async def apps(tmp_path: Path) -> AsyncIterator[tuple[FastAPI, FastAPI]]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1) as cluster:
        settings = Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
            producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
            limits={"max_batch_messages": 3, "max_request_bytes": 4096},
        )
        runtime = Runtime(settings)
        await runtime.start()
        try:
            hot = create_app(runtime=runtime)
            plain = create_app(runtime=runtime)
            plain.user_middleware = [m for m in plain.user_middleware if m.cls is not HotPathMiddleware]
            assert len(plain.user_middleware) == len(hot.user_middleware) - 1
            yield hot, plain
        finally:
            await runtime.stop()


class Spy:
    """Records whether a request reached the FastAPI router (i.e. went past the hot path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.routed: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.routed.append(scope["path"])
        await self.app(scope, receive, send)


CASES: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/v1/topics/demo/messages", JSON, json.dumps({"messages": [{"value": "a"}]}).encode()),
    ("POST", "/v1/topics/demo/messages", JSON, b'{"messages": [{"value": "a"}, {"value": "b", "key": "k"}]}'),
    ("POST", "/v1/topics/demo/messages", {"content-type": "application/octet-stream"}, b"raw"),
    ("POST", "/v1/topics/demo/messages", JSON, b"{not json"),
    ("POST", "/v1/topics/demo/messages", JSON, b'{"messages": []}'),
    ("POST", "/v1/topics/demo/messages", JSON, b'{"messages": [{"value": "a", "bogus": 1}]}'),
    ("POST", "/v1/topics/demo/messages", JSON, json.dumps({"messages": [{"value": "v"}] * 4}).encode()),
    ("POST", "/v1/topics/demo/messages", JSON, json.dumps({"messages": [{"value": "x" * 5000}]}).encode()),
    ("POST", "/v1/topics/demo/messages", {"content-type": "text/plain"}, b"a"),
    ("POST", "/v1/topics/demo/messages", {}, b"a"),
    ("POST", "/v1/topics/bad%20name/messages", JSON, b'{"messages": [{"value": "a"}]}'),
    ("POST", "/v1/topics/nosuchtopic/messages", JSON, b'{"messages": [{"value": "a"}]}'),
    # not taken by the hot path: other methods and paths
    ("GET", "/v1/topics/demo/messages", {}, b""),
    ("POST", "/v1/topics/demo/messages/", JSON, b'{"messages": [{"value": "a"}]}'),
    ("POST", "/v1/topics/demo", JSON, b"{}"),
]


def _long_way(app: FastAPI) -> ASGIApp:
    """``app`` entered as FastAPI enters it (GatewayApp's shorter way in for publish not taken)."""

    async def enter(scope: Scope, receive: Receive, send: Send) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return enter


def _comparable(r: httpx.Response) -> tuple[int, Any, dict[str, str]]:
    headers = {k: v for k, v in r.headers.items() if k != "x-request-id"}
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text
    if isinstance(body, dict):  # offsets and message ids differ between two stored messages
        body.pop("requestId", None)  # an error body's request id (as X-Request-ID) differs per request
        for result in body.get("results", []):
            volatile_fields = ("offset", "messageId", "appendTime", "partition", "partitionKey", "brokerId")
            for volatile in (*volatile_fields, "partitionId"):
                result.pop(volatile, None)
    headers.pop("content-length", None)
    return r.status_code, body, headers


@pytest.mark.parametrize(("method", "path", "headers", "body"), CASES)
async def test_hot_path_answers_as_the_router(
    apps: tuple[FastAPI, FastAPI], method: str, path: str, headers: dict[str, str], body: bytes
) -> None:
    hot, plain = apps
    answers = []
    for app in (hot, _long_way(plain)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            answers.append(await client.request(method, path, headers=headers, content=body))
    assert _comparable(answers[0]) == _comparable(answers[1])
    assert answers[0].headers["x-request-id"]


async def test_publish_skips_the_router_and_counts_under_its_route(apps: tuple[FastAPI, FastAPI]) -> None:
    hot, _ = apps
    spy = Spy(hot.router)
    hot.router = spy  # type: ignore[assignment]
    hot.middleware_stack = None  # rebuilt around the spy on the next request
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=hot), base_url="http://gw") as client:
        ok = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}]})
        bad = await client.post("/v1/topics/demo/messages", content=b"{", headers=JSON)
        other = await client.get("/v1/topics/demo")
    assert ok.status_code == 200 and bad.status_code == 400 and other.status_code == 200
    assert spy.routed == ["/v1/topics/demo"]
    text = hot.state.metrics.render().decode()
    route = 'route="/v1/topics/{topic}/messages"'
    counted = [line for line in text.splitlines() if line.startswith("tubemq_gateway_http_requests_total")]
    for code in (200, 400):  # the status label, whatever its name
        mark = re.compile(rf'\b\w+="{code}"')
        assert any(route in line and mark.search(line) and line.endswith(" 1.0") for line in counted), counted


async def test_publish_enters_at_the_apps_own_outermost_middleware(apps: tuple[FastAPI, FastAPI]) -> None:
    hot, _ = apps
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=hot), base_url="http://gw") as client:
        assert (await client.get("/healthz")).status_code == 200  # builds the middleware stack
        outer = Spy(hot.middleware_stack)  # outside the framework's layers: a publish must not pass it
        hot.middleware_stack = outer  # type: ignore[assignment]
        ok = await client.post("/v1/topics/demo/messages", json={"messages": [{"value": "a"}]})
        bad = await client.post("/v1/topics/demo/messages", content=b"{", headers=JSON)
        other = await client.get("/v1/topics/demo")
        raw = await client.post("/v1/topics/demo/messages", content=b"r", headers={"content-type": OCTETS})
    assert ok.status_code == 200 and bad.status_code == 400 and other.status_code == 200
    assert raw.status_code == 200 and raw.headers["x-request-id"] and bad.json()["error"]["field"] == "body"
    assert outer.routed == ["/v1/topics/demo"]
