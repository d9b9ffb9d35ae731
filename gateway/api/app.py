"""The FastAPI application: routers, error handlers and the runtime's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.middleware import Middleware

from gateway import __version__
from gateway.api import (
    routes_consumers,
    routes_health,
    routes_overview,
    routes_push,
    routes_ranges,
    routes_subscriptions,
    routes_topics,
)
from gateway.api.admin import create_admin_app
from gateway.api.auth import AuthMiddleware
from gateway.api.compression import GzipMiddleware
from gateway.api.console import install_console
from gateway.api.consumer_render import render_pushed
from gateway.api.cors import install_cors
from gateway.api.direct_poll import check_poll_route
from gateway.api.direct_publish import check_publish_route
from gateway.api.docs import install_docs
from gateway.api.errors import install_error_handlers
from gateway.api.gateway_app import GatewayApp
from gateway.api.openapi_doc import complete_openapi
from gateway.api.proxy import ProxyHeadersMiddleware
from gateway.api.request_limits import RequestLimitsMiddleware
from gateway.api.telemetry import install_telemetry
from gateway.api.tracing import TracingMiddleware
from gateway.config import Settings
from gateway.observability import tracing
from gateway.runtime import Runtime

DESCRIPTION = (
    "Publish to and consume from Apache InLong TubeMQ over HTTP. A 200 on publish means a TubeMQ broker "
    "stored every message of the request."
)


def create_app(
    settings: Settings | None = None, runtime: Runtime | None = None, *, owns_runtime: bool | None = None
) -> FastAPI:
    """Build the app. The app starts and stops the runtime in its lifespan when it built it itself, or
    when ``owns_runtime`` is true; otherwise the caller owns the runtime's lifecycle (tests).

    With ``admin.port`` set, ``/metrics``, ``/docs``, ``/redoc`` and ``/openapi.json`` are not served by
    this app but by ``app.state.admin_app`` (:mod:`gateway.api.admin`), for the admin listener."""
    owned = runtime is None if owns_runtime is None else owns_runtime
    rt = runtime if runtime is not None else Runtime(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owned:
            await rt.start()
        try:
            # push subscriptions deliver the poll answer's message object (gateway/service/push.py)
            await rt.start_push(render_pushed)
            yield
        finally:
            await routes_consumers.close_forwarder(app)
            if owned:
                await rt.stop()

    admin_listener = rt.settings.admin.port is not None
    # With an admin listener, the docs and the OpenAPI document are served there, not here.
    # FastAPI's own docs pages load their assets from a CDN: gateway/api/docs.py serves offline ones.
    hidden: dict[str, Any] = {"docs_url": None, "redoc_url": None}
    if admin_listener:
        hidden["openapi_url"] = None
    app = GatewayApp(  # FastAPI, with a publish entering through ASGI taking the direct way
        title="tubemq-gateway", version=__version__, description=DESCRIPTION, lifespan=lifespan, **hidden
    )
    app.state.runtime = rt
    if not admin_listener:
        install_docs(app, title=app.title)
    if rt.settings.console.enabled and rt.settings.console.listener == "main":
        install_console(app)  # the web console (gateway/api/console.py)
    app.include_router(routes_overview.router)
    app.include_router(routes_topics.router)
    app.include_router(routes_consumers.router)
    app.include_router(routes_health.router)
    app.include_router(routes_ranges.router)
    app.include_router(routes_push.router)
    app.include_router(routes_subscriptions.router)
    install_error_handlers(app)
    metrics = rt.settings.metrics
    install_telemetry(
        app,
        rt,
        max_topics=metrics.max_topics,
        max_groups=metrics.max_groups,
        max_group_topics=metrics.max_group_topics,
        serve_metrics=not admin_listener,
        access_log_sample=rt.settings.access_log_sample,
    )
    complete_openapi(app)
    app.state.admin_app = create_admin_app(app) if admin_listener else None
    # Inside request ids and metrics: refusals are logged and counted like any answer. Authentication
    # first, before any body is read (an unauthenticated request costs no slot and no body).
    app.user_middleware.append(Middleware(AuthMiddleware, security=lambda: rt.security, fastapi=lambda: app))
    # Inside auth (it knows the caller): body size, body deadlines, in-flight bytes, concurrent requests and
    # each caller's share of them, in the process's budgets gRPC counts into too (request_limits.py).
    app.user_middleware.append(
        Middleware(RequestLimitsMiddleware, limits=lambda: rt.settings.limits, admission=lambda: rt.admission)
    )
    check_publish_route(app)  # refuses a publish route the direct way would serve differently
    check_poll_route(app)  # and a poll route
    traced = app.state.traced = rt.settings.tracing.enabled or tracing.enabled()
    if traced:  # a SERVER span around all of the rest
        app.add_middleware(TracingMiddleware)
    # Just inside CORS: any answer, errors included, may be compressed (gateway/api/compression.py).
    app.add_middleware(GzipMiddleware, settings=lambda: rt.settings.compression)
    install_cors(app, rt.settings.cors)  # outside the rest (see gateway/api/cors.py)
    # Outermost: the client address and scheme behind a trusted proxy, for everything inside (proxy.py).
    app.user_middleware.insert(
        0, Middleware(ProxyHeadersMiddleware, trusted=rt.settings.http.trusted_proxies)
    )
    # The publish and the poll answered below ASGI take these middlewares' steps, and serve the app only
    # while they are its middlewares (gateway/api/direct_ways.py).
    app.state.own_middleware = tuple(m.cls for m in app.user_middleware)
    return app
