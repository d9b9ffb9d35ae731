"""Bounds on what a connection may do before the app sees a request: uvicorn's httptools protocol with a
limit on the header section's size and header count (431), and a deadline for it (408, or a plain close for
a connection that never sent a byte).

uvicorn has no such settings for httptools, and arms its keep-alive timeout only after a first response, so
without this a connection that sends nothing, or its headers one byte at a time, or 50 MB of headers, is
held (and buffered) for as long as the client likes. Every listener of the gateway uses this protocol: it
never serves with uvicorn's h11 parser, which has no place for these limits (``gateway/serve.py``).

The header section is fed to the parser at most up to the limit: bytes past it are looked at only once the
parser has seen the headers end, so nothing above ``max_header_bytes`` (plus one read) is ever buffered.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import sys
import termios
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CONNECTION_EXTENSION", "HeaderLimits", "connection_extension", "guarded_protocol"]

#: the ASGI scope extension the guarded protocol adds (a streamed answer uses it to notice a client that
#: stopped reading and to give its memory back):
#: ``abort()`` drops the connection at once, unsent data included;
#: ``unsent()`` the bytes written and not yet taken by the client (the transport's buffer plus the
#: kernel's send queue; on Linux, where the kernel tells it);
#: ``writable()`` waits until the transport's buffer has drained below its low-water mark
CONNECTION_EXTENSION = "gateway.connection"

#: the ioctl giving a socket's send queue (SIOCOUTQ, the same number as TIOCOUTQ), Linux only
_SEND_QUEUE = termios.TIOCOUTQ if sys.platform.startswith("linux") else None


def connection_extension(scope: Any) -> dict[str, Any] | None:
    """The scope's connection extension, or None (another server, a test transport)."""
    extension: dict[str, Any] | None = (scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
    return extension


def kernel_send_queue(fd: int) -> int:
    """Bytes in the socket's kernel send queue, unsent or unacknowledged (0 where the kernel does not say)."""
    if _SEND_QUEUE is None:
        return 0
    try:
        answer = fcntl.ioctl(fd, _SEND_QUEUE, b"\0\0\0\0")
    except OSError:
        return 0
    return max(0, int.from_bytes(answer, sys.byteorder, signed=True))


class HeaderLimits:
    """``max_bytes`` of header section (request line included), ``max_count`` headers, ``timeout`` seconds
    from the connection (or the previous response) to the end of the headers."""

    __slots__ = ("max_bytes", "max_count", "timeout")

    def __init__(self, max_bytes: int, max_count: int, timeout: float) -> None:
        self.max_bytes = max_bytes
        self.max_count = max_count
        self.timeout = timeout


def _plain(status: bytes, message: str) -> bytes:
    body = json.dumps({"error": {"code": "bad_request_head", "message": message}}).encode()
    return b"".join(
        (
            b"HTTP/1.1 ",
            status,
            b"\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ",
            str(len(body)).encode(),
            b"\r\n\r\n",
            body,
        )
    )


def guarded_protocol(base: type[HttpToolsProtocol], limits: HeaderLimits) -> type[asyncio.Protocol]:
    """A subclass of ``base`` (uvicorn's httptools protocol or one derived from it) enforcing ``limits``."""

    class GuardedHttpToolsProtocol(base):  # type: ignore[valid-type, misc]
        _limits = limits

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = False
            self._head_bytes = 0
            self._head_count = 0
            self._too_many = False
            self._head_timer: asyncio.TimerHandle | None = None
            self._fd = -1

        def _enter_head(self) -> None:
            self._in_head = True
            self._head_bytes = 0
            self._head_count = 0
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(self._limits.timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._in_head or self.transport.is_closing():
                return
            if self._head_bytes:
                self.transport.write(
                    _plain(b"408 Request Timeout", "the request headers did not arrive in time")
                )
            self.transport.close()

        def _refuse_head(self, message: str) -> None:
            self._cancel_head_timer()
            self._in_head = False
            self.transport.write(_plain(b"431 Request Header Fields Too Large", message))
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            self._fd = sock.fileno() if sock is not None else -1
            self._enter_head()

        def _unsent(self) -> int:
            if self.transport.is_closing():
                return 0
            queued = kernel_send_queue(self._fd) if self._fd >= 0 else 0
            return int(self.transport.get_write_buffer_size()) + queued

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            if not self._in_head:
                super().data_received(data)
                return
            allowance = self._limits.max_bytes - self._head_bytes
            if len(data) <= allowance:
                self._head_bytes += len(data)
                super().data_received(data)
                return
            # Feed what the limit allows; the rest only if the headers ended within it.
            self._head_bytes += allowance
            super().data_received(data[:allowance])
            if self.transport.is_closing():
                return
            if self._in_head:
                self._refuse_head(f"request headers above {self._limits.max_bytes} bytes")
                return
            self.data_received(data[allowance:])

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_count += 1
            if self._head_count > self._limits.max_count:
                self._too_many = True
                raise ValueError("too many headers")  # the parser stops; send_400_response answers
            super().on_header(name, value)

        def send_400_response(self, msg: str) -> None:
            if self._too_many:
                self._refuse_head(f"more than {self._limits.max_count} request headers")
                return
            super().send_400_response(msg)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._cancel_head_timer()
            extensions = self.scope.setdefault("extensions", {})
            extensions[CONNECTION_EXTENSION] = {
                "abort": self.transport.abort,
                "unsent": self._unsent,
                "writable": self.flow.drain,
            }
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                self._enter_head()

    return GuardedHttpToolsProtocol
