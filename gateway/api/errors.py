"""The one place where service errors become HTTP answers."""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gateway.api.media_types import UnsupportedMediaType
from gateway.api.schemas import ErrorResponse
from gateway.service.errors import ErrorKind, Quota, RateLimited, ServiceError, Unauthenticated, Unavailable

log = logging.getLogger("gateway.api")

STATUS_BY_KIND = {
    ErrorKind.INVALID: 400,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.GONE: 410,
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
    if isinstance(exc, Unavailable):
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
    return JSONResponse({"error": exc.to_dict()}, status_code=status, headers=error_headers(exc))


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    field = ".".join(loc) or None
    message = f"{field}: {first.get('msg', 'invalid value')}" if field else str(first.get("msg", "invalid"))
    body = {"error": {"code": ErrorKind.INVALID.value, "message": message, "field": field}}
    return JSONResponse(body, status_code=400)


async def _media_type_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UnsupportedMediaType)
    return exc.response()


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(UnsupportedMediaType, _media_type_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
