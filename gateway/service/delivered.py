"""What a consumer instance hands out and answers: runs of delivered messages (what polls hand out and the
renderers read), a delivered message on its own (built from its run where one is needed), and the outcomes
of commits, nacks and deadline extensions."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.wire import slots_constructor

__all__ = [
    "CommitResult",
    "DeadlineResult",
    "DeliveredMessage",
    "DeliveredRun",
    "NackResult",
    "new_delivered",
]


@dataclass(slots=True)
class DeliveredMessage:
    """A message handed to the client (read-only; not frozen, which would cost five times as much to build
    per message). ``token`` commits it and is the SSE event id; ``offset`` is the broker index offset when
    the core knows it exactly, else None. ``attempt`` is the delivery attempt (1 + nacks + expiries, as far
    as this gateway knows), ``deadline`` the monotonic time it is redelivered unless committed, and
    ``deadline_ms`` the same moment in Unix milliseconds."""

    seq: int
    topic: str
    partition_key: str
    broker_id: int
    partition_id: int
    message: ConsumedMessage
    attempt: int = 1
    deadline: float = math.inf
    deadline_ms: int = 0

    @property
    def token(self) -> str:
        return str(self.seq)

    @property
    def offset(self) -> int | None:
        return self.message.offset


#: ``DeliveredMessage(*all nine fields)``, compiled where the extension is loaded (half a microsecond less per
#: message than running ``__init__``; gateway/tubemq/wire/speedups.py): what builds the per-message view of
#: a run where one is needed (push delivery, a nack's copy)
new_delivered = slots_constructor(DeliveredMessage)


@dataclass(slots=True)
class DeliveredRun:
    """Messages handed out together that share their partition, delivery attempt and deadline: ``count``
    messages of ``messages`` from index ``start``, with the tokens ``first`` to ``first + count - 1``
    (consecutive). What a poll hands out and what the renderers read, a record per run instead of one per
    message; read-only once handed out. ``deadline`` is monotonic, ``deadline_ms`` the same moment in Unix
    milliseconds."""

    first: int
    topic: str
    partition_key: str
    broker_id: int
    partition_id: int
    messages: list[ConsumedMessage]
    start: int
    count: int
    attempt: int = 1
    deadline: float = math.inf
    deadline_ms: int = 0

    @property
    def last(self) -> int:
        """The token (sequence number) of the run's last message."""
        return self.first + self.count - 1

    def message(self, i: int) -> DeliveredMessage:
        """The ``i``-th message of the run as a record of its own."""
        return new_delivered(
            self.first + i,
            self.topic,
            self.partition_key,
            self.broker_id,
            self.partition_id,
            self.messages[self.start + i],
            self.attempt,
            self.deadline,
            self.deadline_ms,
        )

    def part(self, i: int, count: int, deadline: float, deadline_ms: int) -> DeliveredRun:
        """``count`` messages of the run from its ``i``-th, with the given deadline."""
        return DeliveredRun(
            self.first + i,
            self.topic,
            self.partition_key,
            self.broker_id,
            self.partition_id,
            self.messages,
            self.start + i,
            count,
            self.attempt,
            deadline,
            deadline_ms,
        )


@dataclass(frozen=True, slots=True)
class CommitResult:
    """``committed`` tokens were accepted, ``rolled_back`` messages will be redelivered; ``stale`` tokens were
    not pending (unknown, already committed, rolled back, or lost with their partition). ``awaiting_batch``
    messages of the instance are committed while the rest of their batch is out: TubeMQ confirms whole
    batches, so the broker has them once their batch is complete or the instance leaves the group."""

    committed: int
    rolled_back: int
    stale: list[str]
    pending: int
    awaiting_batch: int = 0


@dataclass(frozen=True, slots=True)
class NackResult:
    """``retried`` messages went to the retry topic, ``dead_lettered`` to the dead-letter topic (each
    acknowledged by a broker, then settled); ``failed`` tokens stay pending (their publish failed:
    ``error``); ``stale`` tokens were not pending."""

    retried: int
    dead_lettered: int
    stale: list[str]
    failed: list[str]
    pending: int
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class DeadlineResult:
    """``extended`` tokens now have the deadline ``deadline_ms`` (Unix ms); ``stale`` ones were not
    pending."""

    extended: int
    stale: list[str]
    deadline_ms: int
