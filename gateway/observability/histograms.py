"""prometheus_client children updated at the cost of their value's own step.

A publish request updates some ten series (HTTP, RPC, send and broker counters and histograms). Through
the public methods each update is three Python calls of checks (``inc`` -> ``_raise_if_not_observable`` ->
``_is_observable``, a child always passes them) before the value's own locked step, and a histogram walks
its buckets in Python. The helpers here take the child's internals that those methods use (``_value``;
``_sum``, ``_buckets``, ``_upper_bounds``: pyproject caps prometheus-client below the next major version for
it) and skip the checks: :func:`add` for a counter, :func:`observe_many` for a histogram (``count``
observations of one value: a batch's requests share one duration), its bucket found by bisection. A child
without them (another version's shape) is updated through its public methods.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

__all__ = ["add", "observe_many"]


def add(child: Any, amount: float = 1) -> None:
    """``child.inc(amount)`` for a counter child (``amount`` >= 0: a counter never goes down)."""
    if amount < 0:
        raise ValueError("Counters can only be incremented by non-negative amounts.")
    try:
        value = child._value
    except AttributeError:
        child.inc(amount)
        return
    value.inc(amount)


def observe_many(child: Any, value: float, count: int = 1) -> None:
    """``child.observe(value)`` ``count`` times (``count`` >= 0), in one step where the child allows."""
    if count <= 0:
        return
    try:
        total, buckets, bounds = child._sum, child._buckets, child._upper_bounds
    except AttributeError:
        for _ in range(count):
            child.observe(value)
        return
    total.inc(value * count)
    i = bisect_left(bounds, value)  # the first bound >= value, the one observe's walk stops at
    if i < len(bounds) and value <= bounds[i]:  # (never for NaN, which observe puts in no bucket)
        buckets[i].inc(count)
