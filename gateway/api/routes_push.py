"""The public keys of push subscriptions' JWTs (docs/push.md, Tokens): what a receiver verifies them with."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gateway.api.deps import RuntimeDep

router = APIRouter(tags=["push"])


class PushKey(BaseModel):
    """A public key (RFC 7517): EC P-256 (``crv``, ``x``, ``y``) or RSA (``n``, ``e``)."""

    kty: str = Field(description="`EC` or `RSA`")
    kid: str = Field(description="the key id JWT headers name (its RFC 7638 thumbprint)")
    alg: str = Field(description="`ES256` or `RS256`")
    use: str = Field(description="`sig`")
    crv: str | None = Field(None, description="EC: `P-256`")
    x: str | None = Field(None, description="EC: the point's x, base64url")
    y: str | None = Field(None, description="EC: the point's y, base64url")
    n: str | None = Field(None, description="RSA: the modulus, base64url")
    e: str | None = Field(None, description="RSA: the exponent, base64url")


class PushKeys(BaseModel):
    """A JSON Web Key Set (RFC 7517)."""

    keys: list[PushKey] = Field(description="the public key of push.token_key_file; empty without one")


@router.get(
    "/v1/push/jwks",
    operation_id="getPushKeys",
    summary="The keys that sign push subscriptions' tokens (JWKS; no credentials needed)",
    response_model=PushKeys,
    response_model_exclude_none=True,
)
async def push_keys(runtime: RuntimeDep) -> dict[str, list[dict[str, str]]]:
    tokens = runtime.push_tokens
    return tokens.jwks() if tokens is not None else {"keys": []}
