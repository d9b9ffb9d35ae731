"""Settings of push subscriptions (docs/push.md). Part of :mod:`gateway.config`, which re-exports every
name."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from gateway.config.edge import json_or_comma_list

__all__ = ["PushSettings"]


class PushSettings(BaseModel):
    """Where push subscriptions are defined and which endpoints they may reach."""

    subscriptions_file: str = Field(
        "",
        description='a JSON file {"subscriptions": [...]} of push subscriptions (docs/push.md), read at '
        "start and again when it changes; empty = none",
    )
    reload_interval: float = Field(
        5.0, gt=0, le=3600, description="seconds between checks of push.subscriptions_file for a change"
    )
    allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="endpoints push subscriptions may reach: host names, *.domain (its subdomains), * (any "
        "name and any public address), IP addresses and CIDR networks; a private, loopback or link-local "
        "address only when a listed network holds it; JSON list or comma-separated; empty = none",
    )
    ca_file: str = Field(
        "",
        description="PEM file of the CA certificates that endpoints' TLS certificates are checked against; "
        "empty = the system's CAs",
    )
    token_key_file: str = Field(
        "",
        description="PEM private key (EC P-256: ES256, or RSA of 2048 bits or more: RS256) that signs the "
        "JWTs of subscriptions with token true; its public key is served at GET /v1/push/jwks; give every "
        "replica the same file; empty = no tokens",
    )
    token_issuer: str = Field(
        "",
        description="the iss of push JWTs; empty = the gateway's advertised URL (consumers.advertised_url)",
    )
    max_subscriptions: int = Field(
        100,
        ge=1,
        le=10_000,
        description="the most push subscriptions defined, in the file and the API together",
    )
    redis_prefix: str = Field(
        "tubemq-gateway:push:",
        min_length=1,
        description="prefix of the Redis keys of the subscriptions made through the API (kept in the Redis "
        "of idempotency.redis_url, which every replica shares; without it the API only reads)",
    )
    max_answer_bytes: int = Field(
        65536,
        ge=0,
        le=16 << 20,
        description="bytes of an endpoint's answer read at most (the rest is dropped)",
    )
    poll_wait: float = Field(
        1.0,
        gt=0,
        le=60,
        description="seconds a push subscription's poll waits for messages before polling again",
    )
    error_backoff: float = Field(
        1.0,
        gt=0,
        le=600,
        description="seconds a push subscription waits after it could not join its group or poll, before "
        "trying again",
    )

    @field_validator("allow", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return json_or_comma_list(value)
