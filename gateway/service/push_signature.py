"""Standard Webhooks headers of push requests: ``webhook-id``, ``webhook-timestamp`` and, with a secret, the
``webhook-signature``: an HMAC-SHA256 over ``id.timestamp.body`` with the subscription's secret (the
bytes after ``whsec_``, base64-decoded), sent as ``v1,<base64>``. Receivers verify them with any Standard
Webhooks library (``standardwebhooks`` on PyPI)."""

from __future__ import annotations

import base64
import hashlib
import hmac

__all__ = ["webhook_headers"]


def webhook_headers(secret: bytes, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of ``body`` sent as message ``message_id`` at ``timestamp`` (Unix seconds): the id and
    the timestamp always, the signature with a ``secret``."""
    headers = {"webhook-id": message_id, "webhook-timestamp": str(timestamp)}
    if secret:
        signed = f"{message_id}.{timestamp}.".encode() + body
        digest = hmac.new(secret, signed, hashlib.sha256).digest()
        headers["webhook-signature"] = "v1," + base64.b64encode(digest).decode("ascii")
    return headers
