"""observe_many and add (gateway/observability/histograms.py) give the samples ``count`` observe calls and an
``inc`` give."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.observability.histograms import add, observe_many

_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0)


def _samples(metric: Histogram | Counter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    [family] = metric.collect()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples if "created" not in s.name
    }


@given(
    values=st.lists(
        st.tuples(st.floats(min_value=0, max_value=100, allow_nan=False), st.integers(0, 300)), max_size=6
    )
)
def test_observe_many_is_count_observes(values: list[tuple[float, int]]) -> None:
    once = Histogram("h", "h", ["l"], buckets=_BUCKETS, registry=CollectorRegistry())
    each = Histogram("h", "h", ["l"], buckets=_BUCKETS, registry=CollectorRegistry())
    for value, count in values:
        observe_many(once.labels(l="a"), value, count)
        child = each.labels(l="a")
        for _ in range(count):
            child.observe(value)
    got, want = _samples(once), _samples(each)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), key


def test_a_child_of_another_shape_is_observed_count_times() -> None:
    seen: list[float] = []

    class Child:
        def observe(self, value: float) -> None:
            seen.append(value)

    child: Any = Child()
    observe_many(child, 0.5, 3)
    assert seen == [0.5, 0.5, 0.5]


@given(
    values=st.lists(
        st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([*_BUCKETS, -0.0, math.inf]),
        max_size=8,
    )
)
def test_one_observation_is_observe(values: list[float]) -> None:
    """The bucket found by bisection is the one observe's walk finds: on a bound, below the first, above the
    last, negative, infinite, and none for NaN."""
    fast = Histogram("h", "h", buckets=_BUCKETS, registry=CollectorRegistry())
    slow = Histogram("h", "h", buckets=_BUCKETS, registry=CollectorRegistry())
    for value in values:
        observe_many(fast, value)
        slow.observe(value)
    got, want = _samples(fast), _samples(slow)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == value or (math.isnan(got[key]) and math.isnan(value)), key


@given(amounts=st.lists(st.integers(0, 10**6) | st.floats(0, 1e6), max_size=8))
def test_add_is_inc(amounts: list[float]) -> None:
    fast = Counter("c", "c", ["l"], registry=CollectorRegistry())
    slow = Counter("c", "c", ["l"], registry=CollectorRegistry())
    for amount in amounts:
        add(fast.labels(l="a"), amount)
        slow.labels(l="a").inc(amount)
    assert _samples(fast) == _samples(slow)


def test_add_refuses_a_negative_amount_and_takes_a_child_of_another_shape() -> None:
    counter = Counter("c", "c", registry=CollectorRegistry())
    with pytest.raises(ValueError, match="non-negative"):
        add(counter, -1)
    seen: list[float] = []

    class Child:
        def inc(self, amount: float) -> None:
            seen.append(amount)

    child: Any = Child()
    add(child, 2)
    add(child)
    assert seen == [2, 1]
