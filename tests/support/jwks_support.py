"""A token issuer for tests: RSA and EC keys made with ``cryptography``, signed JWTs, and a JWKS served over
HTTP on 127.0.0.1 whose key set a test can change (key rotation) while counting the fetches."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "http://127.0.0.1/test-issuer"
AUDIENCE = "tubemq-gateway"


@dataclass
class SigningKey:
    kid: str
    private: Any
    algorithm: str

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")

    def jwk(self) -> dict[str, Any]:
        maker = RSAAlgorithm if self.algorithm.startswith("RS") else ECAlgorithm
        data: dict[str, Any] = maker.to_jwk(self.private.public_key(), as_dict=True)
        data.update(kid=self.kid, use="sig", alg=self.algorithm)
        return data

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def token(self, kid: str | None = "", **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "jwt-user", "iat": now, "exp": now + 300, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        headers = {} if kid is None else {"kid": self.kid if kid == "" else kid}
        return jwt.encode(payload, self.private, algorithm=self.algorithm, headers=headers)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(**claims: Any) -> str:
    """An ``alg: none`` token."""
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300, **claims}
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(payload).encode())}."


def hmac_token_with(secret: bytes, kid: str, **claims: Any) -> str:
    """An HS256 token whose HMAC key is ``secret`` (e.g. the issuer's public key PEM: the HS/RS confusion)."""
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 300, **claims}
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(payload).encode())
    signature = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


@dataclass
class JwksServer:
    """Serves ``{"keys": [...]}`` of :attr:`keys` at ``url``; :attr:`fetches` counts the requests."""

    keys: list[SigningKey] = field(default_factory=list)
    fetches: int = 0
    url: str = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            self.fetches += 1
            body = json.dumps({"keys": [k.jwk() for k in self.keys]}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()


@asynccontextmanager
async def jwks_server(*keys: SigningKey) -> AsyncIterator[JwksServer]:
    served = JwksServer(list(keys))
    server = await asyncio.start_server(served._serve, "127.0.0.1", 0)
    served.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/jwks.json"
    try:
        yield served
    finally:
        server.close()
        await server.wait_closed()
