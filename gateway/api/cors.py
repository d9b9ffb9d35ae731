"""CORS: which web origins may call the API from a browser (``cors`` settings; none by default).

With no origin configured the app sends no CORS header at all, so browsers keep pages of other origins
from reading answers (and from sending anything but simple requests, which publish refuses: see its
Content-Type rule). With origins configured, Starlette's ``CORSMiddleware`` answers preflights itself and
adds the headers to every answer of an allowed origin. It must be outside every middleware that answers
(only the proxy headers' rewrite of the client address is outside it): a preflight
carries no credentials, so it has to be answered before authentication looks at the request, and error
answers (401, 403, 429) need the headers too, or the page cannot read them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.types import Message, Scope

from gateway.config import CorsSettings

__all__ = ["ALLOWED_METHODS", "CorsHeaders", "cors_headers", "install_cors"]

#: Every method the API serves.
ALLOWED_METHODS = ("GET", "POST", "DELETE")

_Headers = list[tuple[bytes, bytes]]
#: an answer's headers with the CORS headers of the request of a scope added
CorsHeaders = Callable[[Scope, _Headers], Coroutine[Any, Any, _Headers]]


def _options(cors: CorsSettings) -> dict[str, Any]:
    return {
        "allow_origins": list(cors.allow_origins),
        "allow_methods": list(ALLOWED_METHODS),
        "allow_headers": list(cors.allow_headers),
        "expose_headers": list(cors.expose_headers),
        "allow_credentials": False,  # credentials are headers (Authorization, x-api-key), never cookies
        "max_age": cors.max_age,
    }


def install_cors(app: FastAPI, cors: CorsSettings) -> bool:
    """Add the CORS middleware when origins are configured; returns whether it did. Call it after every
    other ``add_middleware`` (the last added is the outermost)."""
    if not cors.allow_origins:
        return False
    app.add_middleware(CORSMiddleware, **_options(cors))
    return True


def cors_headers(cors: CorsSettings) -> CorsHeaders | None:
    """What the CORS middleware adds to an answer that is not a preflight, for an answer made without it
    (the publish answered below ASGI); None when no origin is configured (no CORS header at all)."""
    if not cors.allow_origins:
        return None
    # Starlette's own step for a simple request's answer, so both ways add the same headers.
    middleware = CORSMiddleware(_no_app, **_options(cors))

    async def added(scope: Scope, headers: _Headers) -> _Headers:
        start: Message = {"type": "http.response.start", "headers": headers}
        await middleware.send(start, _dropped, Headers(scope=scope))
        found: _Headers = start["headers"]
        return found

    return added


async def _no_app(scope: Scope, receive: Any, send: Any) -> None:
    raise RuntimeError("not used: only the answer's headers are asked of this middleware")


async def _dropped(message: Message) -> None:
    """The ``send`` given to the CORS step: the answer's start message is taken back from it, changed."""
