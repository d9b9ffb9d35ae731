"""A verified client certificate's subject, carried from the replica a client reached to the replica that owns
its consumer instance.

A request (REST) or call (gRPC) for another replica's instance is forwarded there, and the owner authenticates
it again. An API key or a bearer token travels with it; a client certificate cannot (the forwarding replica's
TLS connection presents the replicas' own certificate). So the forwarding replica, which verified the
client's certificate, sends its subject in ``x-tubemq-replica-cert``, signed with the replicas' shared
``consumers.id_secret`` (HMAC-SHA256) together with the time it was signed; the owner believes the subject
only on a forwarded request, with a valid tag, signed at most :data:`MAX_AGE` seconds ago. Without a shared
secret nothing is sent and nothing believed. A client's own such header is never passed on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

__all__ = ["MAX_AGE", "REPLICA_CERT_KEY", "sign_subject", "verified_subject"]

#: the header (REST) and metadata key (gRPC)
REPLICA_CERT_KEY = "x-tubemq-replica-cert"
#: seconds a signed subject is believed after it was signed (the replicas' clocks agree within this)
MAX_AGE = 60.0
_CONTEXT = b"tubemq-gateway replica client certificate\n"
_TAG_BYTES = 16
_MAX_LENGTH = 4096


def _tag(secret: bytes, signed: str) -> str:
    digest = hmac.new(secret, _CONTEXT + signed.encode("ascii"), hashlib.sha256).digest()[:_TAG_BYTES]
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def sign_subject(secret: bytes, subject: str, now: float | None = None) -> str | None:
    """The header value carrying ``subject``; None without a shared secret."""
    if not secret:
        return None
    encoded = base64.urlsafe_b64encode(subject.encode("utf-8")).decode("ascii")
    signed = f"{int(time.time() if now is None else now)}.{encoded}"
    return f"{signed}.{_tag(secret, signed)}"


def verified_subject(secret: bytes, value: object, now: float | None = None) -> str | None:
    """The subject of a header value :func:`sign_subject` made with ``secret`` at most :data:`MAX_AGE`
    seconds ago; None for anything else."""
    if not secret or not isinstance(value, str) or len(value) > _MAX_LENGTH:
        return None
    if not value.isascii() or value.count(".") != 2:
        return None
    signed, _, tag = value.rpartition(".")
    if not hmac.compare_digest(tag.encode("ascii", "replace"), _tag(secret, signed).encode("ascii")):
        return None
    stamp, _, encoded = signed.partition(".")
    try:
        age = (time.time() if now is None else now) - int(stamp)
        subject = base64.urlsafe_b64decode(encoded.encode("ascii")).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        return None
    return subject if subject and -MAX_AGE <= age <= MAX_AGE else None
