"""The framework internals the gateway relies on, checked on the installed fastapi, starlette and uvicorn.

``gateway/api/direct_publish.py`` reads a FastAPI app's middleware list, telemetry switch and publish route
and serves that route without FastAPI's router; ``gateway/api/http_guard.py``, ``declined_upgrade.py`` and
``tls_scope.py`` subclass uvicorn's httptools protocol, override ``on_response_complete`` and
``data_received`` with copies of uvicorn's own, and call its private methods; ``direct_protocol.py`` answers
a publish in place of uvicorn's request cycle, writing the answer as the cycle does. pyproject.toml caps those
three below the next release nobody has checked; raising a cap means running this file on the new release.
Each failure names the missing attribute, the changed signature, or the function whose code changed (a
fingerprint of its syntax tree, so formatting alone does not count) and what to re-read.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware as UvicornProxyHeaders
from uvicorn.protocols.http import flow_control, httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gateway.api import app as app_module
from gateway.api.app import create_app
from gateway.api.direct_publish import PublishRouteConflict, check_publish_route
from gateway.api.gateway_app import GatewayApp
from gateway.api.publish_steps import PUBLISH_PATH
from gateway.api.routes_topics import publish_messages, router
from gateway.config import Settings

# uvicorn's httptools protocol: every method the gateway overrides, mixes in or calls, with its parameters.
PROTOCOL_METHODS: dict[str, list[str]] = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_header": ["self", "name", "value"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
    "send_400_response": ["self", "msg"],
    "shutdown": ["self"],
    "on_response_complete": ["self"],
    "handle_websocket_upgrade": ["self"],
    "_unset_keepalive_if_required": ["self"],
    "_start_asgi_task": ["self", "cycle", "app"],
    "_should_upgrade": ["self"],
    "on_message_begin": ["self"],
    "on_body": ["self", "body"],
}
# ... the attributes its instances carry that the gateway reads or replaces
PROTOCOL_ATTRIBUTES = (
    "app",
    "cycle",
    "flow",
    "headers",
    "logger",
    "loop",
    "parser",
    "pipeline",
    "scope",
    "server_state",
    "timeout_keep_alive",
    "transport",
    # gateway/api/direct_protocol.py
    "url",
    "expect_100_continue",
    "limit_concurrency",
    "root_path",
    "config",
    "tasks",
    "client",
    "server",
    "scheme",
)
CYCLE_ATTRIBUTES = (
    "scope",
    "transport",
    "more_body",
    "disconnected",
    # what gateway/api/direct_protocol.py's DirectExchange stands in for
    "body",
    "response_complete",
    "keep_alive",
    "message_event",
)
_DIRECT = "gateway/api/direct_protocol.py"

# Code the gateway repeats or depends on the exact behaviour of: (function, what to re-read, fingerprint).
FINGERPRINTS: list[tuple[Callable[..., Any], str, str]] = [
    (
        HttpToolsProtocol.on_response_complete,
        "gateway/api/http_guard.py overrides it with a copy bounded by its own timer",
        "8a769d10c29642ff",
    ),
    (
        HttpToolsProtocol.data_received,
        "gateway/api/declined_upgrade.py replaces it (the same, but for an upgrade offer)",
        "acbe954a13ed6566",
    ),
    (
        RequestResponseCycle.send,
        f"{_DIRECT} DirectExchange.respond writes an answer as it does (status line, default headers, close)",
        "56ed65c2dbfbab57",
    ),
    (
        RequestResponseCycle.receive,
        f"{_DIRECT} DirectExchange.receive gives the body as it does",
        "34f316bf4d515351",
    ),
    (
        RequestResponseCycle.run_asgi,
        f"{_DIRECT} _serve repeats its handling of a failed app",
        "4eb1612586e8f0c9",
    ),
    (
        HttpToolsProtocol.on_message_begin,
        f"{_DIRECT} builds this scope at the end of the head, for requests that go the ASGI way",
        "4294ff927d3acca1",
    ),
    (
        HttpToolsProtocol.on_headers_complete,
        f"{_DIRECT} _direct repeats its keep-alive, pipelining and limit_concurrency rules",
        "ecff2e577ea27e2b",
    ),
    (HttpToolsProtocol._start_asgi_task, f"{_DIRECT} starts its task as this does", "88ea2ed9715075b6"),
    (
        HttpToolsProtocol.on_body,
        f"{_DIRECT} DirectExchange has the cycle attributes it uses",
        "54275cb9f3e46b0a",
    ),
    (
        HttpToolsProtocol.on_message_complete,
        f"{_DIRECT} DirectExchange has the cycle attributes it uses",
        "2c5bf60e45208bd7",
    ),
    (
        HttpToolsProtocol.connection_lost,
        f"{_DIRECT} DirectExchange has the cycle attributes it uses",
        "57f91eb8d08c0749",
    ),
    (
        HttpToolsProtocol.shutdown,
        f"{_DIRECT} DirectExchange has the cycle attributes it uses",
        "54f6bb3a398194f7",
    ),
    (
        CORSMiddleware.send,
        "gateway/api/cors.py cors_headers calls it for an answer's start message, reads the headers it set",
        "9dd1afa23677335f",
    ),
    (
        Starlette.__call__,
        "gateway/api/gateway_app.py GatewayApp.__call__ sets scope['app'] as it does before the direct way",
        "bc6096f71a2181f5",
    ),
    (
        UvicornProxyHeaders.__call__,
        "gateway/api/proxy.py TrustedProxies.rewrite runs it over an app that does nothing",
        "29aca4cd99b5c535",
    ),
]


def _versions() -> str:
    return ", ".join(f"{name} {version(name)}" for name in ("fastapi", "starlette", "uvicorn"))


def _assigned_attributes(cls: type) -> set[str]:
    """Every ``self.NAME = ...`` in the source of ``cls`` and of its bases."""
    names: set[str] = set()
    for klass in cls.__mro__[:-1]:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for target in targets:
                value = target.value if isinstance(target, ast.Attribute) else None
                if isinstance(target, ast.Attribute) and isinstance(value, ast.Name) and value.id == "self":
                    names.add(target.attr)
    return names


def fingerprint(function: Callable[..., Any]) -> str:
    source = textwrap.dedent(inspect.getsource(function))
    return hashlib.sha256(ast.dump(ast.parse(source)).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PROTOCOL_METHODS))
def test_uvicorn_protocol_methods_the_gateway_uses_are_there(name: str) -> None:
    method = getattr(HttpToolsProtocol, name, None)
    assert method is not None, f"uvicorn's HttpToolsProtocol has no {name} any more ({_versions()})"
    parameters = list(inspect.signature(method).parameters)
    assert parameters == PROTOCOL_METHODS[name], (
        f"uvicorn's HttpToolsProtocol.{name} now takes {parameters}, the gateway calls or overrides it "
        f"as {PROTOCOL_METHODS[name]} ({_versions()}): see gateway/api/http_guard.py, declined_upgrade.py"
    )


def test_uvicorn_protocol_and_cycle_attributes_the_gateway_uses_are_there() -> None:
    protocol = _assigned_attributes(HttpToolsProtocol)
    missing = [f"HttpToolsProtocol.{name}" for name in PROTOCOL_ATTRIBUTES if name not in protocol]
    cycle = _assigned_attributes(RequestResponseCycle)
    missing += [f"RequestResponseCycle.{name}" for name in CYCLE_ATTRIBUTES if name not in cycle]
    if "total_requests" not in _assigned_attributes(ServerState):
        missing.append("ServerState.total_requests")
    missing += [
        f"FlowControl.{name}"
        for name in ("drain", "resume_reading")
        if not hasattr(flow_control.FlowControl, name)
    ]
    if "write_paused" not in _assigned_attributes(flow_control.FlowControl):
        missing.append("FlowControl.write_paused")
    missing += [
        f"httptools_impl.{name}"
        for name in ("HEADER_RE", "HEADER_VALUE_RE", "STATUS_LINE")
        if not hasattr(httptools_impl, name)
    ]
    assert missing == [], f"uvicorn ({_versions()}) no longer sets {missing}: see gateway/api/http_guard.py"
    assert httptools_impl.HttpToolsProtocol is HttpToolsProtocol


@given(st.lists(st.binary(max_size=12), max_size=6))
def test_uvicorns_header_patterns_refuse_a_joined_text_exactly_when_they_refuse_a_part(
    parts: list[bytes],
) -> None:
    """The direct way checks the answer's names (and values) joined, in one search each
    (``DirectExchange.respond``): true to uvicorn's check of each one while its patterns are classes of
    single bytes, which this holds for any parts."""
    for pattern in (httptools_impl.HEADER_RE, httptools_impl.HEADER_VALUE_RE):
        each = any(pattern.search(part) for part in parts)
        assert (pattern.search(b"".join(parts)) is not None) == each, pattern.pattern


@pytest.mark.parametrize(
    ("function", "reason", "expected"), FINGERPRINTS, ids=lambda v: getattr(v, "__qualname__", "")
)
def test_framework_code_the_gateway_repeats_is_unchanged(
    function: Callable[..., Any], reason: str, expected: str
) -> None:
    assert fingerprint(function) == expected, (
        f"{function.__module__}.{function.__qualname__} changed ({_versions()}): {reason}. Re-read it, "
        "carry the change over, then put the new fingerprint here"
    )


def test_fastapi_app_internals_the_direct_way_uses_are_there() -> None:
    app = FastAPI()
    missing = [
        name for name in ("middleware_stack", "user_middleware", "root_path") if not hasattr(app, name)
    ]
    # direct_publish_of looks FastAPI's own telemetry up by this private name and goes the ASGI way when on.
    missing += [name for name in ("_native_telemetry",) if not hasattr(app, name)]
    assert missing == [], (
        f"FastAPI ({_versions()}) apps have no {missing} any more: see gateway/api/direct_publish.py"
    )
    assert callable(app._native_telemetry.enabled)
    assert "cls" in inspect.signature(Middleware).parameters
    route = next(r for r in router.routes if isinstance(r, APIRoute) and r.path.endswith("/{topic}/messages"))
    absent = [name for name in ("endpoint", "dependant", "path", "methods") if not hasattr(route, name)]
    assert absent == [], f"FastAPI's APIRoute has no {absent} any more ({_versions()})"
    fields = set(inspect.signature(Dependant).parameters)
    wanted = {"dependencies", "path_params", "query_params", "header_params", "cookie_params", "body_params"}
    assert wanted <= fields, f"FastAPI's Dependant has no {sorted(wanted - fields)} ({_versions()})"


def test_the_framework_layers_outside_the_apps_middleware_pass_on_through_app() -> None:
    # A publish entering GatewayApp through ASGI takes the direct way, past the layers FastAPI puts outside
    # the app's own middlewares (gateway/api/gateway_app.py: none has work on a publish); a new one must be
    # read before it is skipped.
    class Own:
        def __init__(self, app: Any) -> None:
            self.app = app

    app = FastAPI(middleware=[Middleware(Own)])
    layers: list[str] = []
    node: Any = app.build_middleware_stack()
    while not isinstance(node, Own):
        layers.append(type(node).__name__)
        node = getattr(node, "app", None)
        assert node is not None, f"the middleware stack of FastAPI ({_versions()}) has no .app path: {layers}"
    known = [ServerErrorMiddleware.__name__, "ExceptionTelemetryMiddleware", "AppBodyLimitMiddleware"]
    assert layers == known, (
        f"FastAPI ({_versions()}) puts {layers} outside the app's own middleware, not {known}: a publish "
        "skips them on the direct way; read what the new ones do (gateway/api/gateway_app.py)"
    )


def _needs_a_caller() -> str:
    return "caller"


def test_the_gateway_app_serves_publish_the_direct_way() -> None:
    check_publish_route(create_app(Settings()))  # today's app: nothing the direct way would skip


@pytest.mark.parametrize("where", ["app", "router", "route"])
def test_a_dependency_on_the_publish_route_refuses_the_app(where: str) -> None:
    # The direct way takes the publish steps itself: a dependency added anywhere FastAPI puts one on the
    # route would be skipped, so the app refuses to be built.
    app = FastAPI(dependencies=[Depends(_needs_a_caller)] if where == "app" else None)
    publish = APIRouter(dependencies=[Depends(_needs_a_caller)] if where == "router" else [])
    extra = [Depends(_needs_a_caller)] if where == "route" else None
    publish.add_api_route(PUBLISH_PATH, publish_messages, methods=["POST"], dependencies=extra)
    app.include_router(publish)
    with pytest.raises(
        PublishRouteConflict, match=r"POST /v1/topics/\{topic\}/messages .* dependency _needs_a_caller"
    ):
        check_publish_route(app)


def test_create_app_refuses_an_app_wide_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithADependency(GatewayApp):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(dependencies=[Depends(_needs_a_caller)], **kwargs)

    monkeypatch.setattr(app_module, "GatewayApp", WithADependency)
    with pytest.raises(PublishRouteConflict, match="dependency _needs_a_caller"):
        create_app(Settings())


def test_a_parameter_or_another_endpoint_on_the_publish_route_refuses_the_app() -> None:
    async def publish_with_a_header(topic: str, request: Request, x_tenant: str = Header()) -> Any:
        return await publish_messages(topic, request)

    app = FastAPI()
    app.add_api_route(PUBLISH_PATH, publish_with_a_header, methods=["POST"])
    with pytest.raises(PublishRouteConflict) as refused:
        check_publish_route(app)
    assert "its endpoint is" in str(refused.value) and "parameter x_tenant" in str(refused.value)
    with pytest.raises(PublishRouteConflict, match="0 routes serve it"):
        check_publish_route(FastAPI())
