"""Planning arithmetic of the tubemq Spark source without Spark: the exact trigger cap over stores that hold
several partitions, exact splits of large ranges (``minPartitions``), the lag read from progress, and a task
that finds its start expired (``failOnDataLoss``) against an embedded cluster."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from gateway.spark.core import PartitionRange
from gateway.spark.progress import source_lag
from gateway.spark.source import capped_offsets, split_ranges

E = 28  # one index entry


def test_partitions_of_one_store_end_together_so_the_cap_is_exact() -> None:
    # Two stores of four partitions (the case: cap 1000 gave 250 on a 4-partition store).
    stores = {f"1:t:{i}": (1, "t", 0) for i in range(4)} | {f"1:t:1000{i}": (1, "t", 1) for i in range(4)}
    start = {key: 0 for key in stores}
    latest = {key: E * (3000 if key.startswith("1:t:1000") else 1000) for key in stores}
    end = capped_offsets(start, latest, 1000, stores)
    # Every partition of a store ends at the same entry; the stores' entries add up to the cap.
    first = {end[f"1:t:{i}"] for i in range(4)}
    second = {end[f"1:t:1000{i}"] for i in range(4)}
    assert len(first) == len(second) == 1
    assert first.pop() // E + second.pop() // E == 1000
    assert end["1:t:0"] == E * 250 and end["1:t:10000"] == E * 750  # shared by backlog
    assert capped_offsets(start, latest, None, stores) == latest


def test_partitions_of_a_store_that_stand_apart_never_pass_the_cap() -> None:
    stores = {"a": 0, "b": 0}
    end = capped_offsets({"a": 0, "b": E * 50}, {"a": E * 100, "b": E * 100}, 30, stores)
    assert end == {"a": E * 30, "b": E * 50}  # b waits until a reaches it: at most 30 entries


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 400), st.integers(0, 3)), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(1, 500)),
)
def test_the_cap_is_met_exactly_when_a_store_starts_at_one_offset(
    parts: list[tuple[int, int, int]], cap: int | None
) -> None:
    stores = {f"k{i}": store for i, (_, _, store) in enumerate(parts)}
    first = {store: start for start, _, store in reversed(parts)}
    size = {store: size for _, size, store in reversed(parts)}
    start = {key: E * first[store] for key, store in stores.items()}
    latest = {key: E * (first[store] + size[store]) for key, store in stores.items()}
    end = capped_offsets(start, latest, cap, stores)
    taken = {stores[key]: (end[key] - start[key]) // E for key in stores}
    backlog = sum(size.values())
    assert sum(taken.values()) == (backlog if cap is None else min(cap, backlog))
    assert all(start[k] <= end[k] <= latest[k] for k in stores)


def _range(key: str, start: int, end: int) -> PartitionRange:
    return PartitionRange(key, "t", 1, "127.0.0.1", 1, 0, start, end)


def test_min_partitions_splits_large_ranges_into_exact_pieces() -> None:
    ranges = [_range("1:t:0", E * 10, E * 1010), _range("1:t:1", 0, E * 100), _range("1:t:2", E, E)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges  # two non-empty ranges already
    pieces = split_ranges(ranges, 11)
    assert len(pieces) >= 11
    for original in ranges:
        mine = [p for p in pieces if p.key == original.key]
        assert mine[0].start == original.start and mine[-1].end == original.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        assert all(p.start % E == 0 and p.end % E == 0 for p in mine)
    assert len([p for p in pieces if p.key == "1:t:0"]) == 10


def test_lag_per_partition_comes_from_the_progress_report() -> None:
    source = {"endOffset": '{"1:t:0": 280, "1:t:1": 56}', "latestOffset": {"1:t:0": 560, "1:t:1": 56}}
    lag = source_lag(source)
    assert lag["partitions"] == {"1:t:0": 10, "1:t:1": 0}
    assert (lag["minOffsetsBehindLatest"], lag["maxOffsetsBehindLatest"]) == (0, 10)
    assert lag["avgOffsetsBehindLatest"] == 5
    assert source_lag({"endOffset": None, "latestOffset": None}) == {"partitions": {}}


def test_a_task_fails_when_its_start_expired_after_planning() -> None:
    """The executor's check: planning saw the offsets, then retention dropped them before the task read."""
    import time

    from gateway.embedded.store import Retention
    from gateway.embedded.topics import TopicSpec
    from gateway.spark.backend import DataLost, plan, read_batches
    from gateway.spark.options import SourceOptions
    from tests.support.spark_support import ClusterThread

    cluster = ClusterThread(
        [TopicSpec("expiring")], brokers=1, retention=Retention(max_bytes=10_000), retention_interval=0.2
    )
    try:
        cluster.publish("expiring", 0, 100)
        options = SourceOptions.parse({"masters": cluster.masters, "topic": "expiring"})
        planned = plan(options)["1:expiring:0"]
        strict = planned.range(0, planned.bounds.max_offset, fail_on_data_loss=True)
        cluster.publish("expiring", 100, 1000)
        deadline = time.monotonic() + 60
        while plan(options)["1:expiring:0"].bounds.min_offset == 0:
            assert time.monotonic() < deadline, "retention did not run"
            time.sleep(0.2)
        with pytest.raises(DataLost, match=r"partition 1:expiring:0: offsets 0\.\.\d+ expired before"):
            list(read_batches(options, strict))
        lenient = planned.range(0, planned.bounds.max_offset)
        rows = sum(batch.num_rows for batch in read_batches(options, lenient))
        assert rows < 100  # no error: only what is left of the planned range
    finally:
        cluster.close()
