"""Per-request and process-wide bounds of the REST listener, as one pure ASGI middleware.

* A request body is counted while it streams in: the request is answered 413 as soon as one byte more than
  its route's limit has been read (at once when Content-Length announces more), chunked bodies included, so
  no body is ever buffered past its limit. Publish takes ``limits.max_request_bytes``; every other route
  (consumer creation, commits: small JSON documents) ``limits.max_control_body_bytes``.
* A body that stalls (no piece for ``limits.body_timeout`` seconds) is answered 408, and so is one that
  arrives slower than ``limits.min_body_rate`` on average: the whole body must be there within
  ``body_timeout + size / min_body_rate`` seconds (size: Content-Length, or what came so far), so a client
  trickling a byte now and then cannot hold a request slot for long. (No deadline is set when the server
  says it holds the whole body already, the usual case of a small publish: the ``body_buffered`` of the
  connection extension, ``gateway/api/http_guard.py``.)
* Bytes of publish bodies held at once across all requests (being read or being published) are bounded by
  ``limits.max_inflight_publish_bytes``, requests in progress by ``limits.max_concurrent_requests`` (the
  health probes are not counted), and each caller's (principal's, or anonymous address's) requests in
  progress by its share, ``limits.max_concurrent_per_caller``; above any the answer is 503 with
  ``Retry-After``. These budgets are the process's :class:`~gateway.service.admission.Admission`, which
  gRPC calls count into too. The middleware runs inside authentication, so it knows the caller (and an
  unauthenticated request never gets this far, nor has its body read).

The middleware answers these refusals itself, with ``Connection: close`` (the rest of an oversized body is
not worth reading), and from then on drops what the app would still send: the app sees the client go away
(``http.disconnect``) instead of the rest of the body.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.auth import Answer
from gateway.api.http_guard import connection_extension
from gateway.api.schemas import error_document
from gateway.config import LimitSettings
from gateway.service.admission import Admission, caller_share
from gateway.service.principal import current_caller

__all__ = ["BodyReader", "Refused", "RequestLimitsMiddleware", "admit", "caller_of", "leave"]

#: paths never refused for load: the probes must answer while the gateway is busy
_PROBES = frozenset({"/healthz", "/readyz", "/livez"})
_RETRY_AFTER = 1


class Refused(Exception):
    """Why a request stops here: the answer the middleware sends instead of the app's."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.error: dict[str, Any] = {"code": code, "message": message, **extra}

    def answer(self) -> Answer:
        body = json.dumps(error_document(self.error)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        if self.status == 503:
            headers.append((b"retry-after", str(_RETRY_AFTER).encode()))
        return self.status, headers, body

    async def send(self, send: Send) -> None:
        status, headers, body = self.answer()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _too_large(limit: int) -> Refused:
    return Refused(
        413,
        "payload_too_large",
        f"request body above {limit} bytes; split the batch (or send a smaller document)",
        field="body",
        limit=limit,
    )


def _is_publish(scope: Scope) -> bool:
    path: str = scope["path"]
    return scope["method"] == "POST" and path.startswith("/v1/topics/") and path.endswith("/messages")


class RequestLimitsMiddleware:
    """See the module docstring. ``limits`` returns the settings (read per request: cheap, and tests may
    swap them)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: Callable[[], LimitSettings],
        admission: Callable[[], Admission] | None = None,
    ) -> None:
        self.app = app
        self._limits = limits
        own = Admission()
        self._admission = admission or (lambda: own)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _PROBES:
            await self.app(scope, receive, send)
            return
        admitted = self.admit(scope, receive)
        if isinstance(admitted, Refused):
            await admitted.send(send)
            return
        reader = admitted
        started = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if reader.refusal is not None and not started:
                return  # the middleware answers instead (after the app is done)
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, reader.receive, guarded_send)
        except Exception:
            if reader.refusal is None:
                raise
            # the app failed because its body was cut off (ClientDisconnect and the like): answered below
        finally:
            leave(reader)
        if reader.refusal is not None and not reader.refused and not started:
            reader.refused = True
            await reader.refusal.send(send)

    def admit(self, scope: Scope, receive: Receive) -> Refused | BodyReader:
        """:func:`admit` in this middleware's limits and budgets."""
        return admit(scope, receive, self._limits(), self._admission())


def admit(
    scope: Scope, receive: Receive, limits: LimitSettings, admission: Admission
) -> Refused | BodyReader:
    """The steps before the app: the refusal to answer instead (413 by Content-Length, 503 above the
    concurrency budgets of ``admission``), or the admitted request's body reader (the app's ``receive``);
    then :func:`leave` when the request is done."""
    publish = _is_publish(scope)
    limit = limits.max_request_bytes if publish else limits.max_control_body_bytes
    length = _content_length(scope)
    if length is not None and length > limit:
        return _too_large(limit)
    caller = caller_of(scope)
    share = caller_share(limits.max_concurrent_requests, limits.max_concurrent_per_caller)
    refusal = admission.enter(caller, limits.max_concurrent_requests, share)
    if refusal is not None:
        return Refused(503, "unavailable", refusal.message(), retryAfterSeconds=_RETRY_AFTER)
    extension = connection_extension(scope)
    buffered = extension.get("body_buffered") if extension is not None else None
    return BodyReader(admission, receive, limit, limits, publish, buffered, length, caller)


def leave(reader: BodyReader) -> None:
    """The request admitted with ``reader`` is done: its publish bytes and its slot are given back."""
    reader.admission.release(reader.reserved)
    reader.reserved = 0
    reader.admission.leave(reader.caller)


def caller_of(scope: Scope) -> str:
    """Whose share a request takes: the principal's identity, or ``anonymous@<client address>`` (the caller
    the authentication middleware, outside this one, entered: gateway/service/principal.py)."""
    return current_caller().key


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyReader:
    """The app's ``receive``: counts the body against the limits and sets a deadline on each piece and on
    the whole body."""

    __slots__ = (
        "_buffered",
        "_done",
        "_length",
        "_limit",
        "_limits",
        "_publish",
        "_receive",
        "_received",
        "_started",
        "admission",
        "caller",
        "refusal",
        "refused",
        "reserved",
    )

    def __init__(
        self,
        admission: Admission,
        receive: Receive,
        limit: int,
        limits: LimitSettings,
        publish: bool,
        buffered: Callable[[], bool] | None = None,
        length: int | None = None,
        caller: str = "",
    ) -> None:
        self.admission = admission
        self.caller = caller
        self._length = length or 0
        self._started = 0.0  # when the first piece of body was waited for (the buffered case never waits)
        self._buffered = buffered
        self._receive = receive
        self._limit = limit
        self._limits = limits
        self._publish = publish
        self._received = 0
        self._done = False
        self.refusal: Refused | None = None
        self.refused = False
        self.reserved = 0

    async def receive(self) -> Message:
        if self._done:
            return await self._receive()
        if self.refusal is not None:
            return {"type": "http.disconnect"}
        limits = self._limits
        try:
            if self._buffered is not None and self._buffered():
                message = await self._receive()  # answers at once: no deadline (and no timer) needed
            else:
                # the next piece within body_timeout, and the whole body at min_body_rate on average
                now = time.monotonic()
                if not self._started:
                    self._started = now
                whole = limits.body_timeout + max(self._length, self._received) / limits.min_body_rate
                left = self._started + whole - now
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(min(limits.body_timeout, left)):
                    message = await self._receive()
        except TimeoutError:
            return self._refuse(
                Refused(
                    408,
                    "request_timeout",
                    f"the request body did not come in time: a pause above {limits.body_timeout:g} s, or "
                    f"slower than {limits.min_body_rate} bytes/s on average; send the body without pauses",
                    field="body",
                )
            )
        if message["type"] != "http.request":
            self._done = True
            return message
        size = len(message.get("body", b""))
        self._received += size
        if self._received > self._limit:
            return self._refuse(_too_large(self._limit))
        if self._publish and size:
            cap = self._limits.max_inflight_publish_bytes
            if not self.admission.reserve(size, cap):
                return self._refuse(
                    Refused(
                        503,
                        "unavailable",
                        f"this gateway holds its maximum of {cap} bytes of publish requests; retry shortly "
                        "or through another replica",
                        retryAfterSeconds=_RETRY_AFTER,
                    )
                )
            self.reserved += size
        if not message.get("more_body", False):
            self._done = True
        return message

    def _refuse(self, refusal: Refused) -> Message:
        self.refusal = refusal
        return {"type": "http.disconnect"}
