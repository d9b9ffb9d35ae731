"""``count`` observations of one value in a prometheus_client histogram child, at the cost of one.

A batch's requests (and a batch round's sends) share one duration, so the histograms take that value once
per request: with ``Histogram.observe`` that is a lock, a bucket search and two increments per message,
some 1 us each (issue #26). :func:`observe_many` finds the bucket once and adds ``count`` to it and
``count * value`` to the sum, through the child's ``_sum``, ``_buckets`` and ``_upper_bounds`` (what
``observe`` itself uses; pyproject caps prometheus-client below the next major version for it). A child
without them (another version's shape) is observed ``count`` times, as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["observe_many"]


def observe_many(child: Any, value: float, count: int) -> None:
    """``child.observe(value)`` ``count`` times (``count`` >= 0), in one step where the child allows."""
    if count <= 0:
        return
    if count == 1:
        child.observe(value)
        return
    try:
        total, buckets, bounds = child._sum, child._buckets, child._upper_bounds
    except AttributeError:
        for _ in range(count):
            child.observe(value)
        return
    total.inc(value * count)
    for i, bound in enumerate(bounds):
        if value <= bound:
            buckets[i].inc(count)
            break
