"""What one poll (or one step of a stream) hands out: its runs of messages (:class:`DeliveredRun`), which the
renderers read a run at a time, seen as the sequence of its messages where someone needs one record per
message (push delivery, tests), built as they are asked for."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import overload

from gateway.service.delivered import DeliveredMessage, DeliveredRun

__all__ = ["Delivery", "runs_of"]


class Delivery(Sequence[DeliveredMessage]):
    """The messages of ``runs`` (tokens ascending), in order: ``len`` counts messages, an index or an
    iteration builds a :class:`DeliveredMessage` of its run; ``runs`` is what the renderers take."""

    __slots__ = ("_ends", "runs", "total")

    def __init__(self, runs: list[DeliveredRun], count: int | None = None) -> None:
        self.runs = runs
        #: how many messages the runs hold
        self.total = sum(r.count for r in runs) if count is None else count
        self._ends: list[int] | None = None

    def __repr__(self) -> str:
        return f"<Delivery {self.total} messages in {len(self.runs)} runs>"

    def __len__(self) -> int:
        return self.total

    def __bool__(self) -> bool:
        return self.total > 0

    def __eq__(self, other: object) -> bool:
        """Equal to a delivery or a list of the same messages."""
        if isinstance(other, Delivery | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Iterable[DeliveredMessage]) -> list[DeliveredMessage]:
        """The messages of both, as a list."""
        return [*self, *other]

    def __radd__(self, other: Iterable[DeliveredMessage]) -> list[DeliveredMessage]:
        return [*other, *self]

    def __iter__(self) -> Iterator[DeliveredMessage]:
        for run in self.runs:
            for i in range(run.count):
                yield run.message(i)

    @overload
    def __getitem__(self, index: int) -> DeliveredMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[DeliveredMessage]: ...

    def __getitem__(self, index: int | slice) -> DeliveredMessage | list[DeliveredMessage]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.total))]
        if index < 0:
            index += self.total
        if not 0 <= index < self.total:
            raise IndexError("delivery index out of range")
        ends = self._ends
        if ends is None:
            ends = self._ends = list(accumulate(r.count for r in self.runs))
        k = bisect_right(ends, index)
        return self.runs[k].message(index - (ends[k - 1] if k else 0))

    @property
    def tokens(self) -> list[str]:
        """The commit tokens of the messages, in order."""
        return [str(seq) for run in self.runs for seq in range(run.first, run.first + run.count)]


def runs_of(messages: Iterable[DeliveredMessage]) -> Delivery:
    """``messages`` as runs: a message joins the run before it when its token follows that run's last and it
    shares the run's partition, attempt and deadline (a renderer's input made of single records)."""
    runs: list[DeliveredRun] = []
    last: DeliveredRun | None = None
    for m in messages:
        if (
            last is not None
            and m.seq == last.first + last.count
            and m.topic == last.topic
            and m.partition_key == last.partition_key
            and m.broker_id == last.broker_id
            and m.partition_id == last.partition_id
            and m.attempt == last.attempt
            and m.deadline_ms == last.deadline_ms
            and m.deadline == last.deadline
        ):
            last.messages.append(m.message)
            last.count += 1
            continue
        last = DeliveredRun(
            m.seq,
            m.topic,
            m.partition_key,
            m.broker_id,
            m.partition_id,
            [m.message],
            0,
            1,
            m.attempt,
            m.deadline,
            m.deadline_ms,
        )
        runs.append(last)
    return Delivery(runs)
