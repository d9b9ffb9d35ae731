"""Structured logs: one JSON object per line, a request id per HTTP request, core events as log lines.

* :class:`JsonFormatter` renders a record as one line: ``ts`` (UTC, ISO 8601 with milliseconds), ``level``,
  ``logger``, ``msg``, the id of the HTTP request or gRPC call being served (``request_id``), every
  ``extra={...}`` field, and ``exc`` (the formatted traceback) when the record carries an exception.
  Consumer instance ids are bearer-like: the code logs only their redacted form, and both formatters
  redact any that still reaches a line (a path, an error message, a traceback) as a last line of defence.
* :func:`configure_logging` installs it (or a plain text format) on the root logger and routes uvicorn's
  loggers through it.
* :class:`RequestIdMiddleware` (pure ASGI) takes ``X-Request-ID`` from the request when it is a sane token,
  otherwise makes one, exposes it to every log line of the request through a context variable, returns it
  in the ``X-Request-ID`` response header (also on a 500 from an unhandled error, which it logs), and
  writes one access line per request.
* :class:`EventLogger` subscribes to the core's :class:`~gateway.tubemq.events.EventBus` and logs each event
  as one line named after its class, with the event's fields; chatty per-request events go to DEBUG.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import IO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability.access_log import AccessLog
from gateway.observability.json_lines import (
    _STANDARD_ATTRS,
    JsonFormatter,
    _jsonable,
    direct_handler,
    write_direct,
)
from gateway.observability.request_id import (
    REQUEST_ID_HEADER,
    accepted,
    bind,
    current_request_id,
    new_request_id,
    unbind,
)
from gateway.service.instance_id import redact_text
from gateway.tubemq.events import EventBus, Subscription

__all__ = [
    "CLIENT_CLOSED",
    "REQUEST_ID_HEADER",
    "EventLogger",
    "JsonFormatter",
    "RedactingFilter",
    "RequestIdMiddleware",
    "TextFormatter",
    "client_left",
    "configure_logging",
    "current_request_id",
    "internal_error",
    "redact_library_logs",
    "request_id_of",
    "with_request_id",
]

#: The status logged (and counted by the metrics) for a request whose client went away before any answer.
CLIENT_CLOSED = 499
_HEADER_LOWER = REQUEST_ID_HEADER.lower().encode("latin-1")
_http_log = logging.getLogger("gateway.http")
#: the source file named by event-line records (the caller's frame is not looked up for them)
_ACCESS_FN = __file__


class RedactingFilter(logging.Filter):
    """Redacts instance ids in the records of a library logger (httpx logs every request's URL, and the
    forwarder's URLs name instances). :func:`redact_library_logs` installs it."""

    # Only records carrying an id are rewritten; the others keep their message and arguments.

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


#: the loggers of the HTTP client the forwarder uses: request URLs, and response headers (Location) at debug
HTTP_CLIENT_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy")


def redact_library_logs(names: Iterable[str] = HTTP_CLIENT_LOGGERS) -> None:
    """Install :class:`RedactingFilter` on these library loggers (once each; a logger's filters see only
    the records logged on it, not its children's)."""
    for name in names:
        library = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in library.filters):
            library.addFilter(RedactingFilter())


class TextFormatter(logging.Formatter):
    """Plain lines for a terminal, with instance ids redacted like the JSON lines."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def configure_logging(level: str = "info", fmt: str = "json", stream: IO[str] | None = None) -> None:
    """Send every log line (ours, uvicorn's, the core's) to ``stream`` (stderr) as JSON or plain text.

    ``fmt`` is ``json`` or ``text``. Replaces the root logger's handlers, so calling it twice is harmless.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be 'json' or 'text', not {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # uvicorn installs its own handlers and text formats unless told otherwise; let its records reach ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv = logging.getLogger(name)
        uv.handlers.clear()
        uv.propagate = True


class RequestIdMiddleware:
    """Give every HTTP request an id (kept from ``X-Request-ID`` when valid) and log one access line
    (``access``: :class:`~gateway.observability.access_log.AccessLog`)."""

    def __init__(self, app: ASGIApp, *, access: AccessLog | None = None) -> None:
        self.app = app
        self.access = access or AccessLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        token = bind(request_id)
        started = time.perf_counter()
        status = 500
        started_response = False
        client_gone = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                started_response = True
                status = message["status"]
                message = {**message, "headers": with_request_id(message.get("headers", ()), request_id)}
            await send(message)

        async def receive_tracked() -> Message:
            nonlocal client_gone
            message = await receive()
            client_gone = client_gone or message["type"] == "http.disconnect"
            return message

        try:
            await self.app(scope, receive_tracked, send_with_id)
        except Exception:
            if started_response:
                raise
            if client_gone:
                status = client_left()
            else:
                status, headers, body = internal_error(request_id)
                await send_with_id({"type": "http.response.start", "status": status, "headers": headers})
                await send_with_id({"type": "http.response.body", "body": body})
        finally:
            self.access.log_request(scope, status, time.perf_counter() - started)
            unbind(token)

    def __repr__(self) -> str:
        return f"<RequestIdMiddleware header={REQUEST_ID_HEADER} {self.access!r}>"


def request_id_of(scope: Scope) -> str:
    """The request's id: its ``X-Request-ID`` when that is a sane token, else a new one."""
    return _incoming_id(scope) or new_request_id()


def with_request_id(headers: Iterable[tuple[bytes, bytes]], request_id: str) -> list[tuple[bytes, bytes]]:
    """An answer's headers with ``X-Request-ID: request_id`` last (any the app set replaced)."""
    found = [h for h in headers if h[0].lower() != _HEADER_LOWER]
    found.append((_HEADER_LOWER, request_id.encode("latin-1")))
    return found


def client_left() -> int:
    """The client left before the answer (an abandoned upload): nobody to answer, nothing to fix on our
    side. Logged as 499 like the metrics count it, without a traceback; returns that status."""
    _http_log.info("the client went away before the answer")
    return CLIENT_CLOSED


def internal_error(request_id: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Log the error being handled and return the 500 to answer with, naming the request id: answered by
    the request-id step rather than Starlette's outer error middleware, so that the client gets the id to
    quote and the traceback is logged as one JSON line carrying it."""
    _http_log.exception("unhandled error while serving the request")
    body = json.dumps(
        {
            "error": {"code": "internal", "message": f"internal error; quote request id {request_id}"},
            "requestId": request_id,
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return 500, headers, body


def _incoming_id(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == _HEADER_LOWER:
            text = value.decode("latin-1")
            return accepted(text)
    return None


#: Events emitted for every request or poll: useful when debugging, noise otherwise.
_CHATTY = frozenset(
    {
        "RequestCompleted",
        "SendCompleted",
        "FetchOutcome",
        "OffsetCommitted",
        "GrpcCallStarted",
        "GrpcStreamMessages",
    }
)
_TROUBLE = ("Failed", "Shielded", "Terminated", "Error", "Closed")


#: event class -> (field, log key) of each dataclass field; a field whose name clashes with a LogRecord
#: attribute (e.g. "msg", which would make logging raise) is logged as ``event_<name>``
_FIELD_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}


def _field_names(kind: type) -> tuple[tuple[str, str], ...]:
    if not dataclasses.is_dataclass(kind):
        return ()
    names = (f.name for f in dataclasses.fields(kind))
    return tuple((n, n if n not in _STANDARD_ATTRS else f"event_{n}") for n in names)


class EventLogger:
    """Logs every core event as one line: message = the event's class name, fields = its dataclass fields.

    Levels: DEBUG for per-request events (sends, fetches, commits, RPCs), WARNING for failures and
    shielding (unless the event says the outcome was fine), INFO otherwise.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger("gateway.events")
        self._subscription: Subscription | None = None
        #: the level of each kind of event whose level does not depend on the event itself
        self._levels: dict[type, int] = {}

    def subscribe(self, bus: EventBus) -> Subscription:
        self._subscription = bus.subscribe(self)
        return self._subscription

    def level_of(self, event: object) -> int:
        name = type(event).__name__
        if name in _CHATTY:
            return logging.DEBUG
        if name == "ConnectionTerminated" and getattr(event, "error", None) is None:
            return logging.INFO
        if any(word in name for word in _TROUBLE) and name != "ConsumerClosed":
            return logging.WARNING
        return logging.INFO

    def __call__(self, event: object) -> None:
        kind = type(event)
        level = self._levels.get(kind)
        if level is None:
            level = self.level_of(event)
            if kind.__name__ != "ConnectionTerminated":  # the one kind whose level is the event's
                self._levels[kind] = level
        if not self._log.isEnabledFor(level):
            return
        names = _FIELD_NAMES.get(kind)
        if names is None:
            names = _FIELD_NAMES[kind] = _field_names(kind)
        name = kind.__name__
        extra = {"event": name}
        for field, key in names:
            extra[key] = _jsonable(getattr(event, field))
        # A gRPC call's GrpcCallFinished is one line per call: like the HTTP access line, it is written
        # without a LogRecord where configure_logging's one JSON handler is all that would see it
        # (gateway/observability/json_lines.py); else a record, without Logger.log's look-up of the caller's
        # frame (file and line), which no line shows.
        log = self._log
        handler = direct_handler(log, level)
        if handler is not None:
            write_direct(handler, log, level, name, extra)
            return
        log.handle(log.makeRecord(log.name, level, _ACCESS_FN, 0, name, (), None, extra=extra))

    def __repr__(self) -> str:
        state = "subscribed" if self._subscription is not None and self._subscription.active else "idle"
        return f"<EventLogger {self._log.name} {state}>"
