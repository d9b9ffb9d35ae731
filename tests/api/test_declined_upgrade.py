"""A request offering an upgrade the gateway does not take (``Upgrade: h2c``, as Java's HttpClient and
Spring's RestClient send on plain http) is served as HTTP/1.1 with its body (gateway/api/declined_upgrade.py):
a real gateway on the embedded cluster, raw bytes on a loopback socket. Before, the app saw an empty body:
a publish was refused as not JSON and a commit of one token committed everything delivered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support.consumer_support import environment
from tests.support.gateway_support import Gateway, gateway

H2C = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"


@asynccontextmanager
async def served() -> AsyncIterator[Gateway]:
    async with environment("demo:2") as env, gateway(env) as gw:
        yield gw


def request(
    method: str, path: str, body: bytes = b"", *, upgrade: bool = True, chunked: bool = False
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n".encode()
    head += H2C if upgrade else b""
    if chunked:
        return (
            head
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
    framing = f"Content-Length: {len(body)}\r\n".encode() if body or method == "POST" else b""
    return head + framing + b"\r\n" + body


async def answers(gw: Gateway, *pieces: bytes, count: int) -> list[tuple[int, Any]]:
    """Writes ``pieces`` one by one on one connection; the ``count`` answers (status, JSON body)."""
    url = urlsplit(gw.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
        out = []
        for _ in range(count):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode().split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            out.append((int(lines[0].split()[1]), json.loads(body) if body else None))
        return out
    finally:
        writer.close()


PUBLISH = json.dumps({"messages": [{"value": "hello", "key": "k"}]}).encode()


async def test_a_publish_offering_h2c_is_served_with_its_body() -> None:
    async with served() as gw:
        [(status, body)] = await answers(gw, request("POST", "/v1/topics/demo/messages", PUBLISH), count=1)
        assert status == 200, body
        assert body["results"][0]["status"] == 200
        # chunked, and the body in pieces written apart
        whole = request("POST", "/v1/topics/demo/messages", PUBLISH, chunked=True)
        cut = whole.index(b"\r\n\r\n") + 10
        [(status, body)] = await answers(gw, whole[:cut], whole[cut:], count=1)
        assert status == 200 and body["results"][0]["status"] == 200, body


async def test_a_commit_offering_h2c_commits_only_its_tokens() -> None:
    async with served() as gw, httpx.AsyncClient(base_url=gw.url, timeout=20) as http:
        for _ in range(3):
            assert (
                await http.post(
                    "/v1/topics/demo/messages", content=PUBLISH, headers={"content-type": "application/json"}
                )
            ).status_code == 200
        created = await http.post("/v1/consumers/g1", json={"topics": ["demo"], "startPosition": "earliest"})
        base = created.json()["baseUrl"]
        delivered: list[str] = []
        for _ in range(20):
            poll = await http.get(f"{base}/messages", params={"timeout_ms": 1000})
            delivered += [m["token"] for m in poll.json()["messages"]]
            if len(delivered) >= 3:
                break
        assert len(delivered) == 3
        path = urlsplit(base).path + "/commits"
        one = json.dumps({"tokens": delivered[:1]}).encode()
        [(status, body)] = await answers(gw, request("POST", path, one), count=1)
        assert (status, body["committed"], body["pending"]) == (200, 1, 2), body  # not all three
        back = json.dumps({"tokens": delivered[1:2], "consumed": False}).encode()
        [(status, body)] = await answers(gw, request("POST", path, back), count=1)
        # a rollback stays one (of the token's batch), not a commit of everything delivered
        assert status == 200 and body["committed"] == 0 and body["rolledBack"] >= 1, body
        await http.delete(base)


async def test_requests_after_a_declined_upgrade_on_the_connection_are_served() -> None:
    async with served() as gw:
        pipelined = request("POST", "/v1/topics/demo/messages", PUBLISH) + request(
            "GET", "/healthz", upgrade=False
        )
        got = await answers(gw, pipelined, count=2)
        assert [status for status, _ in got] == [200, 200] and got[1][1] == {"status": "ok"}, got
        # a GET offering h2c (no body), then a plain request on the same connection
        got = await answers(
            gw, request("GET", "/healthz"), request("GET", "/v1/topics/demo", upgrade=False), count=2
        )
        assert [status for status, _ in got] == [200, 200] and got[1][1]["topic"] == "demo", got
