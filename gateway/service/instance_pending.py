"""What a consumer instance delivered and has not settled, kept per handed-out run (:class:`PendingRun`):
tokens ascend in delivery order and are consecutive within a run, so a token is found by a bisection on
the runs' first tokens; per message only what sets it apart from its run is kept (settled, an extended
deadline)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from gateway.service.delivered import DeliveredMessage, DeliveredRun
from gateway.service.instance_records import Batch, PendingRun

__all__ = ["PendingRuns"]


class PendingRuns:
    """The pending runs of one instance in token order; ``len`` counts the messages not settled."""

    __slots__ = ("_firsts", "_open", "_runs")

    def __init__(self) -> None:
        self._runs: list[PendingRun] = []
        #: each run's first token, for the bisection
        self._firsts: list[int] = []
        self._open = 0

    def __len__(self) -> int:
        return self._open

    def __bool__(self) -> bool:
        return self._open > 0

    def add(self, run: DeliveredRun, batch: Batch) -> None:
        """A run just handed out (its tokens are above every pending one)."""
        self._runs.append(PendingRun(run, batch, run.count))
        self._firsts.append(run.first)
        self._open += run.count

    def find(self, seq: int) -> tuple[PendingRun, int] | None:
        """The pending run holding token ``seq`` and the message's index in it; None when that message is
        not pending."""
        k = bisect_right(self._firsts, seq) - 1
        if k < 0:
            return None
        pending = self._runs[k]
        i = seq - pending.run.first
        if i >= pending.run.count or not pending.is_open(i):
            return None
        return pending, i

    def pop(self, seq: int) -> tuple[PendingRun, int] | None:
        """:meth:`find`, and the message is settled."""
        found = self.find(seq)
        if found is not None:
            self.settle(*found)
        return found

    def settle(self, pending: PendingRun, i: int) -> None:
        """The ``i``-th message of ``pending`` (open) is settled; a run with none open left goes."""
        settled = pending.settled
        if settled is None:
            settled = pending.settled = bytearray(pending.run.count)
        settled[i] = 1
        pending.open -= 1
        self._open -= 1
        if pending.open == 0:
            self._remove(pending)

    def _remove(self, pending: PendingRun) -> None:
        k = bisect_right(self._firsts, pending.run.first) - 1
        del self._runs[k]
        del self._firsts[k]

    def clear(self) -> None:
        self._runs.clear()
        self._firsts.clear()
        self._open = 0

    def runs(self) -> list[PendingRun]:
        """The pending runs, in token order (a copy: settling while going through it is safe)."""
        return list(self._runs)

    def items(self) -> Iterator[tuple[PendingRun, int]]:
        """Every pending message as (run, index), in token order."""
        for pending in self.runs():
            settled = pending.settled
            for i in range(pending.run.count):
                if settled is None or not settled[i]:
                    yield pending, i

    def drop_batch(self, batch: Batch) -> list[tuple[PendingRun, int]]:
        """Settle every pending message of ``batch`` (its batch is given back or lost); returns them."""
        dropped = [(p, i) for p in self._runs if p.batch is batch for i in range(p.run.count) if p.is_open(i)]
        for pending, i in dropped:
            self.settle(pending, i)
        return dropped

    def after(self, seq: int) -> list[DeliveredRun]:
        """Runs of the pending messages with a token above ``seq``, in token order: a run as it was handed
        out where all of it is, else its parts (split where a message is settled, at ``seq`` and where a
        deadline differs)."""
        runs = self._runs
        k = max(0, bisect_right(self._firsts, seq) - 1)
        out: list[DeliveredRun] = []
        for pending in runs[k:]:
            run = pending.run
            begin = max(0, seq + 1 - run.first)
            if begin >= run.count:
                continue
            if begin == 0 and pending.settled is None and not pending.deadlines:
                out.append(run)
                continue
            out.extend(_parts(pending, begin))
        return out

    def message(self, pending: PendingRun, i: int) -> DeliveredMessage:
        """The ``i``-th message of ``pending`` as a record of its own, with its deadline now."""
        delivered = pending.run.message(i)
        delivered.deadline, delivered.deadline_ms = pending.deadline(i)
        return delivered


def _parts(pending: PendingRun, begin: int) -> Iterator[DeliveredRun]:
    """The open messages of ``pending`` from index ``begin`` as runs of equal deadline."""
    run = pending.run
    i = begin
    count = run.count
    while i < count:
        if not pending.is_open(i):
            i += 1
            continue
        deadline = pending.deadline(i)
        j = i + 1
        while j < count and pending.is_open(j) and pending.deadline(j) == deadline:
            j += 1
        yield run.part(i, j - i, *deadline)
        i = j
