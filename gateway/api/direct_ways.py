"""Which requests of an app may be answered below ASGI: its direct ways as served now.

:func:`direct_ways_of` gives the app's :class:`DirectWays` (the middlewares' steps, the publish's way, the
poll's way) only while they would answer as the ASGI way does: an app of ``create_app`` with the middlewares
it installed (a middleware added later sends every request the ASGI way, which runs it), no root path, no
FastAPI native telemetry, and each route the plain one its way was made for (one route serves it, with the
parameters and dependencies its way takes). A way is None while its setting (``http.direct_publish``,
``http.direct_poll``) is off or its route is not the plain one. The check is redone when the middleware stack
is rebuilt or a middleware is added.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fastapi import FastAPI

from gateway.api.direct_poll import DirectPoll, poll_route_problems, poll_routes
from gateway.api.direct_publish import DirectPublish, publish_routes
from gateway.api.direct_steps import DirectSteps, native_telemetry, served_by_own_middleware

__all__ = ["DirectWays", "direct_publish_of", "direct_ways_of"]


class DirectWays(NamedTuple):
    """An app's direct ways (None: that request goes the ASGI way)."""

    publish: DirectPublish | None
    poll: DirectPoll | None


_NONE = DirectWays(None, None)


def direct_ways_of(app: Any) -> DirectWays:
    """The direct ways of ``app`` as served now (see the module docstring)."""
    if not isinstance(app, FastAPI) or app.root_path or native_telemetry(app):
        return _NONE
    key = (app.middleware_stack, len(app.user_middleware))
    found = app.__dict__.get("_direct")
    if found is None or found[0] != key:
        ways = _NONE
        if served_by_own_middleware(app):
            steps = DirectSteps(app)
            http = steps.runtime.settings.http
            publish = publish_routes(app)
            poll = poll_routes(app)
            ways = DirectWays(
                DirectPublish(steps, publish[0]) if http.direct_publish and len(publish) == 1 else None,
                DirectPoll(steps, poll[0]) if http.direct_poll and not poll_route_problems(app) else None,
            )
        found = app.__dict__["_direct"] = (key, ways)
    ways_now: DirectWays = found[1]
    return ways_now


def direct_publish_of(app: Any) -> DirectPublish | None:
    """The publish's direct way of ``app`` as served now (None: the ASGI way)."""
    return direct_ways_of(app).publish
