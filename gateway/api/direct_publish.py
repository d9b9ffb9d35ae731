"""The one-message publish answered below ASGI: the steps of the app's middlewares, in their
order, without ASGI messages, send wrappers or uvicorn's request cycle.

The httptools protocol (``gateway/api/direct_protocol.py``) hands a complete ``POST
/v1/topics/{topic}/messages`` here (a :class:`DirectRequest`) instead of building an ASGI scope and a
request cycle for it. :class:`DirectPublish` runs the steps the ASGI way runs, each one the same function the
middleware calls (one rule, one place), in the middlewares' nesting:

* the client address behind a trusted proxy (``ProxyHeadersMiddleware.rewrite``);
* CORS headers on the answer (Starlette's ``CORSMiddleware.send`` itself);
* gzip of the answer (:func:`gateway.api.compression.gzip_answer`);
* the SERVER span (:func:`gateway.api.tracing.finish_span`);
* the request id and the access line (``gateway/observability/logging.py``: :func:`request_id_of`,
  :func:`with_request_id`, ``RequestIdMiddleware.log_request``, :func:`internal_error`, :func:`client_left`);
* the HTTP metrics (``HttpMetricsMiddleware.finished``);
* authentication, rules and the caller (``AuthMiddleware.authenticate``, :func:`error_answer`,
  :func:`~gateway.service.principal.enter_caller`), before any body is read;
* body bounds, deadlines and the concurrency budgets (``RequestLimitsMiddleware.admit`` / ``leave``, its
  body reader);
* the publish itself and its errors (``HotPathMiddleware.answer``: the endpoint and the app's handlers).

:meth:`DirectPublish.of` finds those middleware instances in the app's built middleware stack, and only when
the stack is exactly the one ``create_app`` builds (so a middleware added later sends every publish the ASGI
way, which runs it). ``tests/test_direct_publish.py`` holds the two ways byte for byte alike over real
sockets.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope

from gateway.api.auth import AuthMiddleware, caller_address, error_answer
from gateway.api.compression import GzipMiddleware, compressible, gzip_answer
from gateway.api.hot_path import GatewayApp, HotPathMiddleware, native_telemetry
from gateway.api.proxy import ProxyHeadersMiddleware
from gateway.api.request_limits import Refused, RequestLimitsMiddleware
from gateway.api.tracing import TracingMiddleware, carrier_of, finish_span
from gateway.observability import tracing
from gateway.observability.logging import (
    RequestIdMiddleware,
    client_left,
    internal_error,
    request_id_of,
    with_request_id,
)
from gateway.observability.metrics import HttpMetricsMiddleware
from gateway.observability.request_id import bind, unbind
from gateway.service.errors import ServiceError
from gateway.service.principal import enter_caller, leave_caller

__all__ = ["DirectPublish", "DirectRequest", "direct_publish_of"]

Headers_ = list[tuple[bytes, bytes]]


class DirectRequest(Protocol):
    """What the protocol gives for one request: its scope (a small dict: type, method, path, headers,
    client, server, scheme, http_version, extensions, app), its body as ASGI ``receive`` messages, and
    ``respond`` to write the answer."""

    scope: dict[str, Any]
    #: set by ``receive`` when it told the app that the client went away
    client_gone: bool

    async def receive(self) -> Message: ...

    async def respond(self, status: int, headers: Headers_, body: bytes) -> None: ...


class _State:
    """Per request: what the ASGI way's send wrappers remember (the statuses the request-id, metrics and
    tracing steps saw, whether an answer started)."""

    __slots__ = ("counted", "logged", "started", "traced")

    def __init__(self) -> None:
        self.started = False
        self.logged = 500  # the request-id step's status: 500 unless an answer started
        self.counted: int | None = None  # the metrics step's
        self.traced = 0  # the tracing step's


async def _dropped(message: Message) -> None:
    """The ``send`` given to CORS' step: the answer's start message is taken back from it, changed."""


#: The app's own middlewares, outermost first, as ``create_app`` stacks them (None: optional).
_ORDER: tuple[tuple[type, bool], ...] = (
    (ProxyHeadersMiddleware, True),
    (CORSMiddleware, False),
    (GzipMiddleware, True),
    (TracingMiddleware, False),
    (RequestIdMiddleware, True),
    (HttpMetricsMiddleware, True),
    (AuthMiddleware, True),
    (RequestLimitsMiddleware, True),
    (HotPathMiddleware, True),
)


def direct_publish_of(app: Any) -> DirectPublish | None:
    """The publish steps of ``app`` as served now: None unless it is a :class:`GatewayApp` serving publishes
    the short way (no root path, no FastAPI native telemetry) with its usual middleware stack."""
    if not isinstance(app, GatewayApp) or app.root_path or native_telemetry(app):
        return None
    entry = app.entry()
    if entry is not app.__dict__.get("_direct_entry", _NONE):
        app.__dict__["_direct_entry"] = entry
        app.__dict__["_direct_steps"] = DirectPublish.of(entry) if entry is not None else None
    steps: DirectPublish | None = app.__dict__["_direct_steps"]
    return steps


_NONE = object()


class DirectPublish:
    """The steps of a publish, from the middleware instances of one built stack (see the module docstring)."""

    def __init__(self, found: dict[type, Any]) -> None:
        self._proxy: ProxyHeadersMiddleware = found[ProxyHeadersMiddleware]
        self._cors: CORSMiddleware | None = found.get(CORSMiddleware)
        self._gzip: GzipMiddleware = found[GzipMiddleware]
        self._tracing = TracingMiddleware in found
        self._ids: RequestIdMiddleware = found[RequestIdMiddleware]
        self._metrics: HttpMetricsMiddleware = found[HttpMetricsMiddleware]
        self._auth: AuthMiddleware = found[AuthMiddleware]
        self._limits: RequestLimitsMiddleware = found[RequestLimitsMiddleware]
        self._hot: HotPathMiddleware = found[HotPathMiddleware]

    @classmethod
    def of(cls, entry: ASGIApp | None) -> DirectPublish | None:
        """The steps of the stack whose outermost own middleware is ``entry``; None unless that stack holds
        exactly the app's middlewares in their order (then every publish goes the ASGI way)."""
        found: dict[type, Any] = {}
        node: Any = entry
        for kind, required in _ORDER:
            if type(node) is kind:
                found[kind] = node
                node = getattr(node, "app", None)
            elif required:
                return None
        return cls(found)

    def max_body(self) -> int:
        """The largest body a publish may declare (larger ones go the ASGI way: answered 413 there)."""
        return int(self._limits._limits().max_request_bytes)

    async def serve(self, request: DirectRequest, topic: str) -> None:
        """Answer the publish ``request`` (to ``topic``) as the app's middlewares and endpoint would."""
        scope = request.scope
        await self._proxy.rewrite(scope)
        state = _State()
        if self._tracing and tracing.enabled():
            method = scope["method"]
            with tracing.server_span(method, carrier_of(scope), {"http.request.method": method}) as span:
                try:
                    await self._with_id(request, scope, topic, state)
                finally:
                    finish_span(span, scope, state.traced)
            return
        await self._with_id(request, scope, topic, state)

    async def _emit(
        self, request: DirectRequest, state: _State, status: int, headers: Headers_, body: bytes
    ) -> None:
        """The answer from the request-id step outwards: tracing's status, gzip, CORS, the write."""
        state.traced = status
        scope = request.scope
        settings = self._gzip.settings()
        if settings.enabled and compressible(headers):
            headers, body = gzip_answer(settings, scope, headers, body)
        if self._cors is not None:
            start: Message = {"type": "http.response.start", "status": status, "headers": headers}
            await self._cors.send(start, _dropped, Headers(scope=scope))
            headers = start["headers"]
        await request.respond(status, headers, body)

    async def _answer(
        self,
        request: DirectRequest,
        state: _State,
        request_id: str,
        status: int,
        headers: Headers_,
        body: bytes,
    ) -> None:
        """An answer from inside the metrics step: counted, stamped with the request id, then emitted."""
        state.counted = status
        state.started = True
        state.logged = status
        await self._emit(request, state, status, with_request_id(headers, request_id), body)

    async def _with_id(self, request: DirectRequest, scope: Scope, topic: str, state: _State) -> None:
        """RequestIdMiddleware's steps around the rest."""
        request_id = request_id_of(scope)
        token = bind(request_id)
        started = time.perf_counter()
        try:
            await self._counted(request, scope, topic, state, request_id)
        except Exception:
            if state.started:
                raise
            if request.client_gone:
                state.logged = client_left()
            else:
                status, headers, body = internal_error(request_id)
                state.started = True
                state.logged = status
                await self._emit(request, state, status, with_request_id(headers, request_id), body)
        finally:
            self._ids.log_request(scope, state.logged, time.perf_counter() - started)
            unbind(token)

    async def _counted(
        self, request: DirectRequest, scope: Scope, topic: str, state: _State, request_id: str
    ) -> None:
        """HttpMetricsMiddleware's steps, then authentication and the caller."""
        started = time.perf_counter()
        self._metrics.metrics.http_in_flight.inc()
        try:
            try:
                principal = await self._auth.authenticate(scope)
            except ServiceError as exc:
                await self._answer(request, state, request_id, *error_answer(exc))
                return
            token = enter_caller(principal, caller_address(scope))
            try:
                await self._limited(request, scope, topic, state, request_id)
            finally:
                leave_caller(token)
        finally:
            self._metrics.finished(scope, state.counted, request.client_gone, started)

    async def _limited(
        self, request: DirectRequest, scope: Scope, topic: str, state: _State, request_id: str
    ) -> None:
        """RequestLimitsMiddleware's steps around the endpoint."""
        admitted = self._limits.admit(scope, request.receive)
        if isinstance(admitted, Refused):
            await self._answer(request, state, request_id, *admitted.answer())
            return
        reader = admitted
        receive: Receive = reader.receive
        try:
            answer = await self._hot.answer(scope, receive, topic)
            if reader.refusal is None:
                await self._answer(request, state, request_id, *answer)
        except Exception:
            if reader.refusal is None:
                raise
        finally:
            self._limits.leave(reader)
        if reader.refusal is not None and not reader.refused and not state.started:
            reader.refused = True
            await self._answer(request, state, request_id, *reader.refusal.answer())
