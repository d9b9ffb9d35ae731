"""The publish route's short way through the app.

``POST /v1/topics/{topic}/messages`` is the request the gateway serves most. Through FastAPI it passes the
exception middleware, the exit-stack middleware, the router's matching of every route, the route's
request/response wrapper and dependency solving before the endpoint runs: about a sixth of the gateway's CPU
on a one-message publish (py-spy). :class:`HotPathMiddleware`, the innermost middleware (inside
authentication, request limits, metrics and request ids, which all still apply), calls that same endpoint
directly and answers its exceptions with the app's own exception handlers, looked up as Starlette's
exception middleware looks them up. A 200 is sent as two ASGI messages built here (the headers Starlette's
Response would send), without a Response object. Every other request goes on to the app unchanged.

:class:`GatewayApp` (the app class ``create_app`` builds) lets a publish request enter the middleware stack
at the first of the app's own middlewares, past the three layers FastAPI and Starlette put outside them
(server errors, exception telemetry, body limit), none of which has work on a publish: an error is answered
by the request-id middleware, inside (``gateway/observability/logging.py``), and the body is limited by
``RequestLimitsMiddleware``. FastAPI's own telemetry, a root path, or a stack without the expected layers
send the request the long way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.auth import Answer
from gateway.api.routes_topics import publish_answer, publish_messages, router

__all__ = [
    "PUBLISH_PATH",
    "GatewayApp",
    "HotPathConflict",
    "HotPathMiddleware",
    "check_publish_route",
    "native_telemetry",
]

#: The publish route's path template; ``{topic}`` matches as Starlette's ``str`` convertor does.
PUBLISH_PATH = "/v1/topics/{topic}/messages"
_PUBLISH = re.compile(r"/v1/topics/(?P<topic>[^/]+)/messages")
_JSON_TYPE = (b"content-type", b"application/json")


class GatewayApp(FastAPI):
    """FastAPI with a shorter way in for publish requests (see the module docstring)."""

    _entry_of: ASGIApp | None = None  # the middleware stack the entry below was found in
    _entry: ASGIApp | None = None  # the app's outermost own middleware in that stack, if found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and not self.root_path
            and not scope.get("root_path")
            and _PUBLISH.fullmatch(scope["path"]) is not None
            and not native_telemetry(self)
        ):
            entry = self.entry()
            if entry is not None:
                scope["app"] = self  # as Starlette.__call__ sets it
                await entry(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def entry(self) -> ASGIApp | None:
        """The app's outermost own middleware in its (built) middleware stack, if found there."""
        stack = self.middleware_stack
        if stack is None:
            stack = self.middleware_stack = self.build_middleware_stack()
        if stack is not self._entry_of:
            self._entry_of, self._entry = stack, _own_outermost(self, stack)
        return self._entry


class HotPathConflict(RuntimeError):
    """The app's publish route needs something the hot path would skip."""


def check_publish_route(app: FastAPI) -> None:
    """Refuse (:class:`HotPathConflict`) an app whose publish route the hot path would not serve as the
    router does: the hot path calls ``publish_answer(topic, request)`` directly, so a dependency or a
    parameter added to the route (or to the app or router it is included with) would be skipped."""
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
        raise HotPathConflict(
            f"POST {PUBLISH_PATH} has what gateway/api/hot_path.py would skip: {'; '.join(problems)}. "
            "Do that work inside publish_answer (gateway/api/routes_topics.py), or take "
            "HotPathMiddleware out of create_app"
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
        elif getattr(route, "path", None) == PUBLISH_PATH and "POST" in (
            getattr(route, "methods", None) or ()
        ):
            found.append(route)
    return found


def _name(call: Any) -> str:
    return str(getattr(call, "__qualname__", None) or repr(call))


def native_telemetry(app: FastAPI) -> bool:
    """Whether FastAPI's own telemetry is on (then publishes go the long way, through it)."""
    telemetry = getattr(app, "_native_telemetry", None)
    return telemetry is not None and bool(telemetry.enabled())


def _own_outermost(app: FastAPI, stack: ASGIApp) -> ASGIApp | None:
    """The instance of the app's first (outermost) user middleware in ``stack``, found by following the
    wrappers' ``app`` attributes through the few layers the framework puts outside it; None if absent."""
    if not app.user_middleware:
        return None
    first: Any = app.user_middleware[0].cls
    node: Any = stack
    for _ in range(8):
        if type(node) is first:
            return cast(ASGIApp, node)
        node = getattr(node, "app", None)
        if node is None:
            return None
    return None


class HotPathMiddleware:
    """See the module docstring. ``fastapi`` returns the app whose routes and exception handlers apply
    (read once, at the first publish)."""

    def __init__(self, app: ASGIApp, *, fastapi: Callable[[], FastAPI]) -> None:
        self.app = app
        self._fastapi = fastapi
        self._route: APIRoute | None = None
        self._handlers: dict[Any, Any] = {}

    def _setup(self) -> APIRoute:
        app = self._fastapi()
        route = next(r for r in router.routes if isinstance(r, APIRoute) and r.endpoint is publish_messages)
        # Starlette's exception middleware gets every handler but the one of Exception/500, which its
        # server-error middleware (outside every other middleware) runs.
        self._handlers = {k: v for k, v in app.exception_handlers.items() if k not in (500, Exception)}
        self._route = route
        return route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        match = _PUBLISH.fullmatch(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        status, headers, body = await self.answer(scope, receive, match["topic"])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def answer(self, scope: Scope, receive: Receive, topic: str) -> Answer:
        """The publish endpoint's answer to the request of ``scope`` (a publish to ``topic``), its
        exceptions answered by the app's handlers; an exception no handler takes is raised. The step the
        publish answered below ASGI takes too (``gateway/api/direct_publish.py``)."""
        route = self._route or self._setup()
        # What the router would have put in the scope for this route (the metrics and the access log
        # read the route template from it).
        scope["route"] = route
        scope["endpoint"] = publish_messages
        scope["path_params"] = {"topic": topic}
        request = Request(scope, receive)
        try:
            answer = await publish_answer(topic, request)
        except Exception as exc:
            handler = _handler_for(self._handlers, exc)
            if handler is None:
                raise
            handled = handler(request, exc)
            answer = await handled if inspect.isawaitable(handled) else handled
        if isinstance(answer, bytes):
            # What Response(answer, media_type="application/json") sends, in the same header order.
            return 200, [(b"content-length", str(len(answer)).encode("latin-1")), _JSON_TYPE], answer
        # The app's responses here are whole JSON documents (JSONResponse): what they send is this.
        return answer.status_code, answer.raw_headers, bytes(answer.body)

    def __repr__(self) -> str:
        return f"<HotPathMiddleware {PUBLISH_PATH}>"


def _handler_for(handlers: Mapping[Any, Any], exc: Exception) -> Any:
    """The handler Starlette's exception middleware would pick: by status for an HTTPException, else the
    nearest class in the exception's MRO."""
    if isinstance(exc, HTTPException):
        handler = handlers.get(exc.status_code)
        if handler is not None:
            return handler
    for cls in type(exc).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            return handler
    return None
