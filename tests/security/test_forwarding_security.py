"""Forwarding is not an open relay: a forged or foreign instance id never makes the gateway connect anywhere,
only allowed peers are reached, and only the API's own headers travel (no cookies, no Set-Cookie, no HTML).

A :class:`Peer` is a raw HTTP listener on 127.0.0.1 that counts connections, records request heads and
answers with canned bytes: it stands for "somewhere an attacker would like the gateway to connect to", or
for an owner replica answering things no gateway answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.config import AuthSettings, ConsumerSettings, Settings
from gateway.runtime import ConfigurationError, Runtime, consumer_id_secret
from gateway.service.instance_id import new_instance_id
from gateway.service.peers import PeerPolicy, parse_allow_entry
from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, gateway
from tests.support.serving import bound_socket

SECRET = "relay-test-secret-0123456789abcdef"
GROUP = "fs-g"

JSON_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"


class Peer:
    """A loopback HTTP listener: counts connections, keeps each request head, answers ``answer`` then
    closes the connection."""

    def __init__(self, answer: bytes = JSON_OK + b"\r\n{}") -> None:
        self.answer = answer
        self.connections = 0
        self.heads: list[dict[str, str]] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Peer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            self.heads.append(
                {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
            )
            writer.write(self.answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _instance_path(peer_url: str, secret: str = SECRET, group: str = GROUP) -> str:
    return f"/v1/consumers/{group}/instances/{new_instance_id(group, peer_url, secret.encode())}"


async def _every_route(client: httpx.AsyncClient, path: str) -> list[httpx.Response]:
    return [
        await client.get(f"{path}/messages", params={"timeout_ms": 0}),
        await client.post(f"{path}/commits", json={}),
        await client.get(f"{path}/stream"),
        await client.get(path),
        await client.delete(path),
    ]


async def test_a_forged_id_never_connects_anywhere(env: Env) -> None:
    """No secret, one replica: ids signed with anything else (the old empty default included) are 404
    without a connection, whether the named port is open or closed: the answers are the same."""
    async with Peer() as open_peer, gateway(env) as served, httpx.AsyncClient(base_url=served.url) as client:
        closed = bound_socket()  # bound, not listening: connecting would be refused
        closed_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        answers: dict[str, list[tuple[int, str]]] = {}
        for url in (open_peer.url, closed_url):
            for secret in ("", "guessed-secret-0123456789"):
                path = await _instance_path(url, secret)
                seen = [(a.status_code, a.json()["error"]["code"]) for a in await _every_route(client, path)]
                answers.setdefault(secret, []).extend(seen)
        closed.close()
    assert open_peer.connections == 0
    for seen in answers.values():
        assert set(seen) == {(404, "not_found")}


async def test_a_signed_id_naming_a_peer_outside_the_allowlist_never_connects(env: Env) -> None:
    async with Peer() as peer:
        allowed_elsewhere = {"id_secret": SECRET, "forward_allow": ["127.0.0.1"], "forward_ports": []}
        not_allowed_host = {
            "id_secret": SECRET,
            "forward_allow": ["10.0.0.0/8"],
            "forward_ports": [peer.port],
        }
        for options in (allowed_elsewhere, not_allowed_host, {"id_secret": SECRET}):
            async with gateway(env, **options) as served, httpx.AsyncClient(base_url=served.url) as client:
                path = await _instance_path(peer.url)
                for answer in await _every_route(client, path):
                    assert answer.status_code == 410, answer.text
                    assert "consumers.forward_allow" in answer.json()["error"]["message"]
                https = await _instance_path(peer.url.replace("http:", "https:"))
                assert (await client.get(f"{https}/messages")).status_code == 410
    assert peer.connections == 0


@pytest.fixture
async def relay_peer(env: Env) -> AsyncIterator[tuple[Peer, Gateway]]:
    """A gateway allowed to forward to ``peer`` (a fake owner replica on another loopback port)."""
    async with Peer() as peer:
        options = {"id_secret": SECRET, "forward_allow": ["127.0.0.1"], "forward_ports": [peer.port]}
        # a peer slow to answer on a busy machine must not turn a refused answer (502) into a timeout (503)
        async with gateway(env, **options, forward_timeout=10.0) as served:
            yield peer, served


async def test_only_credentials_and_api_headers_are_forwarded(relay_peer: tuple[Peer, Gateway]) -> None:
    peer, served = relay_peer
    peer.answer = (
        JSON_OK + b"set-cookie: session=stolen; Path=/\r\nx-powered-by: evil\r\nx-tubemq-note: kept\r\n"
        b"ratelimit: limit=10, remaining=9\r\nretry-after: 3\r\nserver: evil/1.0\r\n\r\n{}"
    )
    path = await _instance_path(peer.url)
    sent = {
        "Authorization": "Bearer k1",
        "x-api-key": "k2",
        "Cookie": "session=victim",
        "Proxy-Authorization": "Basic eDp5",
        "Forwarded": "for=1.2.3.4",
        "X-Forwarded-For": "1.2.3.4",
        "X-Custom": "x",
        "Accept": "application/json",
        "Last-Event-ID": "1:2",
        "X-Request-ID": "req-1",
        "X-TubeMQ-Trace": "t",
    }
    async with httpx.AsyncClient(base_url=served.url) as client:
        first = await client.get(f"{path}/messages", headers=sent)
        await client.get(f"{path}/messages")
    assert first.status_code == 200 and first.json() == {}
    assert "set-cookie" not in first.headers and "x-powered-by" not in first.headers
    assert first.headers["x-tubemq-note"] == "kept" and first.headers["retry-after"] == "3"
    assert first.headers["ratelimit"] == "limit=10, remaining=9"
    assert first.headers.get("server") != "evil/1.0"
    head, again = peer.heads
    assert set(head) == {
        "host",
        "authorization",
        "x-api-key",
        "accept",
        "last-event-id",
        "x-request-id",
        "x-tubemq-trace",
        "x-tubemq-forwarded-by",
        "accept-encoding",
        "user-agent",
        "connection",
        # the public URL this replica worked out (its loopback client is a trusted proxy that sent a proxy
        # header); the caller's own Forwarded and X-Forwarded-For never go out
        "x-forwarded-proto",
        "x-forwarded-host",
    }
    assert (
        head["x-forwarded-host"] == served.url.removeprefix("http://") and head["x-forwarded-proto"] == "http"
    )
    assert not any(name.startswith("x-forwarded") for name in again)  # no proxy header: nothing to carry
    assert head["authorization"] == "Bearer k1" and head["x-api-key"] == "k2"
    assert head["x-tubemq-forwarded-by"] == served.url and head["accept-encoding"] == "identity"
    # the cookie the "owner" set is neither kept nor replayed
    assert "cookie" not in again and "authorization" not in again


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 14\r\n\r\n<h1>admin</h1>",
        b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/x\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nabcd",
    ],
    ids=["html", "redirect", "untyped"],
)
async def test_an_answer_that_is_not_the_apis_is_refused(
    relay_peer: tuple[Peer, Gateway], answer: bytes
) -> None:
    peer, served = relay_peer
    peer.answer = answer
    path = await _instance_path(peer.url)
    async with httpx.AsyncClient(base_url=served.url) as client:
        polled = await client.get(f"{path}/messages")
        streamed = await client.get(f"{path}/stream")
    for got in (polled, streamed):
        assert got.status_code == 502 and got.json()["error"]["code"] == "upstream_error", got.text
        assert "<h1>" not in got.text and "location" not in got.headers
    assert peer.connections == 2  # one each: the redirect was not followed


def test_a_shared_secret_is_required_where_ids_cross_replicas() -> None:
    base = Settings(http_host="127.0.0.1")
    assert len(consumer_id_secret(base)) == 32
    assert consumer_id_secret(base) != consumer_id_secret(base)  # random per process (per call here)
    several = base.model_copy(update={"consumers": ConsumerSettings(replicas=3)})
    peers = base.model_copy(update={"consumers": ConsumerSettings(forward_allow=["10.0.0.0/8"])})
    auth = base.model_copy(update={"auth": AuthSettings(mode="required")})
    for settings, reason in ((several, "replicas is 3"), (peers, "forward_allow"), (auth, "auth.mode")):
        with pytest.raises(ConfigurationError, match=reason) as refused:
            consumer_id_secret(settings)
        assert "TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET" in str(refused.value)
    shared = ConsumerSettings(replicas=3, id_secret=SECRET)
    assert consumer_id_secret(base.model_copy(update={"consumers": shared})) == SECRET.encode()
    with pytest.raises(ValueError, match="at least 16"):
        ConsumerSettings(id_secret="short")


async def test_a_runtime_without_the_secret_refuses_to_start() -> None:
    runtime = Runtime(Settings(http_host="127.0.0.1", consumers=ConsumerSettings(replicas=2)))
    with pytest.raises(ConfigurationError, match="openssl rand"):
        await runtime.start()
    assert runtime.cluster is None and runtime.pool is None


def test_forwarding_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUBEMQ_GATEWAY_CONSUMERS__FORWARD_ALLOW", '["10.0.0.0/8", "*.gw.ns.svc"]')
    monkeypatch.setenv("TUBEMQ_GATEWAY_CONSUMERS__FORWARD_PORTS", "[8081]")
    c = Settings().consumers
    assert c.forward_allow == ["10.0.0.0/8", "*.gw.ns.svc"] and c.forward_ports == [8081]
    assert ConsumerSettings(forward_allow="10.0.0.0/8, gw.svc").forward_allow == ["10.0.0.0/8", "gw.svc"]  # type: ignore[arg-type]
    for bad in ("10.0.0.0/33", "gw..svc", "*", "a*.svc", "http://x"):
        with pytest.raises(ValueError):
            parse_allow_entry(bad)


def test_the_peer_policy() -> None:
    policy = PeerPolicy.build(
        "http://10.1.0.5:8080", ["10.1.0.0/16", "fd00::/8", "*.gw.ns.svc", "gw-0.x"], [8081]
    )
    allowed = [
        "http://10.1.2.3:8080",
        "http://10.1.2.3:8081",
        "http://[fd00::1]:8080",
        "http://gw-1.gw.ns.svc:8080",
        "http://GW-0.X:8080",
    ]
    refused = [
        "https://10.1.2.3:8080",
        "http://10.2.0.1:8080",
        "http://10.1.2.3:8082",
        "http://10.1.2.3",
        "http://gw.ns.svc:8080",
        "http://evil-gw.ns.svc.example:8080",
        "http://[::ffff:10.1.2.3]:8080",
        "http://x.gw-0.x:8080",
        "http://10.1.2.3:99999",
    ]
    assert [u for u in allowed if not policy.allows(u)] == []
    assert [u for u in refused if policy.allows(u)] == []
    assert not PeerPolicy.build("http://10.1.0.5:8080").enabled
    assert not PeerPolicy.build("http://10.1.0.5:8080").allows("http://10.1.0.6:8080")
    assert PeerPolicy.build("https://h:443", ["h"]).allows("https://h")
    assert policy.describe() == (
        "http ports [8080, 8081] hosts ['10.1.0.0/16', 'fd00::/8', '*.gw.ns.svc', 'gw-0.x']"
    )
