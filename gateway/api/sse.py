"""The Server-Sent Events answer of the stream route, bounding what a client that stops reading costs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.api.http_guard import connection_extension

__all__ = ["EventStreamResponse"]

log = logging.getLogger("gateway.api")


class EventStreamResponse(StreamingResponse):
    """A streamed ``text/event-stream`` answer (documents the stream route's media type).

    With ``write_timeout``, a client that stops reading is cut off: a final ``cut`` event is offered for a
    moment, then the connection is dropped, unsent data included (``gateway/api/http_guard.py``), so the
    stream's memory is given back. A client stopped reading when

    * a write waits longer than ``write_timeout`` for it (the connection's buffers are full), or
    * the next step waits that long for the connection to take the previous one: a stream fetches and renders
      its next messages only once the connection's buffer has drained, so a client that does not read holds
      at most one step's event in the gateway, or
    * bytes written to it have sat in the connection's send queue for ``write_timeout`` seconds without the
      client taking any (a stream with nothing more to send: a consumer without autoCommit whose window of
      uncommitted messages is full writes nothing that could block). Data the client's own receive buffer
      took counts as taken.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        content: Any,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        *,
        write_timeout: float | None = None,
    ) -> None:
        super().__init__(content, status_code, headers)
        self.write_timeout = write_timeout
        self._abort: Callable[[], None] | None = None
        self._unsent: Callable[[], int] | None = None
        self._writable: Callable[[], Awaitable[None]] | None = None
        self._written = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extension = connection_extension(scope) or {}
        self._abort = extension.get("abort")
        self._unsent = extension.get("unsent")
        self._writable = extension.get("writable")
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        if self.write_timeout is None:
            await super().stream_response(send)
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        iterator = self.body_iterator
        watchdog: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(None) as stalled:
                if self._unsent is not None:
                    watchdog = asyncio.create_task(self._watch(self._unsent, self.write_timeout, stalled))
                try:
                    async for chunk in iterator:
                        body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                        async with asyncio.timeout(self.write_timeout):
                            await send({"type": "http.response.body", "body": body, "more_body": True})
                            self._written += len(body)
                            del body, chunk  # the transport holds what is unsent
                            if self._writable is not None:
                                # Fetch and render the next step only once the client took this one.
                                await self._writable()
                finally:
                    if watchdog is not None:
                        watchdog.cancel()
        except TimeoutError:
            await self._cut_off(send)
            return
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, unsent: Callable[[], int], limit: float, stalled: asyncio.Timeout) -> None:
        """Expire ``stalled`` once written bytes have waited ``limit`` seconds with none of them taken."""
        loop = asyncio.get_running_loop()
        interval = min(1.0, limit / 4)
        best = 0
        since = loop.time()
        while True:
            await asyncio.sleep(interval)
            left = unsent()
            taken = self._written - left  # grows whenever the client takes bytes (framing aside)
            now = loop.time()
            if left <= 0 or taken > best:
                best = max(best, taken)
                since = now
            elif now - since >= limit:
                stalled.reschedule(now)
                return

    async def _cut_off(self, send: Send) -> None:
        log.warning(
            "SSE client does not read: stream cut off",
            extra={"write_timeout": self.write_timeout},
        )
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(min(1.0, self.write_timeout or 1.0)):
                await send({"type": "http.response.body", "body": _CUT_EVENT, "more_body": False})
                # Offered, not delivered: the connection is dropped unless the client takes it all now.
                while self._unsent is not None and self._unsent() > 0:  # noqa: ASYNC110 (polls the kernel)
                    await asyncio.sleep(0.05)
                return
        if self._abort is not None:
            self._abort()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


_CUT_EVENT = (
    b'event: cut\ndata: {"error": {"code": "slow_reader", "message": "the stream was cut off because the '
    b'client did not read it; reconnect with Last-Event-ID and read continuously"}}\n\n'
)
