"""gzip of large JSON answers: poll batches and topic listings over a real uvicorn server on the embedded
cluster, never SSE or any streamed answer, only for clients that accept gzip, above the minimum size."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import MutableHeaders
from starlette.types import Message, Receive, Scope, Send

from gateway.api.compression import GzipMiddleware, _is_json, accepts_gzip, compress, compressible
from gateway.config import CompressionSettings
from tests.support.gateway_support import Gateway, SseReader

GZIP = {"accept-encoding": "gzip"}
IDENTITY = {"accept-encoding": "identity"}


async def get_raw_bytes(
    gw: Gateway, path: str, headers: dict[str, str], **params: Any
) -> tuple[httpx.Response, bytes]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as client:
        request = client.build_request("GET", path, headers=headers, params=params)
        response = await client.send(request, stream=True)
        try:
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        return response, raw


async def test_large_poll_answer_is_gzipped_only_when_accepted(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        values = [f"value-{i:04d}-" + "x" * 40 for i in range(200)]
        answer = await http.post(
            "/v1/topics/solo/messages", json={"messages": [{"value": v} for v in values]}
        )
        assert answer.status_code == 200
        created = await http.post("/v1/consumers/gz", json={"topics": ["solo"], "startPosition": "earliest"})
        base = created.json()["baseUrl"].removeprefix(gw.url)
    params = {"format": "utf8", "timeout_ms": 3000, "max_messages": 200}
    response, raw = await get_raw_bytes(gw, f"{base}/messages", GZIP, **params)
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in response.headers["vary"].lower()
    assert int(response.headers["content-length"]) == len(raw)
    body = json.loads(gzip.decompress(raw))
    assert [m["value"] for m in body["messages"]] == values
    assert len(raw) * 5 < len(gzip.decompress(raw))  # repetitive JSON shrinks a lot
    # the same answer again (rolled back) for a client that does not accept gzip: plain, with Vary
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        await http.post(f"{base}/commits", json={"consumed": False})
    plain, raw_plain = await get_raw_bytes(gw, f"{base}/messages", IDENTITY, **params)
    assert "content-encoding" not in plain.headers
    assert "accept-encoding" in plain.headers["vary"].lower()
    assert [m["value"] for m in json.loads(raw_plain)["messages"]] == values


async def test_topic_listing_and_minimum_size(gw: Gateway) -> None:
    listing, raw = await get_raw_bytes(gw, "/v1/topics/demo", GZIP)
    size = len(gzip.decompress(raw)) if listing.headers.get("content-encoding") == "gzip" else len(raw)
    gw.runtime.settings.compression.min_bytes = size  # exactly the minimum: compressed
    listing, raw = await get_raw_bytes(gw, "/v1/topics/demo", GZIP)
    assert listing.headers["content-encoding"] == "gzip"
    assert len(json.loads(gzip.decompress(raw))["partitions"]) == 8
    gw.runtime.settings.compression.min_bytes = size + 1  # one byte short: as it is, no Vary either
    small, raw = await get_raw_bytes(gw, "/v1/topics/demo", GZIP)
    assert "content-encoding" not in small.headers and "vary" not in small.headers
    assert len(json.loads(raw)["partitions"]) == 8
    gw.runtime.settings.compression.min_bytes = 0
    gw.runtime.settings.compression.enabled = False
    off, raw = await get_raw_bytes(gw, "/v1/topics/demo", GZIP)
    assert "content-encoding" not in off.headers


async def test_sse_is_never_compressed(gw: Gateway) -> None:
    gw.runtime.settings.compression.min_bytes = 0
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        await http.post("/v1/topics/solo/messages", json={"messages": [{"value": "e" * 2000}]})
        created = await http.post(
            "/v1/consumers/gz-sse", json={"topics": ["solo"], "startPosition": "earliest"}
        )
        stream_url = created.json()["baseUrl"] + "/stream"
        async with http.stream("GET", stream_url, headers=GZIP, params={"format": "utf8"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert "content-encoding" not in response.headers
            (event,) = await SseReader(response).read(1)
            assert json.loads(event.data)["value"] == "e" * 2000


async def test_streamed_answers_pass_through_chunk_by_chunk() -> None:
    """A JSON answer sent in pieces is forwarded piece by piece, untouched, before the next is produced."""
    seen: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"[" + b"1," * 5000, "more_body": True})
        assert [m["type"] for m in seen] == ["http.response.start", "http.response.body"]
        await send({"type": "http.response.body", "body": b"1]", "more_body": False})

    async def send(message: Message) -> None:
        seen.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    middleware = GzipMiddleware(app, settings=lambda: CompressionSettings(min_bytes=0))
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"accept-encoding", b"gzip")]}
    await middleware(scope, receive, send)
    assert len(seen) == 3
    assert all(b"content-encoding" not in dict(m.get("headers", [])) for m in seen)
    assert b"".join(m.get("body", b"") for m in seen[1:]) == b"[" + b"1," * 5000 + b"1]"


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip", True),
        ("GZIP", True),
        ("deflate, gzip;q=0.5", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("*", True),
        ("*;q=0", False),
        ("*, gzip;q=0", False),
        ("identity", False),
        ("x-gzip", True),
        ("br, deflate", False),
        ("gzip;q=nonsense", False),
        ("", False),
    ],
)
def test_accept_encoding(header: str, accepted: bool) -> None:
    assert accepts_gzip([header.encode()]) is accepted


_NAMES = st.sampled_from([b"content-type", b"content-encoding", b"content-length", b"vary", b"x-request-id"])
_VALUES = st.sampled_from(
    [b"application/json", b"application/problem+json; charset=utf-8", b"text/plain", b"gzip", b"", b"12"]
)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=6))
def test_which_answers_may_be_compressed_is_read_from_the_raw_headers_as_starlette_reads_them(
    headers: list[tuple[bytes, bytes]],
) -> None:
    view = MutableHeaders(raw=list(headers))
    expected = "content-encoding" not in view and _is_json(view.get("content-type", ""))
    assert compressible(headers) is expected


@given(body=st.binary(max_size=4096), level=st.integers(1, 9))
def test_every_level_writes_gzip_that_reads_back_as_the_body(body: bytes, level: int) -> None:
    compressed = compress(body, level)
    assert compressed[:3] == b"\x1f\x8b\x08"  # gzip, deflate
    assert compressed[4:8] == b"\0\0\0\0"  # no time stamp: one body always gives the same answer
    assert gzip.decompress(compressed) == body


@given(body=st.binary(min_size=1, max_size=2048), level=st.integers(2, 9))
def test_levels_above_one_are_zlibs(body: bytes, level: int) -> None:
    assert compress(body, level) == gzip.compress(body, level, mtime=0)


def test_level_one_is_isal_and_a_poll_answer_shrinks() -> None:
    # ISA-L, not zlib: its level 1 writes other bytes than zlib's for the same body
    answer = b'{"messages":[' + b",".join(b'{"value":"%d eHh4eHh4eHh4"}' % i for i in range(2000)) + b"]}"
    compressed = compress(answer, 1)
    assert compressed != gzip.compress(answer, 1, mtime=0)
    assert gzip.decompress(compressed) == answer
    assert len(compressed) < len(answer) // 4
