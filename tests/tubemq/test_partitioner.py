"""Partition choice: round-robin with back-off and shielding, key hashing, explicit partitions."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.errors import ClientError, NoPartition
from gateway.tubemq.producer.partitioner import Partitioner, PartitionRef
from tests.support.waiting import ManualClock

PARTS = sorted(PartitionRef(b, p) for b in (1, 2) for p in (0, 1, 2, 10000))


def everyone(_: int) -> bool:
    return True


def test_round_robin_visits_every_partition_evenly() -> None:
    partitioner = Partitioner(rng=random.Random(7))
    picks = Counter(partitioner.round_robin("demo", PARTS, everyone) for _ in range(len(PARTS) * 25))
    assert set(picks) == set(PARTS)
    assert set(picks.values()) == {25}


def test_round_robin_starts_at_a_random_offset_per_topic() -> None:
    starts = {Partitioner(rng=random.Random(seed)).round_robin("demo", PARTS, everyone) for seed in range(40)}
    assert len(starts) > 1


def test_round_robin_consecutive_picks_follow_the_sorted_order() -> None:
    partitioner = Partitioner(rng=random.Random(3))
    first = partitioner.round_robin("demo", PARTS, everyone)
    second = partitioner.round_robin("demo", PARTS, everyone)
    assert PARTS.index(second) == (PARTS.index(first) + 1) % len(PARTS)


def test_round_robin_skips_shielded_brokers() -> None:
    partitioner = Partitioner()
    picks = {partitioner.round_robin("demo", PARTS, lambda b: b == 2) for _ in range(40)}
    assert {p.broker_id for p in picks} == {2}
    with pytest.raises(NoPartition):
        partitioner.round_robin("demo", PARTS, lambda b: False)


def test_round_robin_avoids_tried_partitions_while_others_remain() -> None:
    partitioner = Partitioner()
    tried = set(PARTS[:-1])
    assert all(partitioner.round_robin("demo", PARTS, everyone, tried) == PARTS[-1] for _ in range(10))
    # when every candidate was tried, any candidate is fine again
    assert partitioner.round_robin("demo", PARTS[:1], everyone, set(PARTS)) == PARTS[0]


def test_partition_backoff_after_more_than_three_failures() -> None:
    clock = ManualClock(50.0)
    partitioner = Partitioner(failure_limit=3, delay=3.0, clock=clock)
    bad = PARTS[0]
    for _ in range(3):
        partitioner.record_failure("demo", bad)
    assert not partitioner.is_delayed("demo", bad)
    partitioner.record_failure("demo", bad)
    assert partitioner.is_delayed("demo", bad)
    picks = {partitioner.round_robin("demo", PARTS, everyone) for _ in range(50)}
    assert bad not in picks
    clock.advance(3.0)
    assert not partitioner.is_delayed("demo", bad)
    picks = {partitioner.round_robin("demo", PARTS, everyone) for _ in range(50)}
    assert bad in picks


def test_all_delayed_still_picks_something() -> None:
    partitioner = Partitioner(failure_limit=0, clock=ManualClock(50.0))
    for p in PARTS:
        partitioner.record_failure("demo", p)
    assert all(partitioner.is_delayed("demo", p) for p in PARTS)
    assert partitioner.round_robin("demo", PARTS, everyone) in PARTS


def test_success_resets_the_failure_count() -> None:
    partitioner = Partitioner(failure_limit=3, clock=ManualClock(50.0))
    p = PARTS[1]
    for _ in range(3):
        partitioner.record_failure("demo", p)
    partitioner.record_success("demo", p)
    partitioner.record_failure("demo", p)
    assert not partitioner.is_delayed("demo", p)
    partitioner.forget("demo")
    assert "topics=0" in repr(partitioner)


def test_key_placement_is_java_string_hash_modulo() -> None:
    # "abc".hashCode() == 96354; 96354 % 8 == 2
    assert Partitioner.by_key("demo", "abc", PARTS) == PARTS[96354 % 8]
    # a negative Java hash is masked to 31 bits, not abs()'d: "polygenelubricants".hashCode() == -2^31
    assert Partitioner.by_key("demo", "polygenelubricants", PARTS) == PARTS[0]


@given(st.text(min_size=0, max_size=40))
def test_key_placement_is_stable(key: str) -> None:
    assert Partitioner.by_key("demo", key, PARTS) == Partitioner.by_key("demo", key, list(PARTS))


def test_explicit_by_index_and_by_key() -> None:
    assert Partitioner.explicit("demo", 3, PARTS) == PARTS[3]
    assert Partitioner.explicit("demo", "2:demo:10000", PARTS) == PartitionRef(2, 10000)
    with pytest.raises(ClientError, match="out of range"):
        Partitioner.explicit("demo", 8, PARTS)
    with pytest.raises(ClientError, match="not a current partition"):
        Partitioner.explicit("demo", "3:demo:0", PARTS)
    with pytest.raises(NoPartition):
        Partitioner.explicit("demo", 0, [])
    with pytest.raises(NoPartition):
        Partitioner.by_key("demo", "k", [])


def test_partition_key_format() -> None:
    assert PartitionRef(1, 10002).key("demo") == "1:demo:10002"


@given(st.lists(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 40)), max_size=6), st.integers(1, 8))
def test_round_robin_many_is_that_many_round_robins(calls: list[tuple[str, int]], size: int) -> None:
    partitions = [PartitionRef(1 + i % 2, i) for i in range(size)]
    one = Partitioner(rng=random.Random(7))
    many = Partitioner(rng=random.Random(7))
    for topic, count in calls:
        assert many.round_robin_many(topic, partitions, count) == [
            one.round_robin(topic, partitions, None) for _ in range(count)
        ]
        assert many.calm


def test_round_robin_many_declines_while_a_partition_is_in_back_off() -> None:
    clock = ManualClock()
    p = Partitioner(failure_limit=0, delay=5.0, clock=clock)
    parts = [PartitionRef(1, 0), PartitionRef(1, 1)]
    p.record_failure("t", parts[0])
    assert not p.calm and p.round_robin_many("t", parts, 3) is None
    assert Partitioner().round_robin_many("t", [], 3) is None
