"""The credentials one request presents, as read from HTTP headers or gRPC metadata.

Nothing here validates a credential; it only finds it. Credentials are secrets: this module never logs
them, and :class:`Credentials` hides them from ``repr``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.service.errors import InvalidInput, Unauthenticated

__all__ = ["MAX_CREDENTIAL_LENGTH", "Credentials", "credential_headers", "from_headers"]

#: Longer values are refused before any work is done on them (a JWT with many claims is a few KB).
MAX_CREDENTIAL_LENGTH = 16 * 1024


@dataclass(frozen=True, slots=True)
class Credentials:
    """``bearer``: the token of ``Authorization: Bearer``; ``api_key``: the ``x-api-key`` header;
    ``client_cert``: the RFC 4514 subject of a client certificate the TLS listener verified."""

    bearer: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    client_cert: str | None = None

    @property
    def empty(self) -> bool:
        return self.bearer is None and self.api_key is None and self.client_cert is None


def _bearer(authorization: str) -> str:
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(
            "the Authorization header must be 'Bearer <API key or JWT>'", field="Authorization"
        )
    return token


def credential_headers(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> tuple[str | None, str | None]:
    """The ``Authorization`` and ``x-api-key`` values of a request's headers or metadata ``pairs`` (names in
    lower case: ASGI's bytes or gRPC's text; values as text, bytes read as Latin-1): the one rule of every
    way in (REST, the publish answered below ASGI, gRPC). One of them sent twice is refused with
    InvalidInput (400 / INVALID_ARGUMENT) naming it: which of two credentials is meant is not guessed (a
    proxy adding its own after the client's would otherwise decide who the caller is)."""
    authorization = api_key = None
    for name, value in pairs:
        if name == b"authorization" or name == "authorization":
            if authorization is not None:
                raise _twice("Authorization")
            authorization = value.decode("latin-1") if isinstance(value, bytes) else value
        elif name == b"x-api-key" or name == "x-api-key":
            if api_key is not None:
                raise _twice("x-api-key")
            api_key = value.decode("latin-1") if isinstance(value, bytes) else value
    return authorization, api_key


def _twice(name: str) -> InvalidInput:
    return InvalidInput(
        f"the {name} header is sent more than once; send one (which of two credentials is meant is not "
        "guessed)",
        field=name,
    )


def from_headers(
    authorization: str | None, api_key: str | None, client_cert: str | None = None
) -> Credentials:
    """Credentials from the raw header values (None when absent); raises Unauthenticated for a malformed
    ``Authorization`` header or an oversized value."""
    for name, value in (("Authorization", authorization), ("x-api-key", api_key)):
        if value is not None and len(value) > MAX_CREDENTIAL_LENGTH:
            raise Unauthenticated(f"the {name} header is too long", field=name)
    bearer = _bearer(authorization) if authorization is not None else None
    key = api_key.strip() if api_key is not None else None
    return Credentials(bearer=bearer, api_key=key or None, client_cert=client_cert or None)
