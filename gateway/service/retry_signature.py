"""Signatures of the gateway's own retry copies.

A retry copy's ``gateway.*`` attributes tell an instance under which topic, partition, offset and message id
to deliver it, which attempt it is and when it is due. Anyone allowed to publish on a retry topic could
write such attributes by hand, so every copy the gateway publishes carries ``gateway.signature``: an
HMAC-SHA256 over its ``gateway.*`` attributes (the group among them) and its value, keyed from a secret every
replica and worker shares (:func:`gateway.runtime.checks.retry_secrets`). An instance delivers a copy of the
retry topic only when the signature verifies under one of its keys and the copy names its group; anything
else there is set aside (confirmed without delivery, counted in ``retry_copies_set_aside_total``).

Several keys verify (the current one signs): after the secret changes, copies signed with the former one
are still delivered as long as it is listed as a previous secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence

__all__ = ["OPEN_MODE_SECRET", "SIGNATURE", "RetrySigner"]

#: the attribute holding a retry copy's signature
SIGNATURE = "gateway.signature"
#: the key of a gateway whose operator set no secret (open mode, one replica): anyone may publish and read
#: every topic there anyway; the signature then keeps out stray messages, not an attacker
OPEN_MODE_SECRET = "tubemq-gateway open mode retry copies"
_PREFIX = "gateway."
_CONTEXT = b"tubemq-gateway retry copy v1"


class RetrySigner:
    """Signs retry copies with the first of ``secrets`` and verifies them with any of them."""

    __slots__ = ("_keys",)

    def __init__(self, secrets: Sequence[bytes]) -> None:
        if not secrets or not all(secrets):
            raise ValueError("a retry signer needs at least one non-empty secret")
        # A key of its own, derived from the secret, so that nothing else signed with it verifies here.
        self._keys = [hmac.new(s, _CONTEXT, hashlib.sha256).digest() for s in secrets]

    def __repr__(self) -> str:
        return f"<RetrySigner keys={len(self._keys)}>"

    def sign(self, attributes: Mapping[str, str], body: bytes) -> str:
        """The signature of a copy with these attributes (its ``gateway.*`` ones count) and value."""
        return _digest(self._keys[0], attributes, body)

    def verify(self, attributes: Mapping[str, str], body: bytes) -> bool:
        """Whether ``attributes`` hold a signature of them and ``body`` under one of the keys."""
        given = attributes.get(SIGNATURE)
        if given is None:
            return False
        return any(hmac.compare_digest(given, _digest(key, attributes, body)) for key in self._keys)


def _digest(key: bytes, attributes: Mapping[str, str], body: bytes) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    signed = sorted((k, v) for k, v in attributes.items() if k.startswith(_PREFIX) and k != SIGNATURE)
    mac.update(len(signed).to_bytes(4, "big"))
    for name, value in signed:
        for part in (name.encode(), value.encode()):  # length-prefixed: no two sets encode alike
            mac.update(len(part).to_bytes(4, "big"))
            mac.update(part)
    mac.update(len(body).to_bytes(8, "big"))
    mac.update(body)
    return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode("ascii")
