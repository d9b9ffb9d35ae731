"""The publish route's short way through the app (issue #13).

``POST /v1/topics/{topic}/messages`` is the request the gateway serves most. Through FastAPI it passes the
exception middleware, the exit-stack middleware, the router's matching of every route, the route's
request/response wrapper and dependency solving before the endpoint runs: about a sixth of the gateway's CPU
on a one-message publish (py-spy). :class:`HotPathMiddleware`, the innermost middleware (inside
authentication, request limits, metrics and request ids, which all still apply), calls that same endpoint
directly and answers its exceptions with the app's own exception handlers, looked up as Starlette's
exception middleware looks them up. Every other request goes on to the app unchanged.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.routes_topics import publish_messages, router

__all__ = ["PUBLISH_PATH", "HotPathMiddleware"]

#: The publish route's path template; ``{topic}`` matches as Starlette's ``str`` convertor does.
PUBLISH_PATH = "/v1/topics/{topic}/messages"
_PUBLISH = re.compile(r"/v1/topics/(?P<topic>[^/]+)/messages")


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
        route = self._route or self._setup()
        topic = match["topic"]
        # What the router would have put in the scope for this route (the metrics and the access log
        # read the route template from it).
        scope["route"] = route
        scope["endpoint"] = publish_messages
        scope["path_params"] = {"topic": topic}
        request = Request(scope, receive)
        try:
            response = await publish_messages(topic, request)
        except Exception as exc:
            handler = _handler_for(self._handlers, exc)
            if handler is None:
                raise
            answer = handler(request, exc)
            response = await answer if inspect.isawaitable(answer) else answer
        await response(scope, receive, send)

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
