"""What the parts of a consumer instance (:mod:`gateway.service.instance`) share: the records of batches
and messages being handed out, and the state every part reads and changes (declared here, set by
``ConsumerInstance.__init__``)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import Gone, InvalidInput
from gateway.service.redelivery import AttemptMemory, Origin, RedeliveryPolicy, Republisher
from gateway.tubemq.consumer import ConsumedMessage, Consumer
from gateway.tubemq.events import EventBus

__all__ = ["Batch", "Budget", "Entry", "InstanceParts", "Pending", "parse_token"]


@dataclass(eq=False, slots=True)
class Batch:
    """A core batch being handed out; hashed by identity."""

    context: str
    topic: str
    partition_key: str
    broker_id: int
    partition_id: int
    fetched_at: float
    undelivered: int
    uncommitted: int = 0
    #: messages committed while the rest of the batch is out: the broker gets them with the batch
    committed: int = 0
    live: bool = True
    #: the broker index offset the batch was read from (-1 unknown) and the wire position of its first
    #: message: where the group's offset goes back to when the batch is rolled back
    start_offset: int = -1
    first_index: int = 0


#: a buffered message, its batch, and where it came from when it is delivered again (else None: attempt 1)
Entry = tuple[Batch, ConsumedMessage, Origin | None]
#: a delivered, uncommitted message and its batch
Pending = tuple[Batch, DeliveredMessage]


@dataclass(slots=True)
class Budget:
    max_messages: int
    max_bytes: int
    used: int = 0
    out: list[DeliveredMessage] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return len(self.out) >= self.max_messages or self.used >= self.max_bytes


class InstanceParts:
    """The state of one consumer instance that its parts share; times in seconds (``_clock``'s)."""

    instance_id: str
    group: str
    consumer: Consumer
    policy: RedeliveryPolicy
    #: seconds from delivery to a message's deadline
    ack_deadline: float
    closed_reason: str | None
    _republisher: Republisher | None
    #: where redelivery counts go (the metrics), None: nowhere
    _events: EventBus | None
    _clock: Callable[[], float]
    _wall: Callable[[], int]
    _commit_timeout: float
    #: retried messages not due yet: (due, order, entry)
    _delayed: list[tuple[float, int, Entry]]
    _delay_order: itertools.count[int]
    #: tokens whose retry or dead-letter publish is in flight
    _settling: set[int]
    #: due times (``_clock``'s) of the retry copies this instance published that are not due yet, a heap
    _outstanding: list[float]
    #: no pending message's deadline is earlier (a lower bound: extensions only move deadlines later)
    _next_deadline: float
    _attempts: AttemptMemory
    _buffer: deque[Entry]
    _pending: dict[int, Pending]
    _batches: dict[str, Batch]
    #: partitions whose last batch an auto-commit confirmed in the core alone (``Consumer.confirm_local``):
    #: a poll sends what no fetch of its own carried before it answers
    _commits_due: set[str]

    def _check_open(self) -> None:
        if self.closed_reason is not None:
            raise Gone(
                f"consumer instance {self.instance_id} was {self.closed_reason}; create a new instance with "
                f"POST /v1/consumers/{self.group}",
                resource_name=self.instance_id,
            )


def parse_token(token: str, index: int) -> int:
    if not isinstance(token, str) or not token.isascii() or not token.isdigit() or len(token) > 18:
        raise InvalidInput(
            f"commit token {str(token)[:40]!r} is not a token this gateway issued", field=f"tokens[{index}]"
        )
    return int(token)
