"""Bounds on what a connection may do before the app sees a request: uvicorn's httptools protocol with a
limit on the header section's size and header count (431), and a deadline for it (408, or a plain close for
a connection that never sent a byte).

uvicorn has no such settings for httptools, and arms its keep-alive timeout only after a first response, so
without this a connection that sends nothing, or its headers one byte at a time, or 50 MB of headers, is
held (and buffered) for as long as the client likes. Every listener of the gateway uses this protocol: it
never serves with uvicorn's h11 parser, which has no place for these limits (``gateway/serve.py``).

The header section is fed to the parser at most up to the limit: bytes past it are looked at only once the
parser has seen the headers end, so nothing above ``max_header_bytes`` (plus one read) is ever buffered.

Two savings per request on the way (each measured on a one-message publish through a real server):

* one timer per connection, not two per request: uvicorn arms a keep-alive timer after every response and
  cancels it at the next bytes, and the header deadline was armed and cancelled likewise. Here each response
  only moves the connection's deadlines forward; the one timer fires at most once per deadline's length, and
  re-arms itself for a deadline that moved on. The outcome is uvicorn's: a connection that sends no byte is
  closed silently at the earlier of the keep-alive timeout and the header timeout, one that began a request
  gets a 408 at the header timeout.
* one write per answer: what a request's cycle writes in one run of its task (the status line and headers,
  then the body of an answer that is whole) goes to the socket in one ``writelines``, not one send each
  (:class:`ResponseWriter`); a piece alone is written at the next turn of the event loop at the latest, so a
  streamed answer's headers are never held back.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import sys
import termios
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.api.declined_upgrade import DeclinedUpgrade

__all__ = [
    "CONNECTION_EXTENSION",
    "HeaderLimits",
    "ResponseWriter",
    "connection_extension",
    "guarded_protocol",
]

#: the ASGI scope extension the guarded protocol adds (a streamed answer uses it to notice a client that
#: stopped reading and to give its memory back):
#: ``abort()`` drops the connection at once, unsent data included;
#: ``unsent()`` the bytes written and not yet taken by the client (the transport's buffer plus the
#: kernel's send queue; on Linux, where the kernel tells it);
#: ``writable()`` waits until the transport's buffer has drained below its low-water mark;
#: ``body_buffered()`` is true once the server holds the request's whole body (or the client left): then the
#: app's ``receive`` answers without waiting
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


class ResponseWriter:
    """The transport as a request's cycle sees it (uvicorn's cycle uses ``write``, ``close`` and
    ``is_closing``): a write is held until the next write, which sends both in one ``writelines``, or until
    the next turn of the event loop; ``flush`` sends what is held now (before any other write on the
    transport), ``close`` sends it and closes. Held bytes are dropped when the transport is closing already
    (aborted, or the connection lost)."""

    __slots__ = ("_held", "_later", "_loop", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._held = b""
        self._later: asyncio.Handle | None = None

    def write(self, data: bytes) -> None:
        later = self._later
        if later is None:
            self._held = data
            self._later = self._loop.call_soon(self.flush)
            return
        later.cancel()
        self._later = None
        held, self._held = self._held, b""
        if not self.transport.is_closing():
            self.transport.writelines((held, data))

    def flush(self) -> None:
        later = self._later
        if later is None:
            return
        later.cancel()  # harmless when it is the call running now
        self._later = None
        held, self._held = self._held, b""
        if not self.transport.is_closing():
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


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

    # an Upgrade offer (h2c) is served as the HTTP/1.1 request it also is, body included (declined_upgrade.py)
    served: type[HttpToolsProtocol] = type(f"{base.__name__}DeclinedUpgrade", (DeclinedUpgrade, base), {})

    class GuardedHttpToolsProtocol(served):  # type: ignore[valid-type, misc]
        _limits = limits

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = False
            self._head_bytes = 0
            self._head_count = 0
            self._too_many = False
            self._head_deadline = 0.0  # loop time: a begun header section must have ended by then
            self._idle_deadline = 0.0  # loop time: a connection that sent no byte of it is closed then
            self._head_timer: asyncio.TimerHandle | None = None
            self._timer_at = 0.0
            self._fd = -1
            self._writer: ResponseWriter | None = None

        def _enter_head(self, keep_alive: float | None = None) -> None:
            """Wait for a request's header section: from now on (after a response: ``keep_alive``, the
            keep-alive timeout, bounds the wait for its first byte too)."""
            self._in_head = True
            self._head_bytes = 0
            self._head_count = 0
            now = self.loop.time()
            self._head_deadline = now + self._limits.timeout
            idle = self._head_deadline if keep_alive is None else now + min(keep_alive, self._limits.timeout)
            self._idle_deadline = idle
            if self._head_timer is None or self._timer_at > idle:
                self._arm(idle)

        def _arm(self, when: float) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._timer_at = when
            self._head_timer = self.loop.call_at(when, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._in_head or self.transport.is_closing():
                return  # the next wait for a header section arms the timer again
            deadline = self._head_deadline if self._head_bytes else self._idle_deadline
            if self.loop.time() < deadline:
                self._arm(deadline)  # a later request's deadline
                return
            self._flush()
            if self._head_bytes:
                self.transport.write(
                    _plain(b"408 Request Timeout", "the request headers did not arrive in time")
                )
            self.transport.close()

        def _refuse_head(self, message: str) -> None:
            self._cancel_head_timer()
            self._in_head = False
            self._flush()
            self.transport.write(_plain(b"431 Request Header Fields Too Large", message))
            self.transport.close()

        def _flush(self) -> None:
            """Send what the response writer holds, before the protocol writes on the transport itself."""
            if self._writer is not None:
                self._writer.flush()

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            self._fd = sock.fileno() if sock is not None else -1
            self._writer = ResponseWriter(self.transport, self.loop)
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
            self._flush()  # an answer held in the writer goes out before any the parser may write
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
            self._flush()
            if self._too_many:
                self._refuse_head(f"more than {self._limits.max_count} request headers")
                return
            super().send_400_response(msg)

        def on_headers_complete(self) -> None:
            self._in_head = False  # the timer, left armed, finds nothing to do when it fires
            extensions = self.scope.setdefault("extensions", {})
            extension = extensions[CONNECTION_EXTENSION] = {
                "abort": self.transport.abort,
                "unsent": self._unsent,
                "writable": self.flow.drain,
            }
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:
                cycle.transport = self._writer
                # A method of the protocol, not a closure over the cycle: the scope holds the extension,
                # and a closure would make each request's cycle and scope a reference cycle, garbage for
                # the collector (18 objects a request) rather than freed as the request ends.
                extension["body_buffered"] = self._body_buffered

        def _body_buffered(self) -> bool:
            """Whether the server holds the whole body of the request being read (or the client left). A
            later (pipelined) request's cycle may be the current one: its head came after the whole body
            of every earlier request, so the answer holds for those too."""
            cycle = self.cycle
            return cycle is not None and (not cycle.more_body or cycle.disconnected)

        def shutdown(self) -> None:
            self._flush()  # a graceful shutdown closes an idle connection: with its last answer sent
            super().shutdown()

        def on_response_complete(self) -> None:
            # uvicorn's, except that the wait for the next request is bounded by this protocol's one
            # timer (``_enter_head``) rather than a keep-alive timer armed here and cancelled at the next
            # bytes received.
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._unset_keepalive_if_required()
            self.flow.resume_reading()
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                self._enter_head(self.timeout_keep_alive)

    return GuardedHttpToolsProtocol
