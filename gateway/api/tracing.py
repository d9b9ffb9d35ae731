"""A SERVER span per HTTP request, continuing the caller's W3C ``traceparent`` (pure ASGI).

Installed only while tracing is on (:mod:`gateway.observability.tracing`). The span is named
``METHOD /route/template`` once the router has matched (``METHOD`` alone for an unmatched path) and carries
``http.request.method``, ``http.route`` and ``http.response.status_code``; a 5xx answer or an exception
sets its status to error. The concrete path is never recorded: consumer paths hold instance ids.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability import tracing
from gateway.observability.access_log import route_template

__all__ = ["TracingMiddleware", "carrier_of", "finish_span"]

_PROPAGATED = (b"traceparent", b"tracestate")


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        with tracing.server_span(method, carrier_of(scope), {"http.request.method": method}) as span:
            status = 0

            async def traced_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, traced_send)
            finally:
                finish_span(span, scope, status)


def carrier_of(scope: Scope) -> dict[str, str]:
    """The request's W3C trace context headers, which the SERVER span continues."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _PROPAGATED}


def finish_span(span: Any, scope: Scope, status: int) -> None:
    """Name the request's span after its route and record the answer's ``status`` (0: none); a 5xx is an
    error. The publish answered below ASGI takes this step too (``gateway/api/direct_publish.py``)."""
    if span is None:
        return
    route = route_template(scope)
    if route != "<unmatched>":
        span.update_name(f"{scope['method']} {route}")
        span.set_attribute("http.route", route)
    if status:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR))
