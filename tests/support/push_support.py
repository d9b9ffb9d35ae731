"""A real receiving HTTP server for the push subscription tests: asyncio on a loopback port, HTTP/1.1 with
keep-alive, answering each request as the test's ``answer`` says (a status, after a delay) and recording
every request it read; and who holds a subscription group's partitions, as the gateways' logs tell."""

from __future__ import annotations

import asyncio
import json
import math
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
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


def push_env(tmp: Path, endpoint: str, **changes: Any) -> dict[str, str]:
    """The environment of a ``serve`` running :func:`push_definition` (with ``changes``) from a subscriptions
    file written in ``tmp``, its endpoint allowed, polling and retrying every 0.2 s."""
    path = tmp / "subscriptions.json"
    document = {"subscriptions": [push_definition(endpoint, **changes)]}
    path.write_text(json.dumps(document), encoding="utf-8")
    return {
        "TUBEMQ_GATEWAY_PUSH__SUBSCRIPTIONS_FILE": str(path),
        "TUBEMQ_GATEWAY_PUSH__ALLOW": "127.0.0.1",
        "TUBEMQ_GATEWAY_PUSH__POLL_WAIT": "0.2",
        "TUBEMQ_GATEWAY_PUSH__ERROR_BACKOFF": "0.2",
    }


def holdings(
    records: Iterable[Mapping[str, Any]], group: str, until: float = math.inf
) -> dict[str, set[str]]:
    """What each member of ``group`` holds (client id -> partition keys) as a gateway's JSON log records tell
    it (``PartitionRegistered`` less ``PartitionReleased``), up to the time ``until`` (epoch seconds)."""
    held: dict[str, set[str]] = {}
    for record in sorted(records, key=lambda r: str(r["ts"])):
        if record.get("group") != group or _epoch(record) > until:
            continue
        if record.get("msg") == "PartitionRegistered":
            held.setdefault(record["client_id"], set()).add(record["partition_key"])
        elif record.get("msg") == "PartitionReleased":
            held.get(record["client_id"], set()).discard(record["partition_key"])
    return {member: keys for member, keys in held.items() if keys}


def held_all_at(records: list[Mapping[str, Any]], group: str, partitions: int, after: float) -> float | None:
    """The first time (epoch seconds) past ``after`` at which the members in ``records`` held ``partitions``
    partitions of ``group`` between them; None: not (yet)."""
    changes = [r for r in records if r.get("group") == group and r.get("msg") in _PARTITION_EVENTS]
    moments = sorted({_epoch(r) for r in changes if _epoch(r) >= after})
    for moment in moments:
        if sum(len(keys) for keys in holdings(changes, group, moment).values()) >= partitions:
            return moment
    return None


_PARTITION_EVENTS = ("PartitionRegistered", "PartitionReleased")


def _epoch(record: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(record["ts"])).timestamp()
