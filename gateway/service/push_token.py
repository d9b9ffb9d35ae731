"""The JWTs push requests may carry (``Authorization: Bearer``), as Pub/Sub's OIDC tokens: signed with the
key of ``push.token_key_file`` (an EC P-256 key: ES256, or RSA: RS256), whose public half the gateway serves
as a JSON Web Key Set (``GET /v1/push/jwks``), so a receiver checks them like any issuer's tokens.

Claims: ``iss`` (``push.token_issuer``), ``aud`` (the subscription's ``tokenAudience``, by default its
endpoint), ``sub`` (the subscription's name), ``iat`` and ``exp`` (an hour later). The header's ``kid`` is
the key's RFC 7638 thumbprint. A token is made once per audience and used until five minutes before it
expires; every replica signs with the same key file (a Secret in the chart), so any of them may deliver.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["TOKEN_LIFETIME", "PushTokens"]

#: seconds a token is valid
TOKEN_LIFETIME = 3600
#: seconds before its expiry a token is replaced
_RENEW_BEFORE = 300


class PushTokens:
    """Signs push tokens with one private key; ValueError when the key file is not a usable key."""

    def __init__(self, key_file: Path, issuer: str, clock: Callable[[], float] = time.time) -> None:
        try:
            key = load_pem_private_key(key_file.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(
                f"push.token_key_file {key_file}: not a PEM private key without a password ({exc})"
            ) from None
        if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
            self.algorithm = "ES256"
            public: dict[str, Any] = dict(ECAlgorithm.to_jwk(key.public_key(), as_dict=True))
            members: tuple[str, ...] = ("crv", "kty", "x", "y")
        elif isinstance(key, rsa.RSAPrivateKey) and key.key_size >= 2048:
            self.algorithm = "RS256"
            public = dict(RSAAlgorithm.to_jwk(key.public_key(), as_dict=True))
            members = ("e", "kty", "n")
        else:
            raise ValueError(
                f"push.token_key_file {key_file}: use an EC P-256 key (ES256) or an RSA key of 2048 bits or "
                "more (RS256)"
            )
        canonical = json.dumps({m: public[m] for m in members}, separators=(",", ":"), sort_keys=True)
        self.key_id = (
            base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()
        )
        self._jwk = {
            **{m: public[m] for m in members},
            "kid": self.key_id,
            "alg": self.algorithm,
            "use": "sig",
        }
        self._key = key
        self.issuer = issuer
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The public key set receivers verify tokens with."""
        return {"keys": [dict(self._jwk)]}

    def token(self, subscription: str, audience: str) -> str:
        """A token for ``subscription``'s requests to ``audience`` (cached until near its expiry)."""
        now = self._clock()
        cached = self._cache.get((subscription, audience))
        if cached is not None and cached[1] - _RENEW_BEFORE > now:
            return cached[0]
        issued = int(now)
        claims = {
            "iss": self.issuer,
            "aud": audience,
            "sub": subscription,
            "iat": issued,
            "exp": issued + TOKEN_LIFETIME,
        }
        token = jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"kid": self.key_id})
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[(subscription, audience)] = (token, issued + TOKEN_LIFETIME)
        return token
