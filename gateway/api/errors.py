"""The one place where service errors become HTTP answers."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gateway.service.errors import ErrorKind, ServiceError, Unavailable

log = logging.getLogger("gateway.api")

STATUS_BY_KIND = {
    ErrorKind.INVALID: 400,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.GONE: 410,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UPSTREAM: 502,
}


def error_response(exc: ServiceError) -> JSONResponse:
    status = STATUS_BY_KIND[exc.kind]
    headers = {}
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    return JSONResponse({"error": exc.to_dict()}, status_code=status, headers=headers)


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


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
