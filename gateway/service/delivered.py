"""What a consumer instance hands out and answers: delivered messages (and their runs per partition, for
the renderers) and the outcomes of commits, nacks and deadline extensions."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.wire import slots_constructor

__all__ = [
    "CommitResult",
    "DeadlineResult",
    "DeliveredMessage",
    "NackResult",
    "new_delivered",
    "partition_runs",
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
#: delivered message than running ``__init__``; gateway/tubemq/wire/speedups.py)
new_delivered = slots_constructor(DeliveredMessage)


def partition_runs(
    messages: Sequence[DeliveredMessage],
) -> Iterator[tuple[tuple[str, str, int, int], Sequence[DeliveredMessage]]]:
    """Consecutive messages of one partition, as ((topic, partition_key, broker_id, partition_id), run):
    renderers encode a partition's fields once per run."""
    start = 0
    count = len(messages)
    while start < count:
        first = messages[start]
        topic, key, broker_id, partition_id = (
            first.topic,
            first.partition_key,
            first.broker_id,
            first.partition_id,
        )
        end = start + 1
        while end < count:
            m = messages[end]
            if (
                m.partition_key != key
                or m.topic != topic
                or m.broker_id != broker_id
                or m.partition_id != partition_id
            ):
                break
            end += 1
        yield (topic, key, broker_id, partition_id), messages[start:end]
        start = end


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
