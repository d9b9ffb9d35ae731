"""Abuse limits and browser rules over REST, against the embedded cluster: 429 with Retry-After and RateLimit
headers for a caller above its quota while other callers go on, the consumer instance cap, CORS, and the
Content-Type publish requires."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.middleware import Middleware

from gateway.api.app import create_app
from gateway.api.auth import AuthMiddleware
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.principal import ANONYMOUS, Principal, principal_scope
from tests.support.waiting import ManualClock

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
ORIGIN = "https://app.example"
PUBLISH = "/v1/topics/demo/messages"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


class HeaderPrincipal:
    """In the authentication middleware's place: each request runs as the principal its ``x-test-principal``
    header names, else as the anonymous caller, from its client address (the limits only see the caller)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        name = dict(scope.get("headers") or ()).get(b"x-test-principal")
        principal = ANONYMOUS if name is None else Principal(name.decode(), "api_key")
        client = scope.get("client")
        with principal_scope(principal, client[0] if client else None):
            await self.app(scope, receive, send)


def with_principal_header(app: Any) -> Any:
    """``app`` with :class:`HeaderPrincipal` in place of its authentication middleware."""
    mine = [m for m in app.user_middleware if m.cls is AuthMiddleware]
    assert len(mine) == 1
    app.user_middleware = [
        Middleware(HeaderPrincipal) if m.cls is AuthMiddleware else m for m in app.user_middleware
    ]
    return app


class Gateway:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = with_principal_header(create_app(runtime=runtime))

    def client(self, address: str = "127.0.0.1") -> httpx.AsyncClient:
        """A client whose requests come from ``address`` (only as the ASGI scope's client; no traffic)."""
        transport = httpx.ASGITransport(app=self.app, client=(address, 50000))
        return httpx.AsyncClient(transport=transport, base_url="http://gw")


async def start(cluster: EmbeddedCluster, **settings: Any) -> Runtime:
    runtime = Runtime(
        Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
            producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
            consumers={"heartbeat_interval": 0.2, "assignment_wait": 1.0},
            **settings,
        )
    )
    await runtime.start()
    return runtime


@pytest.fixture
async def limited(cluster: EmbeddedCluster) -> AsyncIterator[Gateway]:
    """5 messages/s (bursts of 5), 1000 bytes/s, 1 consumer instance per caller; bob may do more."""
    runtime = await start(
        cluster,
        rate_limits={
            "publish_messages_per_second": 5,
            "publish_bytes_per_second": 1000,
            "burst_seconds": 1,
            "max_instances_per_principal": 1,
            "overrides": {
                "api_key:bob": {"publish_messages_per_second": 1000, "max_instances_per_principal": 2}
            },
        },
        cors={"allow_origins": [ORIGIN]},
    )
    # The buckets refill on a clock only the tests move: at 5 messages/s, 0.2 s of a busy machine between
    # two requests would refill one and turn an expected 429 into a 200.
    assert runtime.quotas is not None
    runtime.quotas._clock = ManualClock()
    try:
        yield Gateway(runtime)
    finally:
        await runtime.stop()


def batch(count: int, value: str = "m") -> dict[str, Any]:
    return {"messages": [{"value": value} for _ in range(count)]}


def assert_rate_limited(answer: httpx.Response, policy: str, remaining: str = "0") -> dict[str, Any]:
    """A 429 naming ``policy`` in RateLimit-Policy, ``remaining`` (a regex) and the wait in RateLimit."""
    assert answer.status_code == 429, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["retryAfterSeconds"] > 0
    retry_after = int(answer.headers["retry-after"])
    assert retry_after >= 1 and retry_after >= error["retryAfterSeconds"]
    assert answer.headers["ratelimit-policy"] == policy
    name = policy.split(";")[0]
    assert re.fullmatch(f"{name};r={remaining};t={retry_after}", answer.headers["ratelimit"])
    return error


async def test_a_principal_above_its_rate_gets_429_and_another_is_unaffected(limited: Gateway) -> None:
    async with limited.client() as http:
        alice = {"x-test-principal": "alice"}
        assert (await http.post(PUBLISH, json=batch(5), headers=alice)).status_code == 200
        error = assert_rate_limited(
            await http.post(PUBLISH, json=batch(1), headers=alice), '"messages";q=5;w=1'
        )
        assert "principal 'api_key:alice'" in error["message"] and "rate_limits.overrides" in error["message"]
        raw = await http.post(
            PUBLISH, content=b"raw", headers={**alice, "content-type": "application/octet-stream"}
        )
        assert_rate_limited(raw, '"messages";q=5;w=1')
        # bob has his own (larger) buckets; carol the default ones, untouched by alice.
        for _ in range(3):
            answer = await http.post(PUBLISH, json=batch(10), headers={"x-test-principal": "bob"})
            assert answer.status_code == 200, answer.text
        assert (
            await http.post(PUBLISH, json=batch(5), headers={"x-test-principal": "carol"})
        ).status_code == 200
        # Reading is not publishing: alice can still look at the topic.
        assert (await http.get("/v1/topics/demo", headers=alice)).status_code == 200


async def test_bytes_per_second_limit(limited: Gateway) -> None:
    async with limited.client() as http:
        bob = {"x-test-principal": "bob"}  # bob's messages/s are high, his bytes/s the default 1000
        assert (await http.post(PUBLISH, json=batch(2, "x" * 400), headers=bob)).status_code == 200
        answer = await http.post(PUBLISH, json=batch(1, "x" * 400), headers=bob)
        error = assert_rate_limited(answer, '"bytes";q=1000;w=1;qu="content-bytes"', remaining="2[0-9][0-9]")
        assert "1000 bytes per second" in error["message"]


async def test_anonymous_clients_are_limited_per_address(limited: Gateway) -> None:
    async with limited.client("127.0.0.1") as first, limited.client("::1") as second:
        assert (await first.post(PUBLISH, json=batch(5))).status_code == 200
        error = assert_rate_limited(await first.post(PUBLISH, json=batch(1)), '"messages";q=5;w=1')
        assert "client 127.0.0.1" in error["message"]
        assert (await second.post(PUBLISH, json=batch(5))).status_code == 200


async def test_consumer_instances_are_capped_per_principal(limited: Gateway) -> None:
    async with limited.client() as http:
        body = {"topics": ["demo"]}
        alice = {"x-test-principal": "alice"}
        created = await http.post("/v1/consumers/g-cap", json=body, headers=alice)
        assert created.status_code == 201, created.text
        error = assert_rate_limited(
            await http.post("/v1/consumers/g-cap", json=body, headers=alice), '"instances";q=1'
        )
        assert "maximum of 1 consumer instances" in error["message"]
        for _ in range(2):  # bob's override allows two; his do not count against alice
            answer = await http.post("/v1/consumers/g-cap", json=body, headers={"x-test-principal": "bob"})
            assert answer.status_code == 201, answer.text
        # the instance is alice's: only she may delete it (anyone else gets 404)
        deleted = await http.delete(urlsplit(created.headers["location"]).path, headers=alice)
        assert deleted.status_code == 204, deleted.text
        again = await http.post("/v1/consumers/g-cap", json=body, headers=alice)
        assert again.status_code == 201, again.text  # deleting one freed its place


async def test_cors_preflight_and_headers_on_answers(limited: Gateway) -> None:
    async with limited.client() as http:
        preflight = await http.options(
            PUBLISH,
            headers={
                "origin": ORIGIN,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, authorization, x-tubemq-key",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert {"content-type", "authorization", "x-tubemq-key"} <= {h.strip() for h in allowed.split(",")}
        assert preflight.headers["access-control-max-age"] == "600"
        assert "access-control-allow-credentials" not in preflight.headers

        stranger = await http.options(
            PUBLISH, headers={"origin": "https://evil.example", "access-control-request-method": "POST"}
        )
        assert "access-control-allow-origin" not in stranger.headers

        answer = await http.get("/v1/topics/demo", headers={"origin": ORIGIN})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        exposed = {h.strip().lower() for h in answer.headers["access-control-expose-headers"].split(",")}
        assert {"retry-after", "ratelimit", "ratelimit-policy", "x-request-id", "location"} <= exposed
        # Error answers carry them too, or the page could not read its 429.
        headers = {"origin": ORIGIN, "x-test-principal": "dave"}
        await http.post(PUBLISH, json=batch(5), headers=headers)
        refused = await http.post(PUBLISH, json=batch(5), headers=headers)
        assert refused.status_code == 429
        assert refused.headers["access-control-allow-origin"] == ORIGIN


async def test_no_cors_headers_unless_origins_are_configured(cluster: EmbeddedCluster) -> None:
    runtime = await start(cluster)
    try:
        async with Gateway(runtime).client() as http:
            answer = await http.get("/v1/topics/demo", headers={"origin": ORIGIN})
            assert answer.status_code == 200
            assert not [h for h in answer.headers if h.startswith("access-control-")]
            preflight = await http.options(
                PUBLISH, headers={"origin": ORIGIN, "access-control-request-method": "POST"}
            )
            assert preflight.status_code == 405
            assert not [h for h in preflight.headers if h.startswith("access-control-")]
    finally:
        await runtime.stop()


@pytest.mark.parametrize(
    "content_type",
    [
        None,  # what a page's no-cors fetch with a Blob body sends
        "text/plain;charset=UTF-8",  # a page's no-cors fetch with a string body
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/jsonx",
        "",
    ],
)
async def test_publish_refuses_missing_or_unsupported_content_type(
    limited: Gateway, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    async with limited.client() as http:
        answer = await http.post(PUBLISH, content=b'{"messages": [{"value": "x"}]}', headers=headers)
    assert answer.status_code == 415, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unsupported_media_type" and error["field"] == "Content-Type"
    assert "application/json" in error["message"]
    if content_type is None or "charset" not in content_type:
        assert "application/octet-stream" in error["message"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"messages": [{"value": "x"}]}'),
        ("Application/JSON; charset=UTF-8", b'{"messages": [{"value": "x"}]}'),
        ('application/json;charset="utf-8"', b'{"messages": [{"value": "x"}]}'),
        ("application/octet-stream", b"x"),
        ("APPLICATION/OCTET-STREAM; x=y", b"x"),
    ],
)
async def test_publish_accepts_the_supported_types(limited: Gateway, content_type: str, body: bytes) -> None:
    async with limited.client() as http:
        answer = await http.post(
            PUBLISH, content=body, headers={"content-type": content_type, "x-test-principal": "bob"}
        )
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["results"]) == 1


@pytest.mark.parametrize(
    "content_type", [None, "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"]
)
async def test_consumer_routes_take_only_json_bodies(limited: Gateway, content_type: str | None) -> None:
    """A page's no-cors POST cannot join a consumer group (and steal its partitions) either."""
    headers = {"x-test-principal": "bob"} | ({} if content_type is None else {"content-type": content_type})
    async with limited.client() as http:
        joined = await http.post("/v1/consumers/g-type", content=b'{"topics": ["demo"]}', headers=headers)
        assert joined.status_code == 415, joined.text
        assert joined.json()["error"]["code"] == "unsupported_media_type"
        assert limited.runtime.consumers is not None and limited.runtime.consumers.instance_count == 0
        bob = {"x-test-principal": "bob"}
        created = await http.post("/v1/consumers/g-type", json={"topics": ["demo"]}, headers=bob)
        assert created.status_code == 201, created.text
        commits = urlsplit(created.headers["location"]).path + "/commits"
        refused = await http.post(commits, content=b"{}", headers=headers)
        assert refused.status_code == 415, refused.text
        assert (await http.post(commits, json={}, headers=bob)).status_code == 200
        assert (await http.post(commits, headers=bob)).status_code == 200  # no body: commit everything
