"""Admission of seeks: one at a time per consumer instance, a few searches by time at once per caller.

A seek by time searches every partition it moves (:mod:`gateway.tubemq.ranges.by_time`: about
``log2(entries)`` broker reads per partition, each decoded here), so it costs far more than a seek to
offsets. Two bounds keep a client from turning that into a CPU storm:

* an instance takes **one seek at a time**: a seek while another runs on the same instance is refused with
  :class:`~gateway.service.errors.Conflict` (409 / ABORTED) before anything is read; the running seek's
  outcome stands, and the client retries after ``retry_after`` seconds (a seek ends within the bound the
  message names). Two seeks at once on one instance could only race each other to the broker anyway;
* a caller (:func:`~gateway.service.principal.current_caller`'s key: its principal, or its address when
  anonymous) runs at most ``per_caller`` **searches by time** at once in this process, whatever instances
  they are on: one more is refused with :class:`~gateway.service.errors.RateLimited` (429 /
  RESOURCE_EXHAUSTED, quota ``seek_searches``).

Both checks are a set and a dict lookup, made before the search; what they hold is bounded by the seeks
running at that moment (an entry leaves when its seek ends, however it ends).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gateway.service.errors import Conflict, Quota, RateLimited
from gateway.service.principal import current_caller

__all__ = ["SeekAdmission"]

#: what a refused seek is told to wait before trying again, seconds
RETRY_AFTER = 1.0


class SeekAdmission:
    """See the module docstring. ``longest`` is the longest a seek can run (named in the refusal)."""

    def __init__(self, per_caller: int, longest: float) -> None:
        if per_caller < 1:
            raise ValueError("per_caller must be >= 1")
        self.per_caller = per_caller
        self.longest = longest
        self._seeking: set[str] = set()
        self._searches: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<SeekAdmission seeking={len(self._seeking)} per_caller={self.per_caller}>"

    @contextmanager
    def admit(self, instance_id: str, *, by_time: bool) -> Iterator[None]:
        """Hold ``instance_id``'s one seek (and, ``by_time``, one of the caller's searches) for the block;
        Conflict or RateLimited when it may not start now."""
        if instance_id in self._seeking:
            raise Conflict(
                "another seek is running on this consumer instance (one at a time, it ends within "
                f"{self.longest:g} s); retry after it, then describe the instance to see where it stands",
                retry_after=RETRY_AFTER,
            )
        caller = current_caller().key if by_time else None
        if caller is not None:
            running = self._searches.get(caller, 0)
            if running >= self.per_caller:
                raise RateLimited(
                    f"this caller already runs {running} seeks by time at once, the most allowed "
                    f"(consumers.max_seek_searches); retry after one of them ends",
                    retry_after=RETRY_AFTER,
                    quota=Quota("seek_searches", self.per_caller, None, 0, "searches"),
                )
            self._searches[caller] = running + 1
        self._seeking.add(instance_id)
        try:
            yield
        finally:
            self._seeking.discard(instance_id)
            if caller is not None:
                left = self._searches[caller] - 1
                if left:
                    self._searches[caller] = left
                else:
                    del self._searches[caller]
