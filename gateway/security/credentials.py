"""The credentials one request presents, as read from HTTP headers or gRPC metadata.

Nothing here validates a credential; it only finds it. Credentials are secrets: this module never logs
them, and :class:`Credentials` hides them from ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.service.errors import Unauthenticated

__all__ = ["MAX_CREDENTIAL_LENGTH", "Credentials", "from_headers"]

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
