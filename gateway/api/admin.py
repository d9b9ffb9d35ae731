"""The admin listener's app: ``/metrics``, ``/docs``, ``/redoc`` (with their assets, ``gateway/api/docs.py``)
and ``/openapi.json`` of the main app, the web console when ``console.listener`` is ``admin``
(``gateway/api/console.py``), and the probes ``/healthz`` and ``/readyz`` (also on the main listener).

With ``admin.port`` set, :func:`gateway.api.app.create_app` leaves these four off the main listener (where
clients reach the API) and builds this small app for a second listener that operators keep private
(a cluster-internal port that Prometheus scrapes). It serves the main app's own OpenAPI document and
metrics, so both listeners always describe the same gateway. It has no authentication of its own, and
over TLS it never asks for a client certificate (so that scrapers and the kubelet's probes get through):
bind it to an address only operators, scrapers and probes can reach.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gateway.api import routes_health, routes_metrics
from gateway.api.console import install_console
from gateway.api.docs import install_docs
from gateway.observability.logging import RequestIdMiddleware

__all__ = ["ADMIN_PATHS", "create_admin_app"]

#: what moves to the admin listener
ADMIN_PATHS = ("/metrics", "/docs", "/redoc", "/openapi.json")


def create_admin_app(app: FastAPI) -> FastAPI:
    """The admin app of ``app`` (whose ``state.metrics`` holds the gateway's metrics)."""
    admin = FastAPI(
        title=f"{app.title} admin", version=app.version, openapi_url=None, docs_url=None, redoc_url=None
    )

    @admin.get("/openapi.json")
    async def openapi() -> JSONResponse:
        document: dict[str, Any] = app.openapi()
        return JSONResponse(document)

    install_docs(admin, title=app.title)
    console = app.state.runtime.settings.console
    if console.enabled and console.listener == "admin":  # the web console, calling the API's listener
        install_console(admin, api_url=console.api_url)
    admin.state.metrics = app.state.metrics
    admin.state.runtime = app.state.runtime
    admin.include_router(routes_metrics.router)
    admin.include_router(routes_health.router)
    admin.add_middleware(RequestIdMiddleware)
    return admin
