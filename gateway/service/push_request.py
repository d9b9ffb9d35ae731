"""The HTTP request of one push delivery: its body and headers in the subscription's payload form.

* ``wrapped``: ``{"subscription": NAME, "message": MESSAGE}`` as ``application/json``, where MESSAGE is the
  object a poll answer's ``messages`` hold less its ``token`` and ``deadline`` (the gateway settles the
  message by the HTTP status; the renderer leaves them out).
* ``unwrapped``: the value as the body (``application/octet-stream``), the rest as headers:
  ``tubemq-topic``, ``tubemq-partition``, ``tubemq-offset`` (when known), ``tubemq-message-id``,
  ``tubemq-delivery-attempt``, ``tubemq-key``, ``tubemq-stream-id``, ``tubemq-msg-time`` (when the message
  has them) and each attribute ``NAME=VALUE`` as ``tubemq-attr-NAME: VALUE``; a name or value that a header
  cannot carry as it is (outside printable ASCII, or a character that is not a token character in a name)
  is percent-encoded (UTF-8), so ``urllib.parse.unquote`` gives it back.

Both forms carry ``tubemq-subscription`` and the Standard Webhooks headers
(:mod:`gateway.service.push_signature`: the signature only with a secret); ``webhook-id`` is the same on
every attempt of a message, so a receiver can drop a repeat.
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from urllib.parse import quote

from gateway.service.delivered import DeliveredMessage
from gateway.service.push_signature import webhook_headers
from gateway.service.push_subscription import PushSubscription

__all__ = ["ATTRIBUTE_PREFIX", "Renderer", "build_request", "webhook_id"]

#: renders one delivered message as the JSON object a poll answer holds, in a value format
Renderer = Callable[[DeliveredMessage, str], bytes]
#: the prefix of an attribute's header in the unwrapped form
ATTRIBUTE_PREFIX = "tubemq-attr-"
_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_VALUE_CHARS = frozenset(c for c in string.printable if c not in "\t\n\r\x0b\x0c%")


def webhook_id(message: DeliveredMessage) -> str:
    """The id a message keeps across its delivery attempts: its partition and message id."""
    return f"msg_{message.partition_key}_{message.message.message_id}"


def _name(text: str) -> str:
    return text if text and all(c in _TOKEN_CHARS and c != "%" for c in text) else quote(text, safe="")


def _value(text: str) -> str:
    return text if all(c in _VALUE_CHARS for c in text) else quote(text, safe=" ")


def build_request(
    subscription: PushSubscription,
    message: DeliveredMessage,
    render: Renderer,
    clock: Callable[[], float] = time.time,
    token: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of ``message``'s delivery to ``subscription``'s endpoint (with ``token`` as the
    bearer token, when given: :mod:`gateway.service.push_token`)."""
    headers = {"tubemq-subscription": subscription.name}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if subscription.payload == "wrapped":
        name = json.dumps(subscription.name).encode()
        body = b'{"subscription":' + name + b',"message":' + render(message, subscription.value_format) + b"}"
        headers["content-type"] = "application/json"
    else:
        consumed = message.message
        body = consumed.body
        headers["content-type"] = "application/octet-stream"
        headers["tubemq-topic"] = message.topic
        headers["tubemq-partition"] = message.partition_key
        if consumed.offset is not None:
            headers["tubemq-offset"] = str(consumed.offset)
        headers["tubemq-message-id"] = str(consumed.message_id)
        headers["tubemq-delivery-attempt"] = str(message.attempt)
        for header, text in (
            ("tubemq-key", consumed.key),
            ("tubemq-stream-id", consumed.stream_id),
            ("tubemq-msg-time", consumed.msg_time),
        ):
            if text is not None:
                headers[header] = _value(text)
        for key, text in consumed.attributes.items():
            headers[ATTRIBUTE_PREFIX + _name(key)] = _value(text)
    headers.update(webhook_headers(subscription.secret, webhook_id(message), int(clock()), body))
    return body, headers
