"""observe_many (gateway/observability/histograms.py) gives the samples ``count`` observe calls give."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from gateway.observability.histograms import observe_many

_BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0)


def _samples(histogram: Histogram) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    [family] = histogram.collect()
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
