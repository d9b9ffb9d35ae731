"""A real receiving HTTP server for the push subscription tests: asyncio on a loopback port, HTTP/1.1 with
keep-alive, answering each request as the test's ``answer`` says (a status, after a delay) and recording
every request it read."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    at: float  # time.monotonic() when the request was read


@dataclass(frozen=True)
class Answer:
    status: int = 200
    delay: float = 0.0


Answerer = Callable[[Received], Answer | Awaitable[Answer]]


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    answered: list[Received] = field(default_factory=list)  # requests answered with a 2xx

    def attempts_of(self, header: str, value: str) -> list[Received]:
        return [r for r in self.requests if r.headers.get(header) == value]


async def _read(reader: asyncio.StreamReader) -> Received | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, path, headers, body, time.monotonic())


@asynccontextmanager
async def receiver(
    answer: Answerer = lambda r: Answer(), *, tls: ssl.SSLContext | None = None, answer_bytes: int = 2
) -> AsyncIterator[Receiver]:
    """Serve on 127.0.0.1 (over TLS with ``tls``) until the block ends; each answer's body is
    ``answer_bytes`` long."""
    served: Receiver
    connections: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            while (request := await _read(reader)) is not None:
                served.requests.append(request)
                chosen = answer(request)
                reply = chosen if isinstance(chosen, Answer) else await chosen
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                if 200 <= reply.status < 300:
                    served.answered.append(request)
                head = f"HTTP/1.1 {reply.status} X\r\ncontent-length: {answer_bytes}\r\n\r\n"
                writer.write(head.encode() + b"k" * answer_bytes)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            connections.discard(task)
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    served = Receiver(f"{'https' if tls else 'http'}://127.0.0.1:{port}/hook")
    try:
        yield served
    finally:
        server.close()
        for task in list(connections):
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        await server.wait_closed()


def push_definition(endpoint: str, **changes: Any) -> dict[str, Any]:
    """A subscription of group ``push-api`` on ``demo`` (retried through ``retry``) from the earliest message,
    with short backoffs and deadline, values as text; ``changes`` override or add fields."""
    return {
        "name": "hooks",
        "group": "push-api",
        "topics": ["demo"],
        "endpoint": endpoint,
        "startPosition": "earliest",
        "retryTopic": "retry",
        "valueFormat": "utf8",
        "minBackoffMs": 100,
        "maxBackoffMs": 500,
        "ackDeadlineMs": 2000,
        **changes,
    }
