"""Request bounds over real sockets (uvicorn on 127.0.0.1): bodies counted while they stream (413 at
limit+1, chunked too, on every body-taking route), stalled bodies (408), concurrent requests and in-flight
publish bytes (503 + Retry-After); the gateway answers normally afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support.raw_http import answer, open_request, serving

PUBLISH = "/v1/topics/demo/messages"
CREATE = "/v1/consumers/grp"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def send_chunked(port: int, path: str, total: int, content_type: str) -> tuple[int, dict[str, Any]]:
    """Send ``total`` bytes of body in 1 KiB chunks (stopping when the server answers), return its answer."""
    reader, writer = await open_request(
        port, "POST", path, {"content-type": content_type, "transfer-encoding": "chunked"}
    )
    piece = b"x" * 1024
    sent = 0
    try:
        while sent < total:
            part = piece[: total - sent]
            writer.write(chunk(part))
            sent += len(part)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the server answered and closed while we were still sending
    status, _, body = await answer(reader)
    writer.close()
    return status, body


@pytest.mark.parametrize(
    ("path", "content_type", "setting"),
    [
        (PUBLISH, "application/octet-stream", "max_request_bytes"),
        (CREATE, "application/json", "max_control_body_bytes"),
    ],
)
async def test_a_chunked_body_one_byte_above_the_limit_is_413(
    cluster: EmbeddedCluster, path: str, content_type: str, setting: str
) -> None:
    async with serving(cluster, **{setting: 4096}) as (port, _):
        status, body = await send_chunked(port, path, 4097, content_type)
        assert status == 413 and body["error"]["limit"] == 4096 and body["error"]["field"] == "body"
        # Exactly the limit is read and judged by the route (a raw publish: stored; garbage JSON: 400).
        status, body = await send_chunked(port, path, 4096, content_type)
        assert status == (200 if path == PUBLISH else 400), body


async def test_a_declared_length_above_the_limit_is_413_before_any_body(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, max_control_body_bytes=2048) as (port, _):
        reader, writer = await open_request(
            port, "POST", CREATE, {"content-type": "application/json", "content-length": str(10**12)}
        )
        status, headers, body = await answer(reader)
        assert status == 413 and headers["connection"] == "close"
        assert body["requestId"] == headers["x-request-id"]
        writer.close()


async def test_a_stalled_body_is_408_and_the_gateway_goes_on(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, body_timeout=0.2) as (port, _):
        reader, writer = await open_request(
            port, "POST", PUBLISH, {"content-type": "application/octet-stream", "content-length": "100"}
        )
        writer.write(b"only part of it")
        await writer.drain()
        status, _, body = await answer(reader)
        assert status == 408 and body["error"]["code"] == "request_timeout"
        writer.close()
        status, _ = await send_chunked(port, PUBLISH, 10, "application/octet-stream")
        assert status == 200


async def test_concurrent_requests_above_the_cap_are_503_and_probes_still_answer(
    cluster: EmbeddedCluster,
) -> None:
    # every request here comes from one address: the per-caller share is tested in test_fair_shares.py
    async with serving(cluster, max_concurrent_requests=2, max_concurrent_per_caller=0) as (port, _):
        held = [
            await open_request(
                port, "POST", PUBLISH, {"content-type": "application/octet-stream", "content-length": "10"}
            )
            for _ in range(2)
        ]
        for _, writer in held:
            writer.write(b"12345")  # half a body: the request stays in progress
            await writer.drain()
        await asyncio.sleep(0.2)  # let both requests reach the app (no assertion on time)
        reader, writer = await open_request(port, "GET", "/v1/topics/demo", {})
        status, headers, body = await answer(reader)
        assert status == 503 and headers["retry-after"] == "1" and body["error"]["code"] == "unavailable"
        writer.close()
        reader, writer = await open_request(port, "GET", "/healthz", {})
        assert (await answer(reader))[0] == 200
        writer.close()
        for held_reader, held_writer in held:
            held_writer.write(b"67890")
            await held_writer.drain()
            assert (await answer(held_reader))[0] == 200
            held_writer.close()


async def test_publish_bytes_in_flight_above_the_cap_are_503(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, max_inflight_publish_bytes=4096) as (port, _):
        first_reader, first = await open_request(
            port, "POST", PUBLISH, {"content-type": "application/octet-stream", "content-length": "4000"}
        )
        first.write(b"a" * 3000)
        await first.drain()
        await asyncio.sleep(0.2)  # let the first request's bytes be read (no assertion on time)
        status, body = await send_chunked(port, PUBLISH, 2000, "application/octet-stream")
        assert status == 503 and body["error"]["code"] == "unavailable"
        first.write(b"a" * 1000)
        await first.drain()
        assert (await answer(first_reader))[0] == 200
        first.close()
        status, body = await send_chunked(port, PUBLISH, 2000, "application/octet-stream")
        assert status == 200, body


async def test_oversized_or_too_many_headers_are_431(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, max_header_bytes=8192, max_headers=20) as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/topics/demo HTTP/1.1\r\nhost: x\r\nx-big: " + b"y" * 9000)
        await writer.drain()
        head = await reader.read()
        assert head.startswith(b"HTTP/1.1 431 "), head[:100]
        writer.close()
        # 1.6 MB of one header that never ends: cut off (431, or a reset when the server closes on unread
        # bytes), never buffered.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/topics/demo HTTP/1.1\r\nhost: x\r\nx-big: ")
        try:
            for _ in range(100):
                writer.write(b"y" * 16384)
                await writer.drain()
            head = await reader.read()
            assert head.startswith(b"HTTP/1.1 431 "), head[:100]
        except ConnectionError:
            pass
        writer.close()
        many = {f"x-h{i}": "1" for i in range(30)}
        reader, writer = await open_request(port, "GET", "/v1/topics/demo", many)
        head = await reader.read()
        assert head.startswith(b"HTTP/1.1 431 "), head[:100]
        writer.close()
        # Within the limits, and a body past the header limit in the same packet, all is well.
        reader, writer = await open_request(
            port, "POST", PUBLISH, {"content-type": "application/octet-stream", "content-length": "20000"}
        )
        writer.write(b"z" * 20000)
        assert (await answer(reader))[0] == 200
        writer.close()


async def test_slow_headers_get_408_and_silent_connections_are_closed(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, header_timeout=0.3, keep_alive_timeout=0.3) as (port, _):
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/topics/demo HTTP/1.1\r\nhost: x\r\n")  # and never the blank line
        await writer.drain()
        assert (await reader.read()).startswith(b"HTTP/1.1 408 ")
        assert await silent_reader.read() == b""  # closed without an answer
        writer.close()
        silent.close()
        # A keep-alive connection: one request answered, then closed when idle.
        reader, writer = await open_request(port, "GET", "/healthz", {})
        assert (await answer(reader))[0] == 200
        assert await reader.read() == b""
        writer.close()
