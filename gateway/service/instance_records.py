"""The records a consumer instance (:mod:`gateway.service.instance`) keeps of what it hands out: a core
batch being delivered, a stretch of fetched messages waiting in the buffer, a handed-out run pending its
commits, a poll's budget, and the commit token's rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter

from gateway.service.delivered import DeliveredRun
from gateway.service.errors import InvalidInput
from gateway.service.redelivery import Origin
from gateway.tubemq.consumer import ConsumedMessage

__all__ = ["Batch", "Budget", "PendingRun", "Segment", "parse_token", "value_sizes"]

_BODY = attrgetter("body")


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


def value_sizes(messages: list[ConsumedMessage]) -> list[int]:
    """The value bytes of ``messages[: i + 1]`` at ``i``: a budget's cut of a segment is a bisection."""
    return list(accumulate(map(len, map(_BODY, messages))))


@dataclass(eq=False, slots=True)
class Segment:
    """Buffered messages of one batch that are delivered alike: ``messages[start:end]``, from where
    ``origin`` says when they are delivered again (else None: attempt 1, the batch's partition). ``sizes``
    is :func:`value_sizes` of ``messages``, shared by the segments of one batch."""

    batch: Batch
    messages: list[ConsumedMessage]
    start: int
    end: int
    sizes: list[int]
    origin: Origin | None = None


@dataclass(eq=False, slots=True)
class PendingRun:
    """A handed-out run and its batch while any of its messages is not settled (committed, rolled back,
    lost): ``open`` messages are not; ``settled`` marks the settled ones by index (None while none is), and
    ``deadlines`` holds the (monotonic, Unix ms) deadlines of messages extended apart from their run."""

    run: DeliveredRun
    batch: Batch
    open: int
    settled: bytearray | None = None
    deadlines: dict[int, tuple[float, int]] | None = None

    def is_open(self, i: int) -> bool:
        settled = self.settled
        return settled is None or not settled[i]

    def deadline(self, i: int) -> tuple[float, int]:
        """The ``i``-th message's deadline (monotonic, Unix ms)."""
        deadlines = self.deadlines
        if deadlines is not None:
            extended = deadlines.get(i)
            if extended is not None:
                return extended
        return self.run.deadline, self.run.deadline_ms


@dataclass(slots=True)
class Budget:
    """What one poll may still deliver (messages, value bytes), and what it delivered so far (``out``,
    ``taken`` messages)."""

    max_messages: int
    max_bytes: int
    used: int = 0
    taken: int = 0
    out: list[DeliveredRun] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.taken >= self.max_messages or self.used >= self.max_bytes


def parse_token(token: str, index: int) -> int:
    """The sequence number a commit token names; InvalidInput naming ``tokens[index]`` for anything else."""
    if not isinstance(token, str) or not token.isascii() or not token.isdigit() or len(token) > 18:
        raise InvalidInput(
            f"commit token {str(token)[:40]!r} is not a token this gateway issued", field=f"tokens[{index}]"
        )
    return int(token)
