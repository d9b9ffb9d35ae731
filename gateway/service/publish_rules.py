"""The publish rules as the adapters' readers of a batch take them: the preparer of a batch's messages
(:func:`batch_preparer`, the service's own too), a message of a value and attributes prepared once
(:func:`plain_preparer`), and the attribute rules a compiled reader checks itself
(:data:`ATTRIBUTE_SEPARATORS`, :data:`RESERVED_IN_TEXT`, :data:`RESERVED_IN_NAMES`), as the core's
:mod:`gateway.tubemq.wire.attributes` defines them.

A reader that prepares messages itself hands them to :meth:`PublishService.publish_prepared
<gateway.service.publish.PublishService.publish_prepared>`; a message that breaks a rule is not its to name:
it hands the batch to the reference reader, and the service names the rule when it prepares the messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.tubemq.errors import InvalidMessage
from gateway.tubemq.wire import (
    ITEM_SEP,
    KV_SEP,
    RESERVED_IN_NAMES,
    RESERVED_IN_TEXT,
    BatchPreparer,
    PreparedMessage,
    prepare_message,
)

__all__ = [
    "ATTRIBUTE_SEPARATORS",
    "RESERVED_IN_NAMES",
    "RESERVED_IN_TEXT",
    "Prepare",
    "batch_preparer",
    "plain_preparer",
]

#: the characters no attribute name or value may hold: they separate items, and a name from its value
ATTRIBUTE_SEPARATORS = ITEM_SEP + KV_SEP

#: prepares a message by the publish rules: ``prepare_message``'s arguments, its result, its InvalidMessage
Prepare = Callable[..., PreparedMessage]

#: prepares a message of a value and attributes: its PreparedMessage, or None when it breaks a rule
PlainPreparer = Callable[[bytes, Mapping[str, str] | None], PreparedMessage | None]


def batch_preparer(count: int) -> Prepare:
    """What prepares the ``count`` messages of one batch by the publish rules: ``payload.prepare_message``
    for one, else a new ``BatchPreparer``'s (a batch's messages share their attribute text mostly: it
    prepares each distinct one once)."""
    return prepare_message if count == 1 else BatchPreparer().prepare


def plain_preparer(count: int) -> PlainPreparer:
    """What prepares the ``count`` messages of one batch, each a value and attributes at most, by the
    publish rules (:func:`batch_preparer`)."""
    prepare = batch_preparer(count)

    def prepared(value: bytes, attributes: Mapping[str, str] | None) -> PreparedMessage | None:
        try:
            return prepare(value, attributes)
        except InvalidMessage:
            return None

    return prepared
