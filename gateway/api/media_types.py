"""Which request bodies the API takes: an explicit, supported Content-Type, or 415.

A body is never taken for JSON because it came without a type. Besides being what the OpenAPI contract says,
that closes the browser's ``no-cors`` door: a page of any origin may send a POST without asking the gateway
(no CORS preflight) only with no type, ``text/plain``, form or multipart data, never ``application/json``;
so a page can neither publish nor join a consumer group through a visitor's browser. JSON is UTF-8
(RFC 8259): another charset is refused.
"""

from __future__ import annotations

from typing import Literal

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.api.schemas import error_document

__all__ = ["JSON", "OCTETS", "UnsupportedMediaType", "body_kind", "require_json_body"]

JSON = "application/json"
OCTETS = "application/octet-stream"
_UTF8 = (None, "utf-8", "utf8")


class UnsupportedMediaType(Exception):
    """A request body of a type the route does not take; answered 415 with the API's error body."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def response(self) -> JSONResponse:
        error = {"code": "unsupported_media_type", "message": self.message, "field": "Content-Type"}
        return JSONResponse(error_document(error), status_code=415)


def body_kind(header: str | None) -> Literal["json", "octets"] | None:
    """``json`` for application/json (UTF-8), ``octets`` for application/octet-stream, else None."""
    if header is None:
        return None
    if header == JSON:  # the usual spelling, without parsing
        return "json"
    media, _, params = header.partition(";")
    media = media.strip().lower()
    if media == OCTETS:
        return "octets"
    if media == JSON and _charset(params) in _UTF8:
        return "json"
    return None


def refusal(header: str | None, supported: str) -> UnsupportedMediaType:
    """Why ``header`` is refused, saying what to send instead (``supported``: the types, in words)."""
    if header is not None:
        media, _, params = header.partition(";")
        charset = _charset(params)
        if media.strip().lower() == JSON and charset not in _UTF8:
            return UnsupportedMediaType(f"JSON must be UTF-8, not charset {charset[:40]!r}: send {JSON}")
    named = "no Content-Type" if header is None else f"Content-Type {header[:100]!r}"
    return UnsupportedMediaType(f"{named} is not supported here: send {supported}")


async def require_json_body(request: Request) -> None:
    """Route dependency: a request that carries a body must say it is JSON (UTF-8); raises
    UnsupportedMediaType otherwise. A request without a body passes (the route decides if it needs one)."""
    headers = request.headers
    length = headers.get("content-length")
    if (length is None or length == "0") and "transfer-encoding" not in headers:
        return
    header = headers.get("content-type")
    if body_kind(header) != "json":
        raise refusal(header, JSON)


def _charset(params: str) -> str | None:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None
