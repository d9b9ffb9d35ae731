"""URLs behind a reverse proxy: baseUrl and Location name the URL the client used when the peer is a trusted
proxy (http.trusted_proxies), and the replica's advertised URL otherwise; the headers never choose where the
gateway connects (forwarding goes to the instance id's owner, checked against consumers.forward_allow)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.types import Receive, Scope, Send

from gateway.api.proxy import ProxyHeadersMiddleware, TrustedProxies, forwarded_headers, public_base_url
from gateway.api.worker_listener import private_app
from gateway.config import HttpSettings
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway, replica_pair

PROXY = {"x-forwarded-proto": "https", "x-forwarded-host": "api.example.com", "x-forwarded-prefix": "/gw"}
#: a documentation network (RFC 5737) as the only trusted proxy: the loopback test client is untrusted
ELSEWHERE = {"trusted_proxies": ["192.0.2.0/24"]}


def scope(peer: str = "127.0.0.1", headers: dict[str, str] | None = None, **extra: Any) -> Scope:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    return {"type": "http", "scheme": "http", "client": (peer, 5000), "headers": raw, "path": "/", **extra}


async def through(middleware_trust: list[str], request: Scope) -> Scope:
    """The scope the app sees after the middleware."""
    seen: list[Scope] = []

    async def app(inner: Scope, receive: Receive, send: Send) -> None:
        seen.append(inner)

    async def nothing() -> Any:
        return {}

    async def ignore(message: Any) -> None:
        return None

    await ProxyHeadersMiddleware(app, trusted=middleware_trust)(request, nothing, ignore)
    return seen[0]


async def test_a_trusted_peer_sets_client_scheme_and_public_url() -> None:
    headers = {"host": "10.1.2.3:8080", "x-forwarded-for": "203.0.113.9, 10.0.0.5", **PROXY}
    seen = await through(["127.0.0.1", "10.0.0.0/8"], scope(headers=headers))
    assert seen["client"][0] == "203.0.113.9"  # uvicorn's walk from the right past trusted hops
    assert seen["scheme"] == "https"
    assert public_base_url(seen) == "https://api.example.com/gw"
    assert forwarded_headers(seen) == PROXY


async def test_an_untrusted_peer_changes_nothing() -> None:
    headers = {
        "host": "10.1.2.3:8080",
        "x-forwarded-for": "203.0.113.9",
        "forwarded": "host=evil.example",
        **PROXY,
    }
    seen = await through(["192.0.2.0/24"], scope(headers=headers))
    assert seen["client"] == ("127.0.0.1", 5000) and seen["scheme"] == "http"
    assert public_base_url(seen) is None and forwarded_headers(seen) == {}
    # ...and with no trusted proxy at all
    assert public_base_url(await through([], scope(headers=headers))) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # RFC 7239 wins over X-Forwarded-*; the last element is the trusted peer's own
        (
            {"forwarded": 'for=1.2.3.4;host="a.example";proto=https, for=5.6.7.8;host=b.example;proto=https'},
            "https://b.example",
        ),
        ({"forwarded": "proto=https", "x-forwarded-host": "x.example"}, "https://x.example"),
        (
            {"x-forwarded-host": "evil.example, lb.example", "x-forwarded-proto": "http, https"},
            "https://lb.example",
        ),
        (
            {"x-forwarded-host": "lb.example", "x-forwarded-port": "8443", "x-forwarded-proto": "https"},
            "https://lb.example:8443",
        ),
        (
            {"x-forwarded-host": "lb.example", "x-forwarded-port": "443", "x-forwarded-proto": "https"},
            "https://lb.example",
        ),
        ({"x-forwarded-host": "[::1]:9", "x-forwarded-port": "10"}, "http://[::1]:9"),
        # Host when the proxy sends only the scheme (it passes the client's Host on)
        ({"x-forwarded-proto": "https"}, "https://gw.internal:8080"),
        ({"x-forwarded-prefix": "/tenant-a/api/"}, "http://gw.internal:8080/tenant-a/api"),
        # values that are not a scheme, host or path are ignored
        (
            {"x-forwarded-host": "evil.example/path?x", "x-forwarded-proto": "javascript"},
            "http://gw.internal:8080",
        ),
        ({"x-forwarded-host": "a b", "x-forwarded-prefix": "/x/../<script>"}, "http://gw.internal:8080"),
        ({"x-forwarded-prefix": "//evil.example"}, "http://gw.internal:8080"),
        # no proxy header at all: a direct client, the advertised URL is used
        ({}, None),
    ],
)
def test_public_base_url_from_the_proxy_headers(headers: dict[str, str], expected: str | None) -> None:
    request = scope(headers={"host": "gw.internal:8080", **headers})
    request["gateway.trusted_proxy"] = True
    assert public_base_url(request) == expected


def test_trusted_proxies_setting() -> None:
    assert HttpSettings().trusted_proxies == ["127.0.0.1", "::1"]  # uvicorn's forwarded_allow_ips default
    assert HttpSettings(trusted_proxies="10.0.0.0/8, fd00::/8").trusted_proxies == ["10.0.0.0/8", "fd00::/8"]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not an IP address"):
        HttpSettings(trusted_proxies=["ingress.example"])
    trusted = TrustedProxies(["10.0.0.0/8", "::1"])
    assert "10.9.9.9" in trusted and "::1" in trusted
    assert "11.0.0.1" not in trusted and "unix:/tmp/x" not in trusted and None not in trusted
    assert "anything" in TrustedProxies(["*"])


async def test_consumer_urls_behind_a_trusted_proxy(env: Env) -> None:
    # The test client on loopback is the proxy (loopback is trusted by default).
    async with gateway(env) as gw, httpx.AsyncClient(base_url=gw.url) as client:
        created = await client.post("/v1/consumers/p-g", json={"topics": ["solo"]}, headers=PROXY)
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        expected = f"https://api.example.com/gw/v1/consumers/p-g/instances/{instance}"
        assert created.json()["baseUrl"] == expected and created.headers["location"] == expected
        described = await client.get(f"/v1/consumers/p-g/instances/{instance}", headers=PROXY)
        assert described.json()["baseUrl"] == expected
        # Without proxy headers the same replica answers its advertised URL.
        direct = await client.get(f"/v1/consumers/p-g/instances/{instance}")
        assert direct.json()["baseUrl"] == f"{gw.url}/v1/consumers/p-g/instances/{instance}"
        # The instance lives here whatever URL the proxy named: its id names this replica.
        assert gw.consumers.locate("p-g", instance) is None


async def test_consumer_urls_from_an_untrusted_peer(env: Env) -> None:
    async with gateway(env, http=ELSEWHERE) as gw, httpx.AsyncClient(base_url=gw.url) as client:
        created = await client.post("/v1/consumers/p-u", json={"topics": ["solo"]}, headers=PROXY)
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        expected = f"{gw.url}/v1/consumers/p-u/instances/{instance}"
        assert created.json()["baseUrl"] == expected and created.headers["location"] == expected
        # (Host is the client's own: a lone replica answers it, tests/api/test_base_url.py)
        forged = {"forwarded": "host=evil.example;proto=https", "x-forwarded-host": "evil.example"}
        described = await client.get(f"/v1/consumers/p-u/instances/{instance}", headers=forged)
        assert described.json()["baseUrl"] == expected


async def test_forwarding_keeps_to_the_owner_and_carries_the_public_url(env: Env) -> None:
    async with (
        replica_pair(env) as (owner, other),
        httpx.AsyncClient(base_url=owner.url) as a,
        httpx.AsyncClient(base_url=other.url) as b,
    ):
        created = await a.post("/v1/consumers/p-f", json={"topics": ["solo"]})
        instance = created.json()["instanceId"]
        path = f"/v1/consumers/p-f/instances/{instance}"
        # Through the other replica, with proxy headers naming some other host: the request still goes to
        # the owner (the id's replica), and the owner's answer names the URL the client used.
        described = await b.get(path, headers={**PROXY, "x-forwarded-host": "127.0.0.1:1"})
        assert described.status_code == 200, described.text
        assert described.json()["baseUrl"] == f"https://127.0.0.1:1/gw{path}"
        assert owner.consumers.instance_count == 1 and other.consumers.instance_count == 0
        polled = await b.get(f"{path}/messages", params={"timeout_ms": 0}, headers=PROXY)
        assert polled.status_code == 200, polled.text


async def test_a_sibling_workers_public_url_is_believed_on_the_private_listener_only() -> None:
    # serve --workers N: a worker forwards to a sibling over that sibling's private unix socket (no peer
    # address), sending the public URL it worked out; the public listener never believes it from that peer.
    app = FastAPI()

    @app.get("/base")
    async def base(request: Request) -> dict[str, str | None]:
        return {"base": public_base_url(request.scope)}

    guarded = ProxyHeadersMiddleware(app, trusted=["127.0.0.1"])
    for served, expected in ((private_app(app), "https://api.example.com/gw"), (guarded, None)):
        transport = httpx.ASGITransport(app=served, client=("", 0))
        async with httpx.AsyncClient(transport=transport, base_url="http://worker-1") as client:
            answer = await client.get("/base", headers=PROXY)
        assert answer.json() == {"base": expected}
