"""A SERVER span per HTTP request, continuing the caller's W3C ``traceparent`` (pure ASGI).

Installed only while tracing is on (:mod:`gateway.observability.tracing`). The span is named
``METHOD /route/template`` once the router has matched (``METHOD`` alone for an unmatched path) and carries
``http.request.method``, ``http.route`` and ``http.response.status_code``; a 5xx answer or an exception
sets its status to error. The concrete path is never recorded: consumer paths hold instance ids.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability import tracing
from gateway.observability.logging import route_template

__all__ = ["TracingMiddleware"]

_PROPAGATED = (b"traceparent", b"tracestate")


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _PROPAGATED}
        method = scope["method"]
        with tracing.server_span(method, carrier, {"http.request.method": method}) as span:
            status = 0

            async def traced_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, traced_send)
            finally:
                if span is not None:
                    route = route_template(scope)
                    if route != "<unmatched>":
                        span.update_name(f"{method} {route}")
                        span.set_attribute("http.route", route)
                    if status:
                        span.set_attribute("http.response.status_code", status)
                        if status >= 500:
                            from opentelemetry.trace import Status, StatusCode

                            span.set_status(Status(StatusCode.ERROR))
