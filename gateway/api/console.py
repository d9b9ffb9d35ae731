"""The web console: ``/console`` and its files, plain HTML, JavaScript modules and CSS shipped in the package.

Nothing is built or fetched at install or run time (no CDN): the files under ``gateway/api/console/`` are
the console, served as they are (``pyproject.toml`` puts them in the wheel). The page holds no data: its
scripts call the API (``/v1/...``) with the credential the user signed in with, kept in the tab's
``sessionStorage`` and sent as ``Authorization: Bearer`` or ``x-api-key`` on each call, so the API's
authentication and rules decide what the user sees. The page and its files are open (a browser sends no
credential when it opens a page); see ``gateway/security/operations.py``.

Every answer carries a strict Content-Security-Policy: scripts and styles only from these files (no inline
script or style, no ``eval``), connections only to the API, no frames, no plugins, and Trusted Types
required, so that the browser itself refuses any HTML sink (``innerHTML``) the scripts might reach with
data: message values, keys and attributes are hostile input and are only ever set as text.

On the main listener by default; with ``console.listener`` ``admin`` on the admin listener
(``gateway/api/admin.py``), where the page calls the API at ``console.api_url`` (named in a ``<meta>`` tag
and allowed by ``connect-src``); ``console.enabled`` false serves neither.
"""

from __future__ import annotations

import html
from functools import cache
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from starlette.exceptions import HTTPException

__all__ = ["ASSETS", "CONSOLE_PATHS", "asset_directory", "content_security_policy", "install_console"]

#: the files served under /console/assets/, with their media types (nothing else of the package)
ASSETS: Final[dict[str, str]] = {
    "console.css": "text/css",
    "app.js": "text/javascript",
    "api.js": "text/javascript",
    "dom.js": "text/javascript",
    "values.js": "text/javascript",
    "sse.js": "text/javascript",
    "topics.js": "text/javascript",
    "messages.js": "text/javascript",
    "tail.js": "text/javascript",
    "publish.js": "text/javascript",
    "groups.js": "text/javascript",
    "brokers.js": "text/javascript",
    "subscriptions.js": "text/javascript",
    "topic_picker.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
PAGE_PATH: Final = "/console"
ASSET_PATH: Final = "/console/assets/{name}"
CONSOLE_PATHS: Final = (PAGE_PATH, ASSET_PATH)
_API_BASE_MARK = "__API_BASE__"


def asset_directory() -> Path:
    """The console's files, beside this module (package data of the wheel)."""
    return Path(__file__).resolve().parent / "console"


def content_security_policy(api_url: str | None = None) -> str:
    """The policy of every console answer; ``api_url`` (another origin's API) is added to connect-src."""
    connect = "'self'"
    if api_url:
        parts = urlsplit(api_url)
        connect += f" {parts.scheme}://{parts.netloc}"
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self'",
            f"connect-src {connect}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        )
    )


def _headers(api_url: str | None, cache_control: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(api_url),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cache-Control": cache_control,
    }


@cache
def _page_template() -> str:
    return (asset_directory() / "index.html").read_text(encoding="utf-8")


def install_console(app: FastAPI, *, api_url: str | None = None) -> None:
    """Serve the console on ``app``; its scripts call the API at ``api_url`` (None: this app, relative
    URLs, so a path prefix an ingress adds keeps working)."""
    directory = asset_directory()
    page = _page_template().replace(_API_BASE_MARK, html.escape(api_url or "", quote=True))
    page_headers = _headers(api_url, "no-cache")
    asset_headers = _headers(api_url, "no-cache")  # a new gateway version brings new files: revalidate

    @app.get(PAGE_PATH, include_in_schema=False)
    async def console_page() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=page_headers)

    @app.get(ASSET_PATH, include_in_schema=False)
    async def console_asset(name: str) -> FileResponse:
        media_type = ASSETS.get(name)  # only the listed files: the name never reaches the file system
        if media_type is None:
            raise HTTPException(404, f"no console file {name[:100]!r}")
        return FileResponse(
            directory / name, media_type=f"{media_type}; charset=utf-8", headers=asset_headers
        )
