"""Two gateways on real sockets for the tests of the publish and the poll answered below ASGI: one serving
with ``http.direct_publish`` and ``http.direct_poll`` on (the httptools protocol answers publishes and polls
itself), one with them off (every request through ASGI), each with a runtime of its own on one embedded
cluster; a raw HTTP/1.1 client, and answers made comparable byte for byte (but for Date, the request id and
what a broker assigns)."""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from gateway.api.app import create_app
from gateway.api.direct_poll import DirectPoll
from gateway.api.direct_publish import DirectPublish
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.runtime import Runtime
from gateway.serve import http_config
from tests.support.log_capture import attached
from tests.support.serving import bound_socket, uvicorn_serving


@dataclass
class Served:
    port: int
    runtime: Runtime
    app: FastAPI
    server: uvicorn.Server


@asynccontextmanager
async def serving(cluster: EmbeddedCluster, direct: bool, **settings: Any) -> AsyncIterator[Served]:
    """A gateway on a free loopback port over ``cluster``, publishing and polling below ASGI when
    ``direct``."""
    sock = bound_socket()
    http = {"direct_publish": direct, "direct_poll": direct, **settings.pop("http", {})}
    config = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        http_host="127.0.0.1",
        producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
        http=http,
        **settings,
    )
    runtime = Runtime(config)
    try:
        await runtime.start()
    except BaseException:
        sock.close()
        raise
    app = create_app(runtime=runtime)
    server = uvicorn.Server(http_config(config, app, log_level=None, lifespan="off"))
    try:
        async with uvicorn_serving(server, [sock]):
            yield Served(sock.getsockname()[1], runtime, app, server)
    finally:
        await runtime.stop()
        sock.close()


@asynccontextmanager
async def pair(cluster: EmbeddedCluster, **settings: Any) -> AsyncIterator[tuple[Served, Served]]:
    """The direct gateway and the ASGI one, alike but for ``http.direct_publish`` and ``http.direct_poll``."""
    async with serving(cluster, True, **settings) as direct, serving(cluster, False, **settings) as plain:
        yield direct, plain


def request(
    method: str, path: str, headers: dict[str, str], body: bytes = b"", version: str = "1.1"
) -> bytes:
    """A request's bytes; Content-Length is added for a body unless ``headers`` frame it themselves."""
    lines = [f"{method} {path} HTTP/{version}", "host: gw", *(f"{k}: {v}" for k, v in headers.items())]
    framed = any(k.lower() in ("content-length", "transfer-encoding") for k in headers)
    if (body or method == "POST") and not framed:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One whole answer (head and Content-Length body), as its bytes."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    match = re.search(rb"\r\ncontent-length: (\d+)\r\n", head, re.IGNORECASE)
    length = int(match[1]) if match else 0
    return head + await asyncio.wait_for(reader.readexactly(length), 30)


async def talk(
    port: int, requests: list[bytes], context: ssl.SSLContext | None = None, pipelined: bool = False
) -> list[bytes]:
    """Send ``requests`` on one connection (one after another's answer, or all at once when
    ``pipelined``); their answers' bytes."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost" if context else None
    )
    answers = []
    try:
        if pipelined:
            writer.write(b"".join(requests))
            await writer.drain()
            for _ in requests:
                answers.append(await read_answer(reader))
        else:
            for raw in requests:
                writer.write(raw)
                await writer.drain()
                answers.append(await read_answer(reader))
    finally:
        writer.close()
    return answers


_VOLATILE = re.compile(rb'"(offset|messageId|appendTime)": ?"?\d+"?')


def comparable(answer: bytes) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    """An answer's status line, headers (in order; Date, X-Request-ID, Content-Length and, on a quota's
    answer, the time left masked) and body (gunzipped; the request id and what a broker assigns masked). The
    Content-Length is checked here."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = []
    for line in lines:
        name, _, value = line.partition(b": ")
        headers.append((name, value))
    named = {n.lower(): v for n, v in headers}
    declared = named.get(b"content-length")
    assert declared is None or int(declared) == len(body), answer
    volatile = (b"date", b"x-request-id", b"content-length")
    quota = b"ratelimit" in named
    masked = [
        (n, b"<masked>" if n.lower() in volatile else _time_left(n.lower(), v) if quota else v)
        for n, v in headers
    ]
    if named.get(b"content-encoding") == b"gzip":
        body = gzip.decompress(body)
    body = _VOLATILE.sub(rb'"\1":0', body)
    body = re.sub(rb'("requestId": ?"|request id )[0-9a-f]+', rb"\1<id>", body)
    # the time left in a quota's bucket
    body = re.sub(rb'(retry in |"retryAfterSeconds": ?)[0-9.]+', rb"\1<n>", body)
    return status, masked, body


def _time_left(name: bytes, value: bytes) -> bytes:
    """A header value of a quota's answer with the seconds left in its bucket masked: two gateways' buckets
    come to the same request at moments apart."""
    if name == b"retry-after":
        return b"<n>"
    if name == b"ratelimit":
        return re.sub(rb";t=[0-9]+", b";t=<n>", value)
    return value


@contextmanager
def counting_direct(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths of the requests answered below ASGI (publishes and polls) while the block runs."""
    served: list[str] = []
    for way in (DirectPublish, DirectPoll):
        original = way.serve

        async def serve(self: Any, request: Any, *args: Any, __original: Any = original) -> None:
            served.append(request.scope["path"])
            await __original(self, request, *args)

        monkeypatch.setattr(way, "serve", serve)
    yield served


@contextmanager
def access_lines() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    with attached(Keep(logging.DEBUG), "gateway.access"):
        yield records


@contextmanager
def spans_exporter() -> Iterator[Any]:
    """The finished spans of the block (in memory); the test is skipped without the otel extra."""
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install '.[otel]')")
    from tests.support.tracing_support import in_memory_spans

    with in_memory_spans() as exporter:
        yield exporter


def span_view(exporter: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """The finished spans (name, status, attributes but broker-assigned ones), sorted; then cleared."""
    found = []
    for span in exporter.get_finished_spans():
        attributes = {
            k: v for k, v in (span.attributes or {}).items() if "offset" not in k and "partition" not in k
        }
        found.append((span.name, str(span.status.status_code), attributes))
    exporter.clear()
    return sorted(found, key=repr)


def line(record: logging.LogRecord) -> dict[str, Any]:
    keep = ("method", "path", "route", "status", "principal")
    return {"msg": record.getMessage(), "level": record.levelname} | {
        k: getattr(record, k) for k in keep if hasattr(record, k)
    }


def http_series(app: FastAPI) -> list[str]:
    """The HTTP request series (counts exactly; durations by name only)."""
    text = app.state.metrics.render().decode()
    found = []
    for row in text.splitlines():
        if row.startswith("tubemq_gateway_http_request") and not row.startswith("#"):
            name, _, value = row.rpartition(" ")
            found.append(f"{name} {value}" if "_count" in name or "_total" in name else name)
    return sorted(found)
