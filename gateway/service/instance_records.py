"""The records a consumer instance (:mod:`gateway.service.instance`) keeps of what it hands out: a core
batch being delivered, a buffered or delivered message with its batch, a poll's budget, and the commit
token's rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import InvalidInput
from gateway.service.redelivery import Origin
from gateway.tubemq.consumer import ConsumedMessage

__all__ = ["Batch", "Budget", "Entry", "Pending", "parse_token"]


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
    #: messages and value bytes fetched (what the batch holds while its messages are not all delivered)
    count: int = 0
    size: int = 0


#: a buffered message, its batch, and where it came from when it is delivered again (else None: attempt 1)
Entry = tuple[Batch, ConsumedMessage, Origin | None]
#: a delivered, uncommitted message and its batch
Pending = tuple[Batch, DeliveredMessage]


@dataclass(slots=True)
class Budget:
    """What one poll may still deliver (messages, value bytes), and what it delivered so far."""

    max_messages: int
    max_bytes: int
    used: int = 0
    out: list[DeliveredMessage] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return len(self.out) >= self.max_messages or self.used >= self.max_bytes


def parse_token(token: str, index: int) -> int:
    """The sequence number a commit token names; InvalidInput naming ``tokens[index]`` for anything else."""
    if not isinstance(token, str) or not token.isascii() or not token.isdigit() or len(token) > 18:
        raise InvalidInput(
            f"commit token {str(token)[:40]!r} is not a token this gateway issued", field=f"tokens[{index}]"
        )
    return int(token)
