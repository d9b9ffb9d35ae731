"""The access line: one structured log line per HTTP request, whichever way through HTTP it took.

The line is INFO on logger ``gateway.access`` with ``method``, ``path`` (instance ids redacted), ``route``
(the route template, so ``/v1/topics/{topic}/messages``), ``status``, ``duration_seconds`` and, for an
authenticated caller, ``principal``. Quiet paths (probes and scrapes) are logged at DEBUG so they do not
drown the useful lines; a sample below 1 logs that fraction of the answers below 400 (chosen at random),
every 4xx and 5xx is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from starlette.routing import Match
from starlette.types import Scope

from gateway.observability.json_lines import direct_handler, write_direct
from gateway.service.instance_id import redact_text
from gateway.tubemq.randomness import private_random

__all__ = ["PRINCIPAL_SCOPE_KEY", "AccessLog", "route_template"]

#: the ASGI scope key under which the REST authentication leaves the caller's label (``api_key:alice``...) for
#: the access line
PRINCIPAL_SCOPE_KEY = "tubemq.principal"
#: The sampler's own generator: the gateway leaves the process-wide ``random`` state to its host (an
#: application or a test framework may seed it and check that nothing else draws from it).
_SAMPLING = private_random()
#: the source file named by access-line records (the caller's frame is not looked up for them)
_ACCESS_FN = __file__


class AccessLog:
    """Writes the access lines (see the module docstring). ``sample``: the fraction of answers below 400
    logged, 0 to 1."""

    def __init__(
        self,
        *,
        logger: logging.Logger | None = None,
        quiet_paths: Iterable[str] = ("/healthz", "/readyz", "/metrics"),
        sample: float = 1.0,
    ) -> None:
        self._log = logger or logging.getLogger("gateway.access")
        self._quiet = frozenset(quiet_paths)
        self._sample = sample

    def log_request(self, scope: Scope, status: int, seconds: float) -> None:
        """The access line of a request answered ``status`` after ``seconds`` (sampled below 400)."""
        if status >= 400 or self._sample >= 1.0 or _SAMPLING.random() < self._sample:
            self.line(scope, status, seconds)

    def line(self, scope: Scope, status: int, seconds: float) -> None:
        """Write the access line of the request of ``scope`` (not sampled)."""
        path = scope.get("path", "")
        level = logging.DEBUG if path in self._quiet else logging.INFO
        log = self._log
        if not log.isEnabledFor(level):
            return
        # Logger.log would also look up the caller's frame (file and line), which no line shows.
        extra = {
            "method": scope.get("method", ""),
            "path": redact_text(path),
            "route": route_template(scope),
            "status": status,
            "duration_seconds": round(seconds, 6),
        }
        principal = scope.get(PRINCIPAL_SCOPE_KEY)
        if principal is not None:
            extra["principal"] = principal
        handler = direct_handler(log, level)
        if handler is not None:  # configure_logging's set-up: the same line, without a LogRecord
            write_direct(handler, log, level, "request", extra)
            return
        log.handle(log.makeRecord(log.name, level, _ACCESS_FN, 0, "request", (), None, extra=extra))

    def __repr__(self) -> str:
        return f"<AccessLog quiet={sorted(self._quiet)} sample={self._sample:g}>"


def route_template(scope: Scope) -> str:
    """The matched route's path template (bounded), or ``<unmatched>`` for a 404 outside every route.

    FastAPI's router records the route in the scope only for its API routes; a plain Starlette route
    of the app (``/docs``, ``/redoc``, ``/openapi.json``, a mount) is found by matching the app's own
    routes again, which costs a few regex matches and only happens for requests outside the API."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    return _plain_route(scope) or "<unmatched>"


def _plain_route(scope: Scope) -> str | None:
    """The template of the app's plain (non-API) route that matches ``scope``, if one does."""
    for route in getattr(scope.get("app"), "routes", ()):
        path = getattr(route, "path_format", None)
        if not isinstance(path, str) or not path:
            continue  # included routers: their API routes put themselves in the scope when they match
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            return path
    return None
