"""``Expect: 100-continue`` publishes (curl sends it for bodies over 1 KiB; .NET and some Java clients for
every POST) go the ASGI way when ``http.direct_publish`` is on, and answer exactly as with it off: the interim
``100 Continue`` only once the body is wanted; a refusal (credentials, size) answered at once, without
inviting the body. Real sockets, two gateways on one embedded cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support.auth_support import write_auth_files
from tests.support.direct_support import (
    access_lines,
    comparable,
    counting_direct,
    http_series,
    line,
    pair,
    read_answer,
    request,
)

PUBLISH = "/v1/topics/demo/messages"
BODY = json.dumps({"messages": [{"value": "v" * 2000}]}).encode()
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 1)], brokers=1) as c:
        yield c


async def _expecting(port: int, headers: dict[str, str], body: bytes = BODY) -> tuple[bool, bytes]:
    """Send the head with ``Expect: 100-continue`` and wait; send the body only when invited. Returns whether
    the body was invited and the final answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        framing = {
            "content-type": "application/json",
            "expect": "100-continue",
            "content-length": str(len(body)),
        }
        writer.write(request("POST", PUBLISH, {**framing, **headers}))
        await writer.drain()
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        if first != CONTINUE:
            length = int(dict(_headers(first)).get(b"content-length", b"0"))
            return False, first + await asyncio.wait_for(reader.readexactly(length), 30)
        writer.write(body)
        await writer.drain()
        return True, await read_answer(reader)
    finally:
        writer.close()


def _headers(head: bytes) -> list[tuple[bytes, bytes]]:
    return [(n.lower(), v) for n, _, v in (h.partition(b": ") for h in head.split(b"\r\n")[1:] if h)]


async def test_expect_continue_answers_as_the_asgi_way(
    cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_auth_files(tmp_path)
    cases = [
        files.headers("alice"),  # admitted: 100 Continue, then the body, then 200
        {"x-api-key": "not-a-key"},  # refused before the body: 401, no invitation
        {},  # no credentials: 401
    ]
    async with pair(
        cluster,
        auth=files.auth_settings(),
        consumers={"id_secret": "continue-secret-0123456789"},
        limits={"max_request_bytes": 4096},
    ) as gateways:
        seen = []
        for gateway in gateways:
            with access_lines() as records, counting_direct(monkeypatch) as served:
                outcomes = [await _expecting(gateway.port, headers) for headers in cases]
                too_big = await _expecting(gateway.port, files.headers("alice"), b"x" * 5000)
                await asyncio.sleep(0.05)  # the access line follows the write
            assert served == [], "Expect: 100-continue goes the ASGI way"
            seen.append(
                (
                    [(invited, comparable(answer)) for invited, answer in [*outcomes, too_big]],
                    [line(r) for r in records],
                )
            )
        assert seen[0] == seen[1]
        assert http_series(gateways[0].app) == http_series(gateways[1].app)
        answers = seen[0][0]
        assert [(invited, int(status.split()[1])) for invited, (status, _, _) in answers] == [
            (True, 200),
            (False, 401),
            (False, 401),
            (False, 413),
        ]
        assert b'"partition"' in answers[0][1][2]
