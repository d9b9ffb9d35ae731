"""What the app's middlewares do to every request, as plain calls, for a request answered below ASGI.

The httptools protocol (``gateway/api/direct_protocol.py``) answers the usual publish
(``gateway/api/direct_publish.py``) and the usual poll (``gateway/api/direct_poll.py``) itself, without an
ASGI scope, request cycle or middleware objects. :meth:`DirectSteps.serve` reads top to bottom as such a
request's way: what the middlewares do, in their nesting, as the plain functions they call themselves (one
rule, one place), around the route's own answer (a :class:`DirectRoute`):

* the client address behind a trusted proxy (:meth:`gateway.api.proxy.TrustedProxies.rewrite`);
* the SERVER span (:mod:`gateway.observability.tracing`, :func:`gateway.api.tracing.finish_span`);
* the request id and the access line (:func:`request_id_of`, :func:`with_request_id`,
  :class:`~gateway.observability.access_log.AccessLog`, :func:`internal_error`, :func:`client_left`);
* the HTTP metrics (:func:`~gateway.observability.metrics.request_finished`);
* authentication and the caller (the route's :meth:`DirectRoute.authenticate`, which calls
  :func:`gateway.api.auth.authenticate`; :func:`~gateway.service.principal.enter_caller`), before any body
  is read;
* body bounds, deadlines and the concurrency budgets (:func:`gateway.api.request_limits.admit` /
  :func:`~gateway.api.request_limits.leave`);
* the route's answer, with the keys FastAPI's router puts in the scope (``route``, ``endpoint``,
  ``path_params``: the access line, the metrics and the span name read them);
* on the way out: gzip of the answer (:func:`gateway.api.compression.gzip_answer`) and the CORS headers
  (:func:`gateway.api.cors.cors_headers`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope

from gateway.api import request_limits
from gateway.api.auth import Answer, caller_address, error_answer
from gateway.api.compression import compressible, gzip_answer
from gateway.api.cors import cors_headers
from gateway.api.proxy import TrustedProxies
from gateway.api.request_limits import Refused
from gateway.api.tracing import carrier_of, finish_span
from gateway.observability import tracing
from gateway.observability.access_log import AccessLog
from gateway.observability.logging import client_left, internal_error, request_id_of, with_request_id
from gateway.observability.metrics import GatewayMetrics, request_finished
from gateway.observability.request_id import bind, unbind
from gateway.runtime import Runtime
from gateway.service.errors import ServiceError
from gateway.service.principal import Principal, enter_caller, leave_caller

__all__ = [
    "DirectRequest",
    "DirectRoute",
    "DirectSteps",
    "Headers_",
    "app_routes",
    "call_name",
    "native_telemetry",
    "served_by_own_middleware",
    "served_routes",
]

Headers_ = list[tuple[bytes, bytes]]
#: a route's answer given its body reader (the ``receive`` of the admitted request)
Respond = Callable[[Receive], Awaitable[Answer]]


class DirectRequest(Protocol):
    """What the protocol gives for one request: its scope (a small dict: type, method, path, query_string,
    headers, client, server, scheme, http_version, extensions, app), its body as ASGI ``receive`` messages,
    and ``respond`` to write the answer."""

    @property
    def scope(self) -> Scope: ...

    #: set by ``receive`` when it told the app that the client went away
    client_gone: bool

    async def receive(self) -> Message: ...

    async def respond(self, status: int, headers: Headers_, body: bytes) -> None: ...


class DirectRoute(Protocol):
    """One route answered directly: what FastAPI's router would put in the scope, and the caller's
    authentication for it (the operation the authentication middleware would find for the request)."""

    #: the route as the app serves it (the access line, the metrics and the span read its template)
    route: Any
    #: its endpoint function
    endpoint: Callable[..., Any]

    async def authenticate(self, scope: Scope) -> Principal: ...


class _Request:
    """One request on its way: what it is (the request, its route, the route's answer) and what the ASGI
    way's send wrappers remember (the statuses the request-id, metrics and tracing steps saw, whether an
    answer started)."""

    __slots__ = (
        "counted",
        "logged",
        "path_params",
        "request",
        "request_id",
        "respond",
        "route",
        "started",
        "traced",
    )

    def __init__(
        self, request: DirectRequest, route: DirectRoute, path_params: dict[str, str], respond: Respond
    ) -> None:
        self.request = request
        self.route = route
        self.path_params = path_params
        self.respond = respond
        self.request_id = ""
        self.started = False
        self.logged = 500  # the request-id step's status: 500 unless an answer started
        self.counted: int | None = None  # the metrics step's
        self.traced = 0  # the tracing step's


def native_telemetry(app: FastAPI) -> bool:
    """Whether FastAPI's own telemetry is on (then requests go the ASGI way, through it)."""
    telemetry = getattr(app, "_native_telemetry", None)
    return telemetry is not None and bool(telemetry.enabled())


def served_by_own_middleware(app: FastAPI) -> bool:
    """Whether the app's middlewares are the ones ``create_app`` installed (``app.state.own_middleware``):
    a middleware added later sends every request the ASGI way, which runs it."""
    own = getattr(app.state, "own_middleware", None)
    return own is not None and tuple(m.cls for m in app.user_middleware) == own


def app_routes(routes: Iterable[Any]) -> list[Any]:
    """The routes as served, in the router's order (with the dependencies of the app and routers they are
    included with). FastAPI 0.165 keeps an included router as one lazy entry whose
    ``effective_candidates()`` are those routes; earlier versions copied each route into the app."""
    found: list[Any] = []
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)
        found += app_routes(candidates()) if candidates is not None else [route]
    return found


def served_routes(routes: Iterable[Any], method: str, path: str) -> list[Any]:
    """The routes (as served) that answer ``method`` on the path template ``path``."""
    return [
        route
        for route in app_routes(routes)
        if getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ())
    ]


def call_name(call: Any) -> str:
    """A dependency's name, for a refusal naming it."""
    return str(getattr(call, "__qualname__", None) or repr(call))


class DirectSteps:
    """The middlewares' steps of one app (see the module docstring): what they were built from."""

    def __init__(self, app: FastAPI) -> None:
        state = app.state
        self.runtime: Runtime = state.runtime
        settings = self.runtime.settings
        self._proxies = TrustedProxies(settings.http.trusted_proxies)
        self._cors = cors_headers(settings.cors)
        self._traced: bool = state.traced
        self._access: AccessLog = state.access_log
        self._metrics: GatewayMetrics = state.metrics

    async def serve(
        self, request: DirectRequest, route: DirectRoute, path_params: dict[str, str], respond: Respond
    ) -> None:
        """Answer ``request`` as the app's middlewares and the router would, with ``respond``'s answer for
        the authenticated, admitted request of ``route`` (matched with ``path_params``)."""
        scope = request.scope
        await self._proxies.rewrite(scope)
        state = _Request(request, route, path_params, respond)
        if self._traced and tracing.enabled():
            method = scope["method"]
            with tracing.server_span(method, carrier_of(scope), {"http.request.method": method}) as span:
                try:
                    await self._with_id(state)
                finally:
                    finish_span(span, scope, state.traced)
            return
        await self._with_id(state)

    async def _with_id(self, state: _Request) -> None:
        """The request id and the access line around the rest; an error answered 500 naming the id."""
        request = state.request
        scope = request.scope
        request_id = state.request_id = request_id_of(scope)
        token = bind(request_id)
        started = time.perf_counter()
        try:
            await self._counted(state)
        except Exception:
            if state.started:
                raise
            if request.client_gone:
                state.logged = client_left()
            else:
                status, headers, body = internal_error(request_id)
                state.started = True
                state.logged = status
                await self._emit(state, status, with_request_id(headers, request_id), body)
        finally:
            self._access.log_request(scope, state.logged, time.perf_counter() - started)
            unbind(token)

    async def _counted(self, state: _Request) -> None:
        """The HTTP metrics around authentication, then admission and the route's answer."""
        request = state.request
        scope = request.scope
        started = time.perf_counter()
        self._metrics.http_in_flight.inc()
        try:
            try:
                principal = await state.route.authenticate(scope)
            except ServiceError as exc:
                await self._answer(state, *error_answer(exc))
                return
            token = enter_caller(principal, caller_address(scope))
            try:
                await self._admitted(state)
            finally:
                leave_caller(token)
        finally:
            request_finished(self._metrics, scope, state.counted, request.client_gone, started)

    async def _admitted(self, state: _Request) -> None:
        """Admission, then the route's answer, or the refusal of its body reader."""
        request = state.request
        scope = request.scope
        runtime = self.runtime
        admitted = request_limits.admit(scope, request.receive, runtime.settings.limits, runtime.admission)
        if isinstance(admitted, Refused):
            await self._answer(state, *admitted.answer())
            return
        reader = admitted
        scope["route"] = state.route.route
        scope["endpoint"] = state.route.endpoint
        scope["path_params"] = state.path_params
        try:
            answer = await state.respond(reader.receive)
            if reader.refusal is None:
                await self._answer(state, *answer)
        except Exception:
            if reader.refusal is None:
                raise
        finally:
            request_limits.leave(reader)
        if reader.refusal is not None and not reader.refused and not state.started:
            reader.refused = True
            await self._answer(state, *reader.refusal.answer())

    async def _answer(self, state: _Request, status: int, headers: Headers_, body: bytes) -> None:
        """An answer from inside the metrics step: counted, stamped with the request id, then emitted."""
        state.counted = status
        state.started = True
        state.logged = status
        await self._emit(state, status, with_request_id(headers, state.request_id), body)

    async def _emit(self, state: _Request, status: int, headers: Headers_, body: bytes) -> None:
        """The answer from the request-id step outwards: tracing's status, gzip, CORS, the write."""
        state.traced = status
        request = state.request
        scope = request.scope
        settings = self.runtime.settings.compression
        if settings.enabled and compressible(headers):
            headers, body = gzip_answer(settings, scope, headers, body)
        if self._cors is not None:
            headers = await self._cors(scope, headers)
        await request.respond(status, headers, body)
