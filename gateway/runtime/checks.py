"""Settings that must agree before the runtime starts: the consumer id secret, the advertised URL several
replicas need, and the replicas this one may forward to. A :class:`ConfigurationError` says what to set."""

from __future__ import annotations

import secrets

from gateway.config import Settings
from gateway.service.instance_id import normalize_base_url
from gateway.service.peers import PeerPolicy
from gateway.service.retry_signature import OPEN_MODE_SECRET

__all__ = ["ConfigurationError", "check_advertised_url", "consumer_id_secret", "peer_policy", "retry_secrets"]


class ConfigurationError(ValueError):
    """The settings cannot work together; the message says what to set."""


def consumer_id_secret(settings: Settings) -> bytes:
    """The key signing consumer instance ids: ``consumers.id_secret``; without one, a random key of this
    process, which only a single replica in open mode may use (its ids then name no other replica, so a
    forged id never verifies). Raises ConfigurationError when a shared secret is needed but missing."""
    c = settings.consumers
    if c.id_secret:
        return c.id_secret.encode("utf-8")
    needs: list[str] = []
    if settings.auth.mode == "required":
        needs.append("auth.mode is required")
    if c.replicas > 1:
        needs.append(f"consumers.replicas is {c.replicas}")
    if c.forward_allow:
        needs.append("consumers.forward_allow names other replicas")
    if needs:
        raise ConfigurationError(
            f"consumers.id_secret is not set, but {' and '.join(needs)}: set the same secret on every "
            "replica, e.g. TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET=$(openssl rand -hex 32) (the Helm chart "
            "generates one)"
        )
    return secrets.token_bytes(32)


def retry_secrets(settings: Settings, generated: str | None = None) -> list[bytes]:
    """The secrets of retry copies, the signing one first: ``consumers.retry_secret``, else ``id_secret``
    as the operator set it, else in open mode (any client may publish and read everything there)
    :data:`~gateway.service.retry_signature.OPEN_MODE_SECRET`, else ``generated``, a secret of this run
    (``serve --workers N`` with authentication and no id_secret: it sets the answer as its workers'
    retry_secret); then ``consumers.previous_retry_secrets``. Raises ConfigurationError when none is
    there (authentication on, no secret set)."""
    c = settings.consumers
    current = (
        c.retry_secret or c.id_secret or (OPEN_MODE_SECRET if settings.auth.mode == "open" else generated)
    )
    if not current:
        raise ConfigurationError(
            "auth.mode is required but neither consumers.retry_secret nor consumers.id_secret is set: set "
            "the same secret on every replica, e.g. TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET=$(openssl rand -hex "
            "32) (the Helm chart generates one)"
        )
    return [s.encode("utf-8") for s in (current, *c.previous_retry_secrets)]


def check_advertised_url(settings: Settings) -> None:
    """Several replicas need ``consumers.advertised_url``: the ids of a replica's instances name it and the
    other replicas forward there (an address derived from the listen address may be one they cannot
    reach). Raises ConfigurationError."""
    c = settings.consumers
    if c.replicas > 1 and not c.advertised_url:
        raise ConfigurationError(
            f"consumers.replicas is {c.replicas} but consumers.advertised_url is not set: set the URL the "
            "other replicas reach this one at, e.g. TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL="
            "http://$(POD_IP):8080 (the Helm chart sets it)"
        )


def peer_policy(settings: Settings) -> PeerPolicy:
    """The replicas this one may forward consumer requests to (``consumers.forward_*``)."""
    c = settings.consumers
    return PeerPolicy.build(normalize_base_url(settings.advertised_url()), c.forward_allow, c.forward_ports)
