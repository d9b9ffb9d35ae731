"""The poll answered below ASGI: the usual ``GET /v1/consumers/{group}/instances/{instance_id}/messages``,
without ASGI messages, send wrappers, uvicorn's request cycle or FastAPI's parameter and dependency handling.

The httptools protocol (``gateway/api/direct_protocol.py``) hands such a request here instead of building
an ASGI scope and a request cycle for it, once :func:`parse_poll_query` has read its query as the route
would; a query it does not read (a parameter out of its bounds or not a plain number, a repeated parameter,
a percent-encoded or ``+`` character, a byte outside ASCII) goes the ASGI way, whose route answers it (400
naming the field, or whatever FastAPI makes of it). :meth:`DirectPoll.serve` takes what the app's
middlewares do to every request (:class:`~gateway.api.direct_steps.DirectSteps`) around the route's own
work, :func:`gateway.api.consumer_messages.answer_poll` (served here or forwarded to the owner, rendered),
with the connection's loss as the client going away; a service error is answered as the app's exception
handler answers it (:func:`gateway.api.errors.error_response`).

The way serves an app only while the poll route is the plain one (:func:`check_poll_route`: the endpoint,
its dependencies, and the query parameters with the names, types, defaults and bounds read here), and only
while the app's middlewares are its own (``gateway/api/direct_ways.py``).
``tests/api/test_direct_poll.py`` holds the two ways byte for byte alike over real sockets.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol, cast, get_args

from annotated_types import Ge
from fastapi import FastAPI, Request
from starlette.routing import Match
from starlette.types import Receive, Scope

from gateway.api import auth
from gateway.api.auth import Answer
from gateway.api.consumer_deps import get_consumers, get_forwarder
from gateway.api.consumer_messages import PollQuery, answer_poll, poll_messages
from gateway.api.consumer_schemas import ValueFormat
from gateway.api.direct_steps import DirectRequest, DirectSteps, app_routes, call_name, served_routes
from gateway.api.errors import error_response
from gateway.security.operations import Operation, rest_operation
from gateway.service.errors import ServiceError
from gateway.service.principal import Principal

__all__ = [
    "POLL_PATH",
    "POLL_PATTERN",
    "DirectPoll",
    "PollRequest",
    "PollRouteConflict",
    "check_poll_route",
    "parse_poll_query",
    "poll_route_problems",
    "poll_routes",
]

#: the poll route's path template, and its operation (``gateway/security/operations.py``)
POLL_PATH = "/v1/consumers/{group}/instances/{instance_id}/messages"
POLL_OPERATION_ID = "pollMessages"
#: the path; ``{group}`` and ``{instance_id}`` match as Starlette's ``str`` convertor does
POLL_PATTERN = re.compile(
    re.escape(POLL_PATH)
    .replace(r"\{group\}", "(?P<group>[^/]+)")
    .replace(r"\{instance_id\}", "(?P<instance_id>[^/]+)")
)
_OPERATION = rest_operation(POLL_OPERATION_ID)
_OPERATIONS: dict[str, Operation] = {"GET": _OPERATION, "HEAD": _OPERATION}

#: the route's integer query parameters and their lower bounds (its ``ge``)
BOUNDS: dict[str, int] = {"max_messages": 1, "max_bytes": 1, "timeout_ms": 0}
#: the values ``format`` takes (the route's ``ValueFormat``)
FORMATS: tuple[str, ...] = get_args(get_args(cast(Any, ValueFormat).__value__)[0])
_NAMES = {name.encode(): name for name in (*BOUNDS, "format")}
_FORMAT_VALUES = {value.encode(): value for value in FORMATS}
#: longer numbers go the ASGI way (what FastAPI makes of them is its own business)
_MAX_DIGITS = 15


def parse_poll_query(query: bytes) -> PollQuery | None:
    """The poll's parameters in ``query`` as the route reads them (names are case-sensitive, others are
    ignored); None for a query read only by the ASGI way (see the module docstring)."""
    if not query:
        return PollQuery()
    if not query.isascii() or b"%" in query or b"+" in query:
        return None
    found: dict[str, Any] = {}
    for piece in query.split(b"&"):
        raw_name, _, raw_value = piece.partition(b"=")
        name = _NAMES.get(raw_name)
        if name is None:
            continue  # an empty piece, or a parameter the route does not take
        if name in found:
            return None
        if name == "format":
            value: Any = _FORMAT_VALUES.get(raw_value)
            if value is None:
                return None
        else:
            if not raw_value.isdigit() or len(raw_value) > _MAX_DIGITS:
                return None
            value = int(raw_value)
            if value < BOUNDS[name]:
                return None
        found[name] = value
    return PollQuery(**found)


class PollRouteConflict(RuntimeError):
    """The app's poll route takes something the direct way would not read as it does."""


def poll_routes(app: FastAPI) -> list[Any]:
    """The routes (as served) that answer ``GET POLL_PATH``."""
    return served_routes(app.routes, "GET", POLL_PATH)


def poll_route_problems(app: FastAPI) -> list[str]:
    """What the app's poll route has that the direct way would not serve as the router does (empty: none):
    another endpoint, a dependency, a parameter, or one the direct way reads otherwise; or another route
    that answers a poll's path first."""
    routes = poll_routes(app)
    problems = [] if len(routes) == 1 else [f"{len(routes)} routes serve it, not one"]
    for route in routes:
        if route.endpoint is not poll_messages:
            problems.append(f"its endpoint is {route.endpoint.__qualname__}, not poll_messages")
        found = route.dependant
        calls = [sub.call for sub in found.dependencies]
        problems += [
            f"dependency {call_name(call)}" for call in calls if call not in (get_consumers, get_forwarder)
        ]
        params = (*found.header_params, *found.cookie_params, *found.body_params)
        params += tuple(p for p in found.path_params if p.name not in ("group", "instance_id"))
        problems += [f"parameter {p.name}" for p in params]
        query = {p.name: p for p in found.query_params}
        if sorted(query) != sorted((*BOUNDS, "format")):
            problems.append(f"query parameters {sorted(query)}, not {sorted((*BOUNDS, 'format'))}")
        for name, bound in BOUNDS.items():
            param = query.get(name)
            if param is not None and (
                param.field_info.annotation != int | None
                or param.field_info.default is not None
                or [m.ge for m in param.field_info.metadata if isinstance(m, Ge)] != [bound]
                or param.alias != name
            ):
                problems.append(f"query parameter {name} is not an optional integer of at least {bound}")
        shown = query.get("format")
        if shown is not None and (
            shown.field_info.annotation is not ValueFormat
            or shown.field_info.default != PollQuery().format
            or shown.alias != "format"
        ):
            problems.append("query parameter format is not a ValueFormat defaulting to base64")
    first = _first_route(app, "/v1/consumers/g/instances/i/messages")
    if routes and first is not routes[0]:
        problems.append(f"the route first answering a poll is {getattr(first, 'path', first)!r}")
    return problems


def check_poll_route(app: FastAPI) -> None:
    """Refuse (:class:`PollRouteConflict`) an app whose poll route the direct way would not serve as the
    router does (:func:`poll_route_problems`)."""
    problems = poll_route_problems(app)
    if problems:
        raise PollRouteConflict(
            f"GET {POLL_PATH} has what gateway/api/direct_poll.py would not serve as the router does: "
            f"{'; '.join(problems)}. Change gateway/api/direct_poll.py with the route"
        )


def _first_route(app: FastAPI, path: str) -> Any:
    """The route the router would answer ``GET path`` with."""
    scope = {"type": "http", "method": "GET", "path": path, "root_path": ""}
    for route in app_routes(app.routes):
        if route.matches(scope)[0] is Match.FULL:
            return route
    return None


def _operations(path: str) -> dict[str, Operation]:
    return _OPERATIONS


class PollRequest(DirectRequest, Protocol):
    """A request answered directly that can tell when its client goes away."""

    def lost(self) -> asyncio.Future[None]:
        """A future the connection resolves when the client goes away."""
        ...


class DirectPoll:
    """The direct way of one app's poll (see the module docstring)."""

    endpoint = staticmethod(poll_messages)

    def __init__(self, steps: DirectSteps, route: Any) -> None:
        self._steps = steps
        self._runtime = steps.runtime
        self.route = route  # what the router puts in the scope (the metrics and the access line read it)

    async def authenticate(self, scope: Scope) -> Principal:
        runtime = self._runtime
        return await auth.authenticate(scope, runtime.security, _operations, lambda: runtime.replica_subjects)

    async def serve(self, request: PollRequest, group: str, instance_id: str, query: PollQuery) -> None:
        """Answer the poll ``request`` as the app's middlewares and route would."""
        scope = request.scope

        async def respond(receive: Receive) -> Answer:
            http_request = Request(scope, receive)
            service = self._runtime.consumer_service()
            forwarder = await get_forwarder(http_request)
            try:
                answer = await answer_poll(
                    group, instance_id, query, http_request, service, forwarder, request.lost()
                )
            except ServiceError as exc:
                answer = error_response(exc)
            return answer.status_code, answer.raw_headers, bytes(answer.body)

        await self._steps.serve(request, self, {"group": group, "instance_id": instance_id}, respond)
