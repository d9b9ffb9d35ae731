"""The Server-Sent Events answer of the stream route, bounding what a client that stops reading costs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.api.http_guard import connection_abort

__all__ = ["EventStreamResponse"]

log = logging.getLogger("gateway.api")


class EventStreamResponse(StreamingResponse):
    """A streamed ``text/event-stream`` answer (documents the stream route's media type).

    With ``write_timeout``, a write that waits longer for the client (it stopped reading: the send buffer
    is full) cuts the stream off: a final ``cut`` event is offered for a moment, then the connection is
    dropped, unsent data included (``gateway/api/http_guard.py``), so the stream's memory is given back."""

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._abort = connection_abort(scope)
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        if self.write_timeout is None:
            await super().stream_response(send)
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        iterator = self.body_iterator
        try:
            async for chunk in iterator:
                body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                try:
                    async with asyncio.timeout(self.write_timeout):
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                except TimeoutError:
                    await self._cut_off(send)
                    return
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _cut_off(self, send: Send) -> None:
        log.warning(
            "SSE client does not read: stream cut off",
            extra={"write_timeout": self.write_timeout},
        )
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(min(1.0, self.write_timeout or 1.0)):
                await send({"type": "http.response.body", "body": _CUT_EVENT, "more_body": False})
                return
        if self._abort is not None:
            self._abort()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


_CUT_EVENT = (
    b'event: cut\ndata: {"error": {"code": "slow_reader", "message": "the stream was cut off because the '
    b'client did not read it; reconnect with Last-Event-ID and read continuously"}}\n\n'
)
