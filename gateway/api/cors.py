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

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from gateway.config import CorsSettings

__all__ = ["ALLOWED_METHODS", "install_cors"]

#: Every method the API serves.
ALLOWED_METHODS = ("GET", "POST", "DELETE")


def install_cors(app: FastAPI, cors: CorsSettings) -> bool:
    """Add the CORS middleware when origins are configured; returns whether it did. Call it after every
    other ``add_middleware`` (the last added is the outermost)."""
    if not cors.allow_origins:
        return False
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(cors.allow_origins),
        allow_methods=list(ALLOWED_METHODS),
        allow_headers=list(cors.allow_headers),
        expose_headers=list(cors.expose_headers),
        allow_credentials=False,  # credentials are headers (Authorization, x-api-key), never cookies
        max_age=cors.max_age,
    )
    return True
