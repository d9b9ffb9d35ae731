"""The one :class:`Authenticator` both adapters use: credentials in, a principal (or a refusal) out.

Which credential is used, in order: ``Authorization: Bearer <token>`` (a JWT when it looks like one and
JWTs are configured, else an API key), then ``x-api-key``, then (with ``auth.mtls_principal``) the subject
of the client certificate the TLS listener verified. In open mode every request is ``ANONYMOUS`` and
credentials are not looked at.
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

from gateway.security.api_keys import ApiKeyAuthenticator
from gateway.security.credentials import Credentials
from gateway.service.errors import Unauthenticated
from gateway.service.principal import ANONYMOUS, Principal

__all__ = ["Authenticator", "TokenAuthenticator", "looks_like_jwt"]

log = logging.getLogger("gateway.security")

Mode = Literal["open", "required"]

_NO_CREDENTIALS = (
    "authentication required: send 'Authorization: Bearer <API key or JWT>' or 'x-api-key: <API key>'"
)


class TokenAuthenticator(Protocol):
    """Verifies a bearer JWT (see :mod:`gateway.security.jwt_auth`)."""

    async def authenticate(self, token: str) -> Principal: ...

    async def close(self) -> None: ...


def looks_like_jwt(token: str) -> bool:
    """A compact JWS: three base64url parts, the header a JSON object (``eyJ`` = ``{"``)."""
    return token.startswith("eyJ") and token.count(".") == 2


class Authenticator:
    """``mode`` open: everyone is ANONYMOUS. ``required``: a request needs a credential one of the
    configured methods accepts (``api_keys``, ``jwt``, ``mtls``), else :class:`Unauthenticated`."""

    def __init__(
        self,
        mode: Mode = "open",
        *,
        api_keys: ApiKeyAuthenticator | None = None,
        jwt: TokenAuthenticator | None = None,
        mtls: bool = False,
    ) -> None:
        self.mode = mode
        self.api_keys = api_keys
        self.jwt = jwt
        self.mtls = mtls

    def __repr__(self) -> str:
        return f"<Authenticator mode={self.mode} methods={self.methods}>"

    @property
    def required(self) -> bool:
        return self.mode == "required"

    @property
    def methods(self) -> list[str]:
        """The configured methods, for logs and errors."""
        found = ["api_key"] if self.api_keys is not None else []
        if self.jwt is not None:
            found.append("jwt")
        if self.mtls:
            found.append("mtls")
        return found

    async def authenticate(self, credentials: Credentials) -> Principal:
        if self.mode == "open":
            return ANONYMOUS
        token = credentials.bearer
        if token is not None:
            if looks_like_jwt(token):
                if self.jwt is not None:
                    return await self.jwt.authenticate(token)
                raise Unauthenticated(
                    "JWT bearer tokens are not accepted here (auth.jwt is not configured); send an API key"
                )
            return self._api_key(token)
        if credentials.api_key is not None:
            return self._api_key(credentials.api_key)
        if self.mtls and credentials.client_cert:
            return Principal(credentials.client_cert, "mtls")
        raise Unauthenticated(_NO_CREDENTIALS)

    def _api_key(self, key: str) -> Principal:
        if self.api_keys is None:
            raise Unauthenticated("API keys are not accepted here (auth.api_keys_file is not configured)")
        return self.api_keys.authenticate(key)

    async def close(self) -> None:
        if self.jwt is not None:
            await self.jwt.close()
