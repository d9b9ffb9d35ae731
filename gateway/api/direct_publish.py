"""The publish answered below ASGI: the usual ``POST /v1/topics/{topic}/messages``, a batch of any size
with a ``Content-Length`` body, without ASGI messages, send wrappers or uvicorn's request cycle.

The httptools protocol (``gateway/api/direct_protocol.py``) hands such a request here (a
:class:`~gateway.api.direct_steps.DirectRequest`) instead of building an ASGI scope and a request cycle for
it, and so does the app's ASGI entry (``gateway/api/gateway_app.py``). :meth:`DirectPublish.serve` takes
what the app's middlewares do to every request (:class:`~gateway.api.direct_steps.DirectSteps`) around the
publish's own steps (:mod:`gateway.api.publish_steps`): authentication for the publish operation
(:func:`~gateway.api.publish_steps.authenticate`), then the answer
(:func:`~gateway.api.publish_steps.respond`).

The way serves an app only while its middlewares are the ones ``create_app`` installed
(``gateway/api/direct_ways.py``), and only while the publish route is the plain one
(:func:`check_publish_route`): a dependency added to it would be skipped here.
``tests/api/test_direct_publish.py`` holds the two ways byte for byte alike over real sockets.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope

from gateway.api import publish_steps
from gateway.api.auth import Answer
from gateway.api.direct_steps import DirectRequest, DirectSteps, call_name, served_routes
from gateway.api.routes_topics import publish_messages
from gateway.service.principal import Principal

__all__ = ["DirectPublish", "PublishRouteConflict", "check_publish_route", "publish_routes"]


class PublishRouteConflict(RuntimeError):
    """The app's publish route needs something the direct way would skip."""


def publish_routes(app: FastAPI) -> list[Any]:
    """The routes (as served) that answer ``POST PUBLISH_PATH``."""
    return served_routes(app.routes, "POST", publish_steps.PUBLISH_PATH)


def check_publish_route(app: FastAPI) -> None:
    """Refuse (:class:`PublishRouteConflict`) an app whose publish route the direct way would not serve as
    the router does: the direct way takes the publish steps directly, so a dependency or a parameter added
    to the route (or to the app or router it is included with) would be skipped."""
    routes = publish_routes(app)
    problems = [] if len(routes) == 1 else [f"{len(routes)} routes serve it, not one"]
    for route in routes:
        if route.endpoint is not publish_messages:
            problems.append(f"its endpoint is {route.endpoint.__qualname__}, not publish_messages")
        found = route.dependant
        problems += [f"dependency {call_name(sub.call)}" for sub in found.dependencies]
        params = (*found.query_params, *found.header_params, *found.cookie_params, *found.body_params)
        params += tuple(p for p in found.path_params if p.name != "topic")
        problems += [f"parameter {p.name}" for p in params]
    if problems:
        raise PublishRouteConflict(
            f"POST {publish_steps.PUBLISH_PATH} has what gateway/api/direct_publish.py would skip: "
            f"{'; '.join(problems)}. Do that work in a step of gateway/api/publish_steps.py"
        )


class DirectPublish:
    """The direct way of one app's publish (see the module docstring)."""

    endpoint = staticmethod(publish_messages)

    def __init__(self, steps: DirectSteps, route: Any) -> None:
        self._steps = steps
        self._runtime = steps.runtime
        self.route = route  # what the router puts in the scope (the metrics and the access line read it)

    def max_body(self) -> int:
        """The largest body a publish may declare (larger ones go the ASGI way: answered 413 there)."""
        return self._runtime.settings.limits.max_request_bytes

    async def authenticate(self, scope: Scope) -> Principal:
        runtime = self._runtime
        return await publish_steps.authenticate(scope, runtime.security, runtime.replica_subjects)

    async def serve(self, request: DirectRequest, topic: str) -> None:
        """Answer the publish ``request`` (to ``topic``) as the app's middlewares and route would: a request
        the HTTP protocol read (``gateway/api/direct_protocol.py``)."""
        await self._serve(request, topic)

    async def serve_asgi(self, request: DirectRequest, topic: str) -> None:
        """:meth:`serve` for a publish that entered the app through ASGI (``gateway/api/gateway_app.py``)."""
        await self._serve(request, topic)

    async def _serve(self, request: DirectRequest, topic: str) -> None:
        scope = request.scope
        runtime = self._runtime

        async def respond(receive: Receive) -> Answer:
            return await publish_steps.respond(topic, scope, receive, runtime)

        await self._steps.serve(request, self, {"topic": topic}, respond)
