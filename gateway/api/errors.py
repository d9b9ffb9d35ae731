"""The one place where service errors become HTTP answers."""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gateway.api.media_types import UnsupportedMediaType
from gateway.api.schemas import ErrorResponse, error_document
from gateway.service.errors import (
    Conflict,
    ErrorKind,
    Quota,
    RateLimited,
    ServiceError,
    Unauthenticated,
    Unavailable,
)

log = logging.getLogger("gateway.api")

STATUS_BY_KIND = {
    ErrorKind.INVALID: 400,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.GONE: 410,
    ErrorKind.CONFLICT: 409,
    ErrorKind.ALREADY_DEFINED: 409,
    ErrorKind.UNPROCESSABLE: 422,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.RATE_LIMITED: 429,
    ErrorKind.UPSTREAM: 502,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.PERMISSION_DENIED: 403,
}

#: The challenge of every 401 (RFC 6750): a bearer token (an API key or a JWT) is what the gateway takes.
WWW_AUTHENTICATE = 'Bearer realm="tubemq-gateway"'


def error_headers(exc: ServiceError) -> dict[str, str]:
    """The headers an answer for ``exc`` carries besides its body (Retry-After and RateLimit fields,
    WWW-Authenticate)."""
    if isinstance(exc, RateLimited):
        return rate_limit_headers(exc.quota, exc.retry_after)
    if isinstance(exc, Unavailable | Conflict):
        return {"Retry-After": str(max(1, round(exc.retry_after)))}
    if isinstance(exc, Unauthenticated):
        return {"WWW-Authenticate": WWW_AUTHENTICATE}
    return {}


_HEADER_DOC = {"schema": {"type": "string"}}
#: The OpenAPI answer of a route that can refuse a caller above its quota.
RATE_LIMITED_DOC: dict[str, Any] = {
    "model": ErrorResponse,
    "description": "the caller (principal, or address when anonymous) is above its quota: retry after "
    "`Retry-After` seconds (also `error.retryAfterSeconds`)",
    "headers": {
        "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}},
        "RateLimit-Policy": {
            "description": "the quota run out of (draft-ietf-httpapi-ratelimit-headers), "
            'e.g. "messages";q=200;w=2',
            **_HEADER_DOC,
        },
        "RateLimit": {
            "description": 'what is left of it and when it is back, e.g. "messages";r=0;t=1',
            **_HEADER_DOC,
        },
    },
}


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def rate_limit_headers(quota: Quota, retry_after: float) -> dict[str, str]:
    """``Retry-After`` (whole seconds, rounded up) and the ``RateLimit-Policy`` and ``RateLimit`` fields of
    draft-ietf-httpapi-ratelimit-headers (structured lists: ``"name";q=..;w=..`` and ``"name";r=..;t=..``)
    for the quota a caller ran out of."""
    wait = max(1, math.ceil(retry_after))
    policy = f'"{quota.name}";q={quota.quota}'
    if quota.window is not None:
        policy += f";w={_number(quota.window)}"
    if quota.unit == "content-bytes":
        policy += ';qu="content-bytes"'
    return {
        "Retry-After": str(wait),
        "RateLimit-Policy": policy,
        "RateLimit": f'"{quota.name}";r={max(0, quota.remaining)};t={wait}',
    }


def error_response(exc: ServiceError) -> JSONResponse:
    status = STATUS_BY_KIND[exc.kind]
    return JSONResponse(error_document(exc.to_dict()), status_code=status, headers=error_headers(exc))


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    field = ".".join(loc) or None
    message = f"{field}: {first.get('msg', 'invalid value')}" if field else str(first.get("msg", "invalid"))
    body = error_document({"code": ErrorKind.INVALID.value, "message": message, "field": field})
    return JSONResponse(body, status_code=400)


async def _media_type_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UnsupportedMediaType)
    return exc.response()


_HTTP_CODES = {
    400: (
        ErrorKind.INVALID.value,
        "the request could not be read: {detail}; check its body and Content-Type",
    ),
    404: ("not_found", "no route {method} {path}; see /docs for the API's paths"),
    405: ("method_not_allowed", "{method} is not allowed on {path}; allowed: {allow}"),
}


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app takes at this request's path (a path may be served by several
    routes, one per method), with HEAD wherever GET is: asked of the routes themselves, method by method."""
    methods: set[str] = set()
    scope = dict(request.scope)
    for method in _METHODS:
        probe = {**scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            methods.add(method)
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's and FastAPI's own refusals (no route, wrong method, an unreadable body) in the API's
    error shape, with an ``Allow`` header naming every method of the path on a 405."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    method = request.method
    path = request.url.path[:200]
    allow = ""
    if exc.status_code == 405:
        allow = ", ".join(allowed_methods(request)) or headers.get("Allow", "")
        headers["Allow"] = allow
    code, template = _HTTP_CODES.get(exc.status_code, ("http_error", "{detail}"))
    message = template.format(detail=exc.detail, method=method, path=path, allow=allow)
    error: dict[str, Any] = {"code": code, "message": message}
    if exc.status_code == 400:
        error["field"] = "body"
    return JSONResponse(error_document(error), status_code=exc.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(UnsupportedMediaType, _media_type_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
