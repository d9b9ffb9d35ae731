"""The value bytes one worker process holds fetched ahead for all its consumer instances, against its cap."""

from __future__ import annotations

__all__ = ["PrefetchBudget"]


class PrefetchBudget:
    """What the consumer instances of one worker process hold fetched and not delivered yet (value bytes),
    and the most they may hold before fetching ahead (``consumers.prefetch_worker_bytes``).

    Each instance's :class:`gateway.service.prefetch.FetchAhead` keeps its own share charged here; a fetch
    ahead starts only while the batch it brings fits in what is left. Fetches a poll makes for what it
    answers are not bounded here (the poll's own ``maxBytes`` bounds them)."""

    __slots__ = ("cap", "held")

    def __init__(self, cap: int) -> None:
        if cap < 0:
            raise ValueError(f"the prefetch cap of a worker must be >= 0 bytes, not {cap}")
        self.cap = cap
        #: value bytes charged by every instance of the worker
        self.held = 0

    def __repr__(self) -> str:
        return f"<PrefetchBudget held={self.held} cap={self.cap}>"

    def room(self) -> int:
        """Value bytes the worker's instances may still fetch ahead."""
        return max(0, self.cap - self.held)

    def change(self, delta: int) -> None:
        """An instance's share grew (or, negative, shrank) by ``delta`` bytes."""
        self.held += delta
