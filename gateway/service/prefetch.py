"""Fetching ahead for one consumer instance: how many of its partitions to fetch while its client works
on the last answer, so that the next poll (REST, SSE, gRPC) finds its batches in hand or on their way.

The instance asks after each poll and after a commit or a nack that confirmed batches (its partitions are
then free to fetch again). What a poll needs comes from the instance's fetch rule; this class bounds it by
memory: what the instance holds fetched and not delivered, against the instance's cap
(``consumers.prefetch_bytes``) and its worker's (:class:`gateway.service.prefetch_budget.PrefetchBudget`).
It knows batches only by their value bytes, not by how they are kept."""

from __future__ import annotations

from gateway.service.prefetch_budget import PrefetchBudget

__all__ = ["FetchAhead"]


class FetchAhead:
    """The fetch-ahead bounds of one consumer instance and its share of its worker's budget.

    ``cap``: value bytes the instance may hold fetched and not delivered before it stops fetching ahead (0:
    it never fetches ahead). A fetch ahead starts only where its batches, each estimated at the size of the
    instance's last batch, fit under both caps; a batch larger than the last passes them by the
    difference."""

    __slots__ = ("_budget", "_charged", "cap")

    def __init__(self, cap: int, budget: PrefetchBudget) -> None:
        if cap < 0:
            raise ValueError(f"the prefetch cap of an instance must be >= 0 bytes, not {cap}")
        self.cap = cap
        self._budget = budget
        #: bytes of this instance charged to the worker's budget
        self._charged = 0

    def __repr__(self) -> str:
        return f"<FetchAhead held={self._charged} cap={self.cap}>"

    @property
    def held(self) -> int:
        """Value bytes fetched and not delivered the instance last reported."""
        return self._charged

    def hold(self, held: int) -> None:
        """The instance now holds ``held`` value bytes fetched and not delivered."""
        self._budget.change(held - self._charged)
        self._charged = held

    def plan(self, held: int, wanted: int, batch_bytes: int) -> int:
        """How many partitions to fetch ahead now: ``wanted`` (what the next poll needs beyond what is held,
        by the instance's fetch rule), as many as fit, at ``batch_bytes`` each, under the instance's cap and
        the worker's; 0 when none fits. Records ``held`` as :meth:`hold` does."""
        self.hold(held)
        if wanted <= 0 or self.cap <= 0:
            return 0
        fits = min(self.cap - held, self._budget.room()) // max(batch_bytes, 1)
        return max(0, min(wanted, fits))

    def close(self) -> None:
        """The instance closed: nothing of it stays charged."""
        self.hold(0)
