"""The poll's direct way and its route agree: the query is read as FastAPI reads the route's parameters
(checked against FastAPI itself, for any query), the route is the plain one the direct way serves (a
dependency, a parameter or a bound changed on it refuses the app), and the operation authentication finds is
the route's."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.dependencies.utils import request_params_to_args
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import QueryParams

from gateway.api import direct_poll
from gateway.api.app import create_app
from gateway.api.auth import AuthMiddleware
from gateway.api.consumer_deps import ConsumersDep, ForwarderDep, InstanceId
from gateway.api.consumer_messages import PollQuery, poll_messages
from gateway.api.direct_poll import (
    POLL_PATH,
    PollRouteConflict,
    check_poll_route,
    parse_poll_query,
    poll_route_problems,
    poll_routes,
)
from gateway.api.direct_ways import direct_ways_of
from gateway.config import Settings
from gateway.runtime import Runtime


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(runtime=Runtime(Settings()))


def _routed(app: FastAPI, query: bytes) -> tuple[dict[str, Any], list[Any]]:
    """What FastAPI makes of ``query`` for the poll route: its parameters' values, and its errors."""
    route = poll_routes(app)[0]
    values, errors = request_params_to_args(route.dependant.query_params, QueryParams(query))
    return values, errors


_PIECES = st.sampled_from(
    [
        "max_messages",
        "max_bytes",
        "timeout_ms",
        "format",
        "Format",
        "other",
        "",
        "=",
        "&",
        "0",
        "1",
        "7",
        "10",
        "-1",
        "+",
        "%31",
        "%",
        " ",
        "utf8",
        "base64",
        "json",
        "UTF8",
        "1.0",
        "1_0",
        "9" * 16,
        "\u00e9",
        ";",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_the_query_is_read_as_fastapi_reads_it(app: FastAPI, query: str) -> None:
    raw = query.encode("utf-8")
    parsed = parse_poll_query(raw)
    if parsed is None:
        return  # the ASGI way's route reads it
    values, errors = _routed(app, raw)
    assert errors == [], query
    assert PollQuery(**values) == parsed, query


def test_the_usual_queries_take_the_direct_way(app: FastAPI) -> None:
    for query in (
        b"",
        b"timeout_ms=30000",
        b"max_messages=1000&timeout_ms=0&format=json",
        b"max_bytes=1&x=1",
    ):
        parsed = parse_poll_query(query)
        assert parsed is not None, query
        assert PollQuery(**_routed(app, query)[0]) == parsed
    for query in (b"max_messages=0", b"timeout_ms=1&timeout_ms=1", b"format=%75tf8", b"timeout_ms=+1"):
        assert parse_poll_query(query) is None, query


def test_the_app_serves_its_poll_the_direct_way(app: FastAPI) -> None:
    assert poll_route_problems(app) == []
    assert direct_ways_of(app).poll is not None
    off = create_app(runtime=Runtime(Settings(http={"direct_poll": False})))
    assert direct_ways_of(off).poll is None and direct_ways_of(off).publish is not None


def test_authentication_finds_the_routes_operation(app: FastAPI) -> None:
    middleware = AuthMiddleware(app, security=lambda: app.state.runtime.security, fastapi=lambda: app)
    found = middleware._methods("/v1/consumers/g/instances/i.d.x/messages")
    assert found is not None
    assert found["GET"] == direct_poll._operations("/v1/consumers/g/instances/i.d.x/messages")["GET"]


def _needs_a_caller() -> str:
    return "caller"


async def _poll_with(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    max_messages: Annotated[int | None, Query(ge=1)] = None,
    max_bytes: Annotated[int | None, Query(ge=2)] = None,  # a bound the direct way does not read
    timeout_ms: Annotated[int | None, Query(ge=0)] = None,
    format: Annotated[str, Query()] = "base64",
    tenant: Annotated[str | None, Query()] = None,
) -> Any:
    return None


def test_a_route_the_direct_way_would_read_otherwise_refuses_the_app() -> None:
    app = FastAPI()
    router = APIRouter(dependencies=[Depends(_needs_a_caller)])
    router.add_api_route(POLL_PATH, _poll_with, methods=["GET"])
    app.include_router(router)
    problems = "; ".join(poll_route_problems(app))
    for expected in (
        "its endpoint is",
        "dependency _needs_a_caller",
        "query parameters",
        "max_bytes is not an optional integer of at least 1",
        "format is not a ValueFormat",
    ):
        assert expected in problems, problems
    with pytest.raises(PollRouteConflict, match="GET /v1/consumers"):
        check_poll_route(app)
    with pytest.raises(PollRouteConflict, match="0 routes serve it"):
        check_poll_route(FastAPI())


def test_a_route_answering_the_poll_path_first_refuses_the_app() -> None:
    app = FastAPI()
    app.add_api_route("/v1/consumers/{group}/instances/{rest:path}", _poll_with, methods=["GET"])
    app.add_api_route(POLL_PATH, poll_messages, methods=["GET"])
    assert any("the route first answering a poll" in p for p in poll_route_problems(app))
