"""The publish answered below ASGI: the usual ``POST /v1/topics/{topic}/messages``, a batch of any size
with a ``Content-Length`` body, without ASGI messages, send wrappers or uvicorn's request cycle.

The httptools protocol (``gateway/api/direct_protocol.py``) hands such a request here (a
:class:`DirectRequest`) instead of building an ASGI scope and a request cycle for it.
:meth:`DirectPublish.serve` reads top to bottom as the answer's way: what the app's middlewares do to every
request, in their nesting, as the plain functions they call themselves (one rule, one place), around the
publish's own steps (:mod:`gateway.api.publish_steps`):

* the client address behind a trusted proxy (:meth:`gateway.api.proxy.TrustedProxies.rewrite`);
* the SERVER span (:mod:`gateway.observability.tracing`, :func:`gateway.api.tracing.finish_span`);
* the request id and the access line (:func:`request_id_of`, :func:`with_request_id`,
  :class:`~gateway.observability.access_log.AccessLog`, :func:`internal_error`, :func:`client_left`);
* the HTTP metrics (:func:`~gateway.observability.metrics.request_finished`);
* authentication and the caller (:func:`~gateway.api.publish_steps.authenticate`,
  :func:`~gateway.service.principal.enter_caller`), before any body is read;
* body bounds, deadlines and the concurrency budgets (:func:`~gateway.api.publish_steps.admit` /
  :func:`~gateway.api.publish_steps.leave`);
* the publish and its answer (:func:`~gateway.api.publish_steps.respond`);
* on the way out: gzip of the answer (:func:`gateway.api.compression.gzip_answer`) and the CORS headers
  (:func:`gateway.api.cors.cors_headers`).

:func:`direct_publish_of` serves an app only while its middlewares are the ones ``create_app`` installed
(``app.state.own_middleware``), so a middleware added later sends every publish the ASGI way, which runs it;
and only while the publish route is the plain one (:func:`check_publish_route`): a dependency added to it
would be skipped here. ``tests/api/test_direct_publish.py`` holds the two ways byte for byte alike over real
sockets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from fastapi import FastAPI
from starlette.types import Message, Scope

from gateway.api import publish_steps
from gateway.api.auth import caller_address, error_answer
from gateway.api.compression import compressible, gzip_answer
from gateway.api.cors import cors_headers
from gateway.api.proxy import TrustedProxies
from gateway.api.request_limits import Refused
from gateway.api.routes_topics import publish_messages
from gateway.api.tracing import carrier_of, finish_span
from gateway.observability import tracing
from gateway.observability.access_log import AccessLog
from gateway.observability.logging import client_left, internal_error, request_id_of, with_request_id
from gateway.observability.metrics import GatewayMetrics, request_finished
from gateway.observability.request_id import bind, unbind
from gateway.runtime import Runtime
from gateway.service.errors import ServiceError
from gateway.service.principal import enter_caller, leave_caller

__all__ = [
    "DirectPublish",
    "DirectRequest",
    "PublishRouteConflict",
    "check_publish_route",
    "direct_publish_of",
    "native_telemetry",
]

Headers_ = list[tuple[bytes, bytes]]


class DirectRequest(Protocol):
    """What the protocol gives for one request: its scope (a small dict: type, method, path, headers,
    client, server, scheme, http_version, extensions, app), its body as ASGI ``receive`` messages, and
    ``respond`` to write the answer."""

    @property
    def scope(self) -> Scope: ...

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


def direct_publish_of(app: Any) -> DirectPublish | None:
    """The direct way of ``app`` as served now: None unless it is an app of ``create_app`` with the
    middlewares it installed, no root path and no FastAPI native telemetry."""
    if not isinstance(app, FastAPI) or app.root_path or native_telemetry(app):
        return None
    # The check is redone when the stack is rebuilt or a middleware is added.
    key = (app.middleware_stack, len(app.user_middleware))
    found = app.__dict__.get("_direct")
    if found is None or found[0] != key:
        own = getattr(app.state, "own_middleware", None)
        served = own is not None and tuple(m.cls for m in app.user_middleware) == own
        routes = _publish_routes(app.routes)
        served = served and len(routes) == 1
        found = app.__dict__["_direct"] = (key, DirectPublish(app, routes[0]) if served else None)
    steps: DirectPublish | None = found[1]
    return steps


def native_telemetry(app: FastAPI) -> bool:
    """Whether FastAPI's own telemetry is on (then publishes go the ASGI way, through it)."""
    telemetry = getattr(app, "_native_telemetry", None)
    return telemetry is not None and bool(telemetry.enabled())


class PublishRouteConflict(RuntimeError):
    """The app's publish route needs something the direct way would skip."""


def check_publish_route(app: FastAPI) -> None:
    """Refuse (:class:`PublishRouteConflict`) an app whose publish route the direct way would not serve as
    the router does: the direct way takes the publish steps directly, so a dependency or a parameter added
    to the route (or to the app or router it is included with) would be skipped."""
    routes = _publish_routes(app.routes)
    problems = [] if len(routes) == 1 else [f"{len(routes)} routes serve it, not one"]
    for route in routes:
        if route.endpoint is not publish_messages:
            problems.append(f"its endpoint is {route.endpoint.__qualname__}, not publish_messages")
        found = route.dependant
        problems += [f"dependency {_name(sub.call)}" for sub in found.dependencies]
        params = (*found.query_params, *found.header_params, *found.cookie_params, *found.body_params)
        params += tuple(p for p in found.path_params if p.name != "topic")
        problems += [f"parameter {p.name}" for p in params]
    if problems:
        raise PublishRouteConflict(
            f"POST {publish_steps.PUBLISH_PATH} has what gateway/api/direct_publish.py would skip: "
            f"{'; '.join(problems)}. Do that work in a step of gateway/api/publish_steps.py"
        )


def _publish_routes(routes: Iterable[Any]) -> list[Any]:
    """The routes (as served: with the dependencies of the app and routers they are included with) that
    answer ``POST PUBLISH_PATH``. FastAPI 0.165 keeps an included router as one lazy entry whose
    ``effective_candidates()`` are those routes; earlier versions copied each route into the app."""
    found: list[Any] = []
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)
        if candidates is not None:
            found += _publish_routes(candidates())
        elif getattr(route, "path", None) == publish_steps.PUBLISH_PATH and "POST" in (
            getattr(route, "methods", None) or ()
        ):
            found.append(route)
    return found


def _name(call: Any) -> str:
    return str(getattr(call, "__qualname__", None) or repr(call))


class DirectPublish:
    """The direct way of one app (see the module docstring): what its middlewares were built from."""

    def __init__(self, app: FastAPI, route: Any) -> None:
        state = app.state
        self._runtime: Runtime = state.runtime
        settings = self._runtime.settings
        self._proxies = TrustedProxies(settings.http.trusted_proxies)
        self._cors = cors_headers(settings.cors)
        self._traced: bool = state.traced
        self._access: AccessLog = state.access_log
        self._metrics: GatewayMetrics = state.metrics
        self._route = route  # what the router puts in the scope (the metrics and the access line read it)

    def max_body(self) -> int:
        """The largest body a publish may declare (larger ones go the ASGI way: answered 413 there)."""
        return self._runtime.settings.limits.max_request_bytes

    async def serve(self, request: DirectRequest, topic: str) -> None:
        """Answer the publish ``request`` (to ``topic``) as the app's middlewares and route would: a request
        the HTTP protocol read (``gateway/api/direct_protocol.py``)."""
        await self._serve(request, topic)

    async def serve_asgi(self, request: DirectRequest, topic: str) -> None:
        """:meth:`serve` for a publish that entered the app through ASGI (``gateway/api/gateway_app.py``)."""
        await self._serve(request, topic)

    async def _serve(self, request: DirectRequest, topic: str) -> None:
        scope = request.scope
        await self._proxies.rewrite(scope)
        state = _State()
        if self._traced and tracing.enabled():
            method = scope["method"]
            with tracing.server_span(method, carrier_of(scope), {"http.request.method": method}) as span:
                try:
                    await self._with_id(request, topic, state)
                finally:
                    finish_span(span, scope, state.traced)
            return
        await self._with_id(request, topic, state)

    async def _with_id(self, request: DirectRequest, topic: str, state: _State) -> None:
        """The request id and the access line around the rest; an error answered 500 naming the id."""
        scope = request.scope
        request_id = request_id_of(scope)
        token = bind(request_id)
        started = time.perf_counter()
        try:
            await self._counted(request, topic, state, request_id)
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
            self._access.log_request(scope, state.logged, time.perf_counter() - started)
            unbind(token)

    async def _counted(self, request: DirectRequest, topic: str, state: _State, request_id: str) -> None:
        """The HTTP metrics around steps 1 and 2 (authentication, then admission) and the rest."""
        scope = request.scope
        runtime = self._runtime
        started = time.perf_counter()
        self._metrics.http_in_flight.inc()
        try:
            try:
                principal = await publish_steps.authenticate(
                    scope, runtime.security, runtime.replica_subjects
                )
            except ServiceError as exc:
                await self._answer(request, state, request_id, *error_answer(exc))
                return
            token = enter_caller(principal, caller_address(scope))
            try:
                await self._admitted(request, topic, state, request_id)
            finally:
                leave_caller(token)
        finally:
            request_finished(self._metrics, scope, state.counted, request.client_gone, started)

    async def _admitted(self, request: DirectRequest, topic: str, state: _State, request_id: str) -> None:
        """Step 2, then the publish's answer (steps 3 to 6), or the refusal of its body reader."""
        scope = request.scope
        runtime = self._runtime
        admitted = publish_steps.admit(scope, request.receive, runtime.settings.limits, runtime.admission)
        if isinstance(admitted, Refused):
            await self._answer(request, state, request_id, *admitted.answer())
            return
        reader = admitted
        scope["route"] = self._route
        scope["endpoint"] = publish_messages
        scope["path_params"] = {"topic": topic}
        try:
            answer = await publish_steps.respond(topic, scope, reader.receive, runtime)
            if reader.refusal is None:
                await self._answer(request, state, request_id, *answer)
        except Exception:
            if reader.refusal is None:
                raise
        finally:
            publish_steps.leave(reader)
        if reader.refusal is not None and not reader.refused and not state.started:
            reader.refused = True
            await self._answer(request, state, request_id, *reader.refusal.answer())

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

    async def _emit(
        self, request: DirectRequest, state: _State, status: int, headers: Headers_, body: bytes
    ) -> None:
        """The answer from the request-id step outwards: tracing's status, gzip, CORS, the write."""
        state.traced = status
        scope = request.scope
        settings = self._runtime.settings.compression
        if settings.enabled and compressible(headers):
            headers, body = gzip_answer(settings, scope, headers, body)
        if self._cors is not None:
            headers = await self._cors(scope, headers)
        await request.respond(status, headers, body)
