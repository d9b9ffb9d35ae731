"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) that work without internet access.

FastAPI's own pages load their JavaScript, CSS and favicon from a CDN, so they are blank on a network with no
way out. These pages load them from ``/docs/assets/``, served from the files the ``fastapi-offline`` package
ships (Swagger UI 5 and ReDoc 2 bundles: a small, maintained package whose releases follow Swagger UI's).
Every URL in the pages is relative (``openapi.json``, ``docs/assets/...``), so the pages also work under a
path prefix that an ingress adds, and Swagger UI's online validator badge is off (``validatorUrl: null``).

The main app serves them unless an admin listener takes them (``gateway/api/admin.py``); authentication
treats them like ``/openapi.json`` (``gateway/security/operations.py``: the ``admin`` action).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Final

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.exceptions import HTTPException

__all__ = ["ASSETS", "ASSET_PATH", "DOCS_PATHS", "asset_directory", "install_docs"]

#: the asset files served, with their media types
ASSETS: Final[dict[str, str]] = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
ASSET_PATH: Final = "/docs/assets/{name}"
#: every path this module serves
DOCS_PATHS: Final = ("/docs", "/redoc", ASSET_PATH)
_ASSET_CACHE = "public, max-age=86400"


def asset_directory() -> Path:
    """Where the installed ``fastapi-offline`` package keeps the bundles."""
    return Path(str(files("fastapi_offline"))) / "static"


def install_docs(app: FastAPI, *, title: str) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets on ``app``, for the ``openapi.json`` beside them."""
    directory = asset_directory()

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="openapi.json",
            title=f"{title} - Swagger UI",
            swagger_js_url="docs/assets/swagger-ui-bundle.js",
            swagger_css_url="docs/assets/swagger-ui.css",
            swagger_favicon_url="docs/assets/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="openapi.json",
            title=f"{title} - ReDoc",
            redoc_js_url="docs/assets/redoc.standalone.js",
            redoc_favicon_url="docs/assets/favicon.png",
            with_google_fonts=False,
        )

    @app.get(ASSET_PATH, include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        media_type = ASSETS.get(name)  # only the listed files: the name never reaches the file system
        if media_type is None:
            raise HTTPException(404, f"no documentation asset {name[:100]!r}")
        return FileResponse(directory / name, media_type=media_type, headers={"Cache-Control": _ASSET_CACHE})
