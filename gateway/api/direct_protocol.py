"""The httptools protocol answering the usual publish and the usual poll itself, below ASGI.

For every request uvicorn builds an ASGI scope (copying the app state), a ``RequestResponseCycle`` with its
event, ASGI messages for the body and the answer, and runs them through each middleware's send and receive
wrappers. For the two requests the gateway serves most, ``POST /v1/topics/{topic}/messages`` with a
``Content-Length`` body (one message or a batch) and ``GET /v1/consumers/{group}/instances/{id}/messages``
without a body, :func:`direct_protocol`'s subclass builds none of that: at the end of the header section it
starts one task that takes the request's way as plain calls
(:class:`gateway.api.direct_publish.DirectPublish`, :class:`gateway.api.direct_poll.DirectPoll`, both
around :class:`gateway.api.direct_steps.DirectSteps`), and writes the answer's bytes itself, as uvicorn
would (its status line, its default headers, ``connection: close`` when the connection ends).

Every other request goes the ASGI way unchanged, and so does a publish or a poll the direct way would not
serve identically: an app without its usual middleware stack (or with FastAPI's native telemetry, or a root
path; ``gateway/api/direct_ways.py``; a worker's private listener serves its app's ways, with the scope
that listener gives, ``gateway/api/worker_listener.py``), a way whose setting is off (``http.direct_publish``,
``http.direct_poll``), ``Expect: 100-continue``, an Upgrade offer, a percent-encoded path, uvicorn's
``limit_concurrency``, a request pipelined behind another request still in progress on the connection
(queued by uvicorn, answered in order); for a publish a chunked body or one above
``limits.max_request_bytes`` (answered 413 there); for a poll any body, or a query
:func:`gateway.api.direct_poll.parse_poll_query` leaves to the route (bad or unusual parameters).

The HTTP semantics are uvicorn's: the direct request stands as the connection's current cycle (a
:class:`DirectExchange` has the attributes uvicorn's parser callbacks, flow control and graceful shutdown
use), so its body is buffered and read with flow control as a cycle's is, a request pipelined behind it
waits in uvicorn's queue and starts when it is answered, a graceful shutdown lets it finish and then closes
the connection, and the task is one of the server's (waited for, or cancelled, at shutdown). A client that
goes away while its poll waits ends the poll (499), as the ASGI way's watcher does
(``gateway/api/client_gone.py``): the exchange's :meth:`~DirectExchange.lost` future, which uvicorn's
``connection_lost`` resolves through the cycle's ``message_event``. (A poll with a request pipelined behind
it learns of the loss only when it ends, as on the ASGI way: uvicorn stops reading the connection while a
request waits in its queue.) Keep-alive and the header timeouts
are the guarded protocol's (``gateway/api/http_guard.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Coroutine
from typing import Any

import httptools
from starlette.types import Message, Scope
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
)

from gateway.api.direct_poll import POLL_PATTERN, parse_poll_query
from gateway.api.direct_ways import direct_ways_of
from gateway.api.gateway_app import PUBLISH_PATTERN
from gateway.api.worker_listener import PrivateApp

__all__ = ["DirectExchange", "direct_protocol"]

_CLOSE = re.compile(rb"(?:^|,)\s*close\s*(?:,|$)", re.IGNORECASE)
_DISCONNECT: Message = {"type": "http.disconnect"}


class DirectExchange:
    """One request answered directly: the connection's current cycle as uvicorn's code sees it (``body``,
    ``more_body``, ``disconnected``, ``response_complete``, ``keep_alive``, ``message_event.set()``) and the
    request as :class:`~gateway.api.direct_steps.DirectRequest` gives it to the steps."""

    __slots__ = (
        "_lost",
        "_protocol",
        "_waiter",
        "body",
        "client_gone",
        "disconnected",
        "keep_alive",
        "message_event",
        "more_body",
        "response_complete",
        "response_started",
        "scope",
    )

    def __init__(self, protocol: Any, scope: Scope, keep_alive: bool) -> None:
        self._protocol = protocol
        self._waiter: Any = None
        self._lost: asyncio.Future[None] | None = None
        self.scope = scope
        self.body = bytearray()
        self.more_body = True
        self.disconnected = False
        self.client_gone = False
        self.response_started = False
        self.response_complete = False
        self.keep_alive = keep_alive
        self.message_event = self  # uvicorn calls ``cycle.message_event.set()`` on body, end and loss

    def set(self) -> None:
        """Body came, the request ended or the connection was lost: wake a waiting ``receive`` (and, when
        lost, resolve :meth:`lost`)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        lost = self._lost
        if self.disconnected and lost is not None and not lost.done():
            self.client_gone = True
            lost.set_result(None)

    def lost(self) -> asyncio.Future[None]:
        """A future resolved when the connection is lost before the answer was written."""
        if self._lost is None:
            self._lost = self._protocol.loop.create_future()
            if self.disconnected:
                self.client_gone = True
                self._lost.set_result(None)
        return self._lost

    def body_buffered(self) -> bool:
        """Whether the whole body is here (or the client left): ``receive`` answers without waiting."""
        return not self.more_body or self.disconnected

    async def receive(self) -> Message:
        """The body as uvicorn's cycle gives it (``http.request`` messages, ``http.disconnect`` when the
        client left), reading on from the connection (flow control) while the app waits for it."""
        if not self.disconnected and self.more_body and not self.body:
            protocol = self._protocol
            protocol.flow.resume_reading()
            self._waiter = protocol.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.disconnected:
            self.client_gone = True
            return _DISCONNECT
        message: Message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        if self.more_body:
            self._protocol.flow.resume_reading()
        return message

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Write the answer as uvicorn's cycle would (status line, default headers, ``connection: close``
        when the connection ends after it), then let the connection go on to its next request."""
        protocol = self._protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            return
        self.response_started = True
        pairs = [*protocol.server_state.default_headers, *headers]
        # uvicorn's check of each name and value, in one search each: its patterns are classes of single
        # bytes, so a byte they refuse is in the joined names (values) exactly when it is in one of them.
        if HEADER_RE.search(b"".join([name for name, _ in pairs])) or HEADER_VALUE_RE.search(
            b"".join([value for _, value in pairs])
        ):
            raise RuntimeError("Invalid HTTP header name or value.")
        content = [STATUS_LINE[status]]
        closing = False
        for name, value in pairs:
            name = name.lower()
            if name == b"connection" and _CLOSE.search(value) is not None:
                self.keep_alive = False
                closing = True
            content.extend((name, b": ", value, b"\r\n"))
        if not self.keep_alive and not closing:
            content.append(b"connection: close\r\n")
        content.append(b"\r\n")
        content.append(body)
        protocol._flush()  # anything the response writer still holds goes first
        transport = protocol.transport
        transport.write(b"".join(content))
        self.response_complete = True
        if not self.keep_alive:
            transport.close()
        protocol.on_response_complete()

    async def fail(self) -> None:
        """uvicorn's answer to an app that failed before answering (500, plain text, closing)."""
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"21"),
            (b"connection", b"close"),
        ]
        await self.respond(500, headers, b"Internal Server Error")

    def release(self) -> None:
        """The request is done: no reference back to the connection, nor to the scope (which refers back to
        this exchange), is kept: nothing for the garbage collector."""
        self._protocol = None
        self._lost = None
        self.scope = {}


def direct_protocol(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A subclass of ``base`` (the guarded protocol, ``gateway/api/http_guard.py``) answering publishes and
    polls directly (see the module docstring)."""

    class DirectProtocol(base):  # type: ignore[valid-type, misc]
        def on_message_begin(self) -> None:
            # The scope is built at the end of the header section, for a request that goes the ASGI way.
            self.url = b""
            self.expect_100_continue = False
            self.headers: list[tuple[bytes, bytes]] = []
            self.scope = None

        def _asgi_scope(self) -> None:
            """uvicorn's scope for the request whose head was just read (built at its beginning there)."""
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            super().on_message_begin()
            self.url, self.headers, self.expect_100_continue = url, headers, expect
            self.scope["headers"] = headers  # type: ignore[index]

        def on_headers_complete(self) -> None:
            if not self._direct():
                self._asgi_scope()
                super().on_headers_complete()

        def _direct(self) -> bool:
            """Start answering the request directly, if it is a publish or a poll this protocol serves
            identically."""
            parser = self.parser
            method = parser.get_method()
            if method != b"POST" and method != b"GET":
                return False
            if self.expect_100_continue or parser.should_upgrade():
                return False
            cycle: Any = getattr(self, "cycle", None)
            if (cycle is not None and not cycle.response_complete) or self.pipeline:
                return False
            if self.limit_concurrency is not None or self.root_path:
                return False
            try:
                parsed = httptools.parse_url(self.url)
            except httptools.HttpParserInvalidURLError:
                return False
            raw_path = parsed.path
            if b"%" in raw_path or not raw_path.isascii():
                return False
            path = raw_path.decode("ascii")
            publishing = method == b"POST"
            match = (PUBLISH_PATTERN if publishing else POLL_PATTERN).fullmatch(path)
            if match is None:
                return False
            length = None
            for name, value in self.headers:
                if name == b"content-length":
                    if length is not None:
                        return False
                    length = value
                elif name == b"transfer-encoding":
                    return False
            loaded = self.config.loaded_app
            app = loaded.app if isinstance(loaded, PrivateApp) else loaded
            ways = direct_ways_of(app)
            query = parsed.query or b""
            if publishing:
                publish = ways.publish
                if publish is None or length is None or not length.isdigit():
                    return False
                if int(length) > publish.max_body():
                    return False
                exchange = self._exchange_for(app, "POST", path, raw_path, query)
                self._start(exchange, publish.serve(exchange, match["topic"]))
                return True
            poll = ways.poll
            if poll is None or (length is not None and length != b"0"):
                return False
            params = parse_poll_query(query)
            if params is None:
                return False
            exchange = self._exchange_for(app, "GET", path, raw_path, query)
            self._start(exchange, poll.serve(exchange, match["group"], match["instance_id"], params))
            return True

        def _exchange_for(
            self, app: Any, method: str, path: str, raw_path: bytes, query: bytes
        ) -> DirectExchange:
            """The request's exchange, standing as the connection's current cycle."""
            parser = self.parser
            http_version = parser.get_http_version()
            scope: dict[str, Any] = {
                "type": "http",
                "http_version": http_version,
                "method": method,
                "path": path,
                "raw_path": raw_path,
                "query_string": query,
                "root_path": "",
                "headers": self.headers,
                "server": self.server,
                "client": self.client,
                "scheme": self.scheme,
                "app": app,
            }
            exchange = DirectExchange(self, scope, http_version != "1.0" and parser.should_keep_alive())
            extensions: dict[str, Any] = {"gateway.connection": {"body_buffered": exchange.body_buffered}}
            tls = getattr(self, "tls_extension", None)
            if tls is not None:
                extensions["tls"] = tls
            scope["extensions"] = extensions
            if app is not self.config.loaded_app:  # a worker's private listener (worker_listener.py)
                exchange.scope = PrivateApp.prepare(scope)
            self._in_head = False  # the guarded protocol's head timer finds nothing to do
            self.cycle = exchange
            return exchange

        def _start(self, exchange: DirectExchange, answer: Coroutine[Any, Any, None]) -> None:
            """Run the answer as one of the server's tasks, as uvicorn runs a cycle's."""
            coroutine = self._serve(exchange, answer)
            if getattr(self.config, "reset_contextvars", False):
                task = self.loop.create_task(coroutine, context=contextvars.Context())
            else:
                task = self.loop.create_task(coroutine)
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

        async def _serve(self, exchange: DirectExchange, answer: Coroutine[Any, Any, None]) -> None:
            """uvicorn's ``run_asgi`` around the direct answer."""
            try:
                await answer
            except BaseException as exc:
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
                if not exchange.response_started:
                    await exchange.fail()
                elif self.transport is not None:
                    self.transport.close()
            else:
                if not exchange.response_started and not exchange.disconnected:
                    self.logger.error("ASGI callable returned without starting response.")
                    await exchange.fail()
            finally:
                exchange.release()

    return DirectProtocol
