"""gzip for large, complete JSON answers (poll batches, topic listings, range reads), as pure ASGI.

An answer is compressed when all of these hold:

* the request's ``Accept-Encoding`` accepts ``gzip`` (``gzip`` or ``*`` with a q-value above 0);
* the answer is JSON (``application/json``, ``application/problem+json``, ...), has no ``Content-Encoding``
  of its own and is at least ``compression.min_bytes`` long;
* the app hands its body over in **one** piece (``more_body`` false on the first body message), as every
  buffered answer does. A streamed answer (Server-Sent Events, a relayed stream) is passed through exactly
  as it is sent, chunk by chunk, never held back to be compressed: a client reading events as they happen
  must get each one at once.

Compressed answers get ``Content-Encoding: gzip``, the new ``Content-Length`` and ``Vary: Accept-Encoding``;
an answer that would have been compressed for another client gets the ``Vary`` alone, so caches keep the
two apart. A body above :data:`THREAD_ABOVE` bytes is compressed in a worker thread (the compressors release
the GIL), so a 4 MiB poll answer does not stall the event loop for other requests.

The compressor: at ``compression.level`` 1 (the default, "fastest") ISA-L's level 1 (``isal``, Intel's
SIMD deflate), at any other level zlib's (``gzip``) at that level. Both write standard gzip. On a
1,000-message poll answer (1 KiB values, base64) ISA-L took 2.5 us per message against zlib's 31 for random
values (the answer 0.72 of its size against zlib's 0.65), and 0.08 against 1.9 us for repetitive ones
(with zlib, compressing was the largest single cost of a gzip-accepting long poll).
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable, Iterable
from typing import Any

from isal import igzip
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["THREAD_ABOVE", "GzipMiddleware", "accepts_gzip", "compress", "compressible", "gzip_answer"]

#: bodies larger than this are compressed off the event loop
THREAD_ABOVE = 64 * 1024


def accepts_gzip(values: Iterable[bytes]) -> bool:
    """Whether ``Accept-Encoding`` header values accept gzip (RFC 9110 12.5.3: ``gzip;q=0`` refuses it, a
    ``*`` accepts it unless gzip is named; ``x-gzip`` counts as gzip)."""
    gzip_q: float | None = None
    star_q: float | None = None
    for value in values:
        for item in value.decode("latin-1").split(","):
            coding, _, params = item.partition(";")
            coding = coding.strip().lower()
            q = 1.0
            for param in params.split(";"):
                name, _, number = param.partition("=")
                if name.strip().lower() == "q":
                    try:
                        q = float(number.strip())
                    except ValueError:
                        q = 0.0
            if coding in ("gzip", "x-gzip"):
                gzip_q = q if gzip_q is None else max(gzip_q, q)
            elif coding == "*":
                star_q = q
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def compressible(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether an answer with these (ASGI: lower-case) headers may be compressed: JSON by its first
    Content-Type, and no Content-Encoding. Read from the raw pairs: building Starlette's header view for
    every answer cost more than the rest of this middleware on a small one."""
    content_type: bytes | None = None
    for name, value in headers:
        if name == b"content-encoding":
            return False
        if name == b"content-type" and content_type is None:
            content_type = value
    return content_type is not None and _is_json(content_type.decode("latin-1"))


class GzipMiddleware:
    """See the module docstring. ``settings`` is read per request (``enabled``, ``min_bytes``, ``level``)."""

    def __init__(self, app: ASGIApp, settings: Callable[[], Any]) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = self.settings()
        if not settings.enabled:
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        passing = False

        async def wrapped(message: Message) -> None:
            nonlocal start, passing
            if passing:
                await send(message)
                return
            if message["type"] == "http.response.start":
                if not compressible(message.get("headers", ())):
                    passing = True
                    await send(message)
                    return
                start = message  # held until the first body message says whether the answer is whole
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            head, start = start, None
            passing = True
            body: bytes = message.get("body", b"")
            if message.get("more_body", False):
                await send(head)  # streamed: as it is
                await send(message)
                return
            whole = (head["headers"], body)
            if len(body) > THREAD_ABOVE:
                headers, compressed = await asyncio.to_thread(gzip_answer, settings, scope, *whole)
            else:
                headers, compressed = gzip_answer(settings, scope, *whole)
            if compressed is not body:
                message = {**message, "body": compressed}
            await send(head if headers is head["headers"] else {**head, "headers": headers})
            await send(message)

        await self.app(scope, receive, wrapped)


def compress(body: bytes, level: int) -> bytes:
    """``body`` as gzip at ``level`` (1-9): ISA-L at 1, zlib at any other (module docstring)."""
    if level == 1:
        return igzip.compress(body, 1, mtime=0)
    return gzip.compress(body, level, mtime=0)


def gzip_answer(
    settings: Any, scope: Scope, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A whole (not streamed) answer whose headers are :func:`compressible`, as it goes to the client:
    compressed when it is large enough and the request accepts gzip, with ``Vary`` when it is large
    enough; ``headers`` itself is not changed. The step the publish answered below ASGI takes too
    (``gateway/api/direct_publish.py``)."""
    if len(body) < settings.min_bytes:
        return headers, body  # small: as it is
    found = MutableHeaders(raw=list(headers))
    found.add_vary_header("Accept-Encoding")
    # Read only here: most answers (a publish's) are small and never need it.
    if accepts_gzip(v for k, v in scope["headers"] if k == b"accept-encoding"):
        body = compress(body, settings.level)
        found["Content-Encoding"] = "gzip"
        found["Content-Length"] = str(len(body))
    return found.raw, body
