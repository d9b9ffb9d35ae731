"""Per-message redelivery of consumer instances: nack with a delay through a retry topic, dead letters, and
the delivery attempt count.

TubeMQ redelivers only whole batches (a fetched batch holds its partition until it is confirmed, consumed or
not). To give one message back without its siblings, the instance republishes it to the group's **retry
topic** with attributes saying where it came from, when it is due and which delivery attempt it will be,
and only once a broker acknowledged that publish does it settle the message's token (as committed), so the
batch can be confirmed. The instance subscribes the retry topic too and hands a retried message out again,
under its original topic, partition and offset, once it is due. Past ``max_delivery_attempts`` the message
goes to the **dead-letter topic** instead, with attributes naming the reason, the group and the original
position. A gateway that stops between the publish and the settle leaves the batch unconfirmed: the broker
delivers the original again (a duplicate, never a loss).

The attributes this module writes all start with ``gateway.`` (:data:`PREFIX`); a retried message is
delivered without them. A retry copy is signed (:mod:`gateway.service.retry_signature`): a message of the
retry topic whose signature does not verify, or that names another group, is never delivered, and a copy's
due time counts at most the policy's ``max_delay`` from when it is read.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.service.retry_signature import SIGNATURE, RetrySigner
from gateway.tubemq.consumer import ConsumedMessage

if TYPE_CHECKING:
    from gateway.service.delivered import DeliveredMessage

__all__ = [
    "DEAD_LETTER_REASON",
    "PREFIX",
    "AttemptMemory",
    "Origin",
    "RedeliveryPolicy",
    "Republisher",
    "dead_letter_attributes",
    "due_ms",
    "parse_retried",
    "republish",
    "retry_attributes",
    "wall_ms",
]

PREFIX = "gateway."
_TOPIC = "gateway.topic"
_PARTITION = "gateway.partitionKey"
_OFFSET = "gateway.offset"
_MESSAGE_ID = "gateway.messageId"
_ATTEMPT = "gateway.attempt"
_DUE = "gateway.due"
_GROUP = "gateway.group"
_STREAM_ID = "gateway.streamId"
_REASON = "gateway.reason"
_LAST = "gateway.lastFailure"
_ATTEMPTS = "gateway.deliveryAttempts"
#: the ``gateway.reason`` of a dead letter
DEAD_LETTER_REASON = "maxDeliveryAttemptsExceeded"


class Republisher(Protocol):
    """What redelivery needs of a producer: make a topic known, send one message and return once a broker
    stored it (raising otherwise). The core :class:`~gateway.tubemq.producer.Producer` is one."""

    async def register_topic(self, topic: str) -> object: ...

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        stream_id: str | None = None,
        msg_time: str | None = None,
    ) -> object: ...


@dataclass(frozen=True, slots=True)
class RedeliveryPolicy:
    """An instance's retry topic (None: no nack, deadline expiry rolls the whole batch back), dead-letter
    topic and the delivery attempts after which a failed message goes there (None: retried forever); with a
    retry topic, the ``signer`` of its copies, the longest delay a copy may ask for (seconds) and the most
    retries an instance may have published and not yet due (nacks above it are refused)."""

    retry_topic: str | None = None
    dead_letter_topic: str | None = None
    max_delivery_attempts: int | None = None
    signer: RetrySigner | None = None
    max_delay: float = 600.0
    max_outstanding: int = 1000


@dataclass(slots=True)
class Origin:
    """Where a message delivered again came from, and which delivery attempt it is; ``due`` is the
    monotonic time it may be delivered (retry topic) and ``retried`` says it came through the retry topic."""

    topic: str
    partition_key: str
    broker_id: int
    partition_id: int
    attempt: int
    due: float = 0.0
    retried: bool = False


def _origin_attributes(delivered: DeliveredMessage, group: str) -> dict[str, str]:
    """A copy's attributes: the message's own (less any ``gateway.`` ones), its group and original
    position."""
    message = delivered.message
    out = {k: v for k, v in message.attributes.items() if not k.startswith(PREFIX)}
    out[_GROUP] = group
    out[_TOPIC] = delivered.topic
    out[_PARTITION] = delivered.partition_key
    if message.offset is not None:
        out[_OFFSET] = str(message.offset)
    out[_MESSAGE_ID] = str(message.message_id)
    return out


def retry_attributes(
    delivered: DeliveredMessage, group: str, due_ms: int, signer: RetrySigner
) -> dict[str, str]:
    """The attributes of a message republished to the retry topic: its own plus where it came from, its
    stream id (the retry copy's stream id is the group, which the group's instances filter the retry topic
    by), which attempt its next delivery is, when it is due (Unix ms), and the signature of all that and
    the value."""
    out = _origin_attributes(delivered, group)
    if delivered.message.stream_id is not None:
        out[_STREAM_ID] = delivered.message.stream_id
    out[_ATTEMPT] = str(delivered.attempt + 1)
    out[_DUE] = str(due_ms)
    out[SIGNATURE] = signer.sign(out, delivered.message.body)
    return out


def dead_letter_attributes(delivered: DeliveredMessage, group: str, last_failure: str) -> dict[str, str]:
    """The attributes of a dead letter: its own plus the reason, the group, the original position, the
    delivery attempts made and how the last one ended (``nack`` or ``deadline``)."""
    out = _origin_attributes(delivered, group)
    out[_REASON] = DEAD_LETTER_REASON
    out[_ATTEMPTS] = str(delivered.attempt)
    out[_LAST] = last_failure
    return out


def parse_retried(
    message: ConsumedMessage, group: str, policy: RedeliveryPolicy, now: float, wall_ms: int
) -> tuple[ConsumedMessage, Origin] | None:
    """A message of ``group``'s retry topic as it is to be delivered (original offset and id, without the
    ``gateway.`` attributes) and where it came from, with its due time on the monotonic clock of ``now``
    (``wall_ms`` is the same moment in Unix ms), at most ``policy.max_delay`` from now; None when it is not a
    retry copy the gateway signed for ``group`` (published there by someone else: it is set aside)."""
    attrs = message.attributes
    signer = policy.signer
    if signer is None or attrs.get(_GROUP) != group or not signer.verify(attrs, message.body):
        return None
    try:
        topic = attrs[_TOPIC]
        partition_key = attrs[_PARTITION]
        attempt = int(attrs[_ATTEMPT])
        due_ms = int(attrs[_DUE])
        message_id = int(attrs[_MESSAGE_ID])
        offset_text = attrs.get(_OFFSET)
        offset = int(offset_text) if offset_text is not None else None
        parts = partition_key.split(":")
        broker_id, partition_id = int(parts[0]), int(parts[-1])
    except (KeyError, ValueError, IndexError):
        return None
    stripped = ConsumedMessage(
        message_id=message_id,
        body=message.body,
        attributes={k: v for k, v in attrs.items() if not k.startswith(PREFIX)},
        stream_id=attrs.get(_STREAM_ID),
        msg_time=message.msg_time,
        flag=message.flag,
        index=message.index,
        offset=offset,
        key=message.key,
    )
    due = now + min(max(0, due_ms - wall_ms) / 1000, policy.max_delay)
    origin = Origin(topic, partition_key, broker_id, partition_id, max(attempt, 1), due, retried=True)
    return stripped, origin


def wall_ms() -> int:
    """Now in Unix milliseconds, rounded down."""
    return time.time_ns() // 1_000_000


def due_ms(wall: int, delay: float) -> int:
    """When a message delayed ``delay`` seconds from now is due, in Unix ms, never before: ``wall`` is now
    rounded down (:func:`wall_ms`), so now may be up to a millisecond later, and the delay is rounded up to
    whole milliseconds (from microseconds: 1.001 s is 1001 ms, where int(1.001 * 1000) is 1000). A reader
    of the retry topic counts the time left from its own ``wall_ms``, rounded down too: it waits at least
    that long."""
    return wall + 1 + -(-round(delay * 1_000_000) // 1000)


class AttemptMemory:
    """Delivery attempts of messages this instance delivered and rolled back (a whole batch goes back to the
    broker), by partition and message id, so that their next delivery here counts on. Bounded: the oldest
    entries are forgotten first (their next delivery then counts from 1 again)."""

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = 10_000) -> None:
        self._entries: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._entries)

    def delivered_again(self, partition_key: str, message_id: int, attempt: int) -> None:
        """The message, delivered as ``attempt``, was rolled back: its next delivery is ``attempt + 1``."""
        entries = self._entries
        entries[(partition_key, message_id)] = attempt + 1
        entries.move_to_end((partition_key, message_id))
        while len(entries) > self._limit:
            entries.popitem(last=False)

    def take(self, partition_key: str, message_id: int) -> int:
        """The attempt of the message's delivery now (1 when unknown); forgets it."""
        return self._entries.pop((partition_key, message_id), 1)


async def republish(
    republisher: Republisher,
    policy: RedeliveryPolicy,
    group: str,
    delivered: DeliveredMessage,
    *,
    due_ms: int,
    why: str,
) -> bool:
    """Publish a delivered message of ``group`` to the retry topic, due at ``due_ms`` as its next delivery
    attempt (False), or, at its ``max_delivery_attempts``-th attempt, to the dead-letter topic naming ``why``
    its last delivery failed (True). Returns once a broker stored it; raises otherwise."""
    assert policy.retry_topic is not None
    message = delivered.message
    limit = policy.max_delivery_attempts
    dead = limit is not None and policy.dead_letter_topic is not None and delivered.attempt >= limit
    if dead:
        assert policy.dead_letter_topic is not None
        topic = policy.dead_letter_topic
        attributes = dead_letter_attributes(delivered, group, why)
    else:
        assert policy.signer is not None
        topic = policy.retry_topic
        attributes = retry_attributes(delivered, group, due_ms, policy.signer)
    await republisher.send(
        topic,
        message.body,
        key=message.key,
        attributes=attributes,
        # a retry copy's stream id is the group: the group's instances filter the retry topic by it
        stream_id=message.stream_id if dead else group,
        msg_time=message.msg_time,
    )
    return dead
