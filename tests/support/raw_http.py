"""HTTP/1.1 spoken by hand to a gateway served on loopback (uvicorn, real sockets): a gateway with given
``limits.*`` (``serving``), a request head written byte by byte (``open_request``) and its answer read back
(``answer``), for the tests of what the HTTP layer does with slow, partial or unusual requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.runtime import Runtime
from gateway.serve import http_config
from tests.support.serving import bound_socket, uvicorn_serving


@asynccontextmanager
async def serving(cluster: EmbeddedCluster, **limits: Any) -> AsyncIterator[tuple[int, Runtime]]:
    """A gateway on ``cluster`` with ``limits`` (``limits.*`` settings), served on a loopback port: the port
    and its runtime; stopped on exit."""
    sock = bound_socket()
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        http_host="127.0.0.1",
        producer={"heartbeat_interval": 0.5},
        limits=limits,
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = uvicorn.Server(
        http_config(settings, create_app(runtime=runtime), log_level=None, lifespan="off")
    )
    try:
        async with uvicorn_serving(server, [sock]):
            yield sock.getsockname()[1], runtime
    finally:
        await runtime.stop()
        sock.close()


async def open_request(
    port: int, method: str, path: str, headers: dict[str, str]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    return reader, writer


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Status, headers and JSON body of the response (the server closes or sends content-length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, json.loads(body) if body else {}
