"""Publish rates per replica across ``serve --workers N`` (gateway/service/shared_spending.py): two workers'
quotas in one process over one private directory, with a clock of their own (the end-to-end test with a
real ``serve --workers 2`` is tests/workers/test_workers_rate_limits.py).

Every worker holds a caller's whole rate and takes what the caller spent on its siblings: a caller whose
traffic reaches one worker gets the replica's rate (it got 1/N before, issue #26), and a caller spread over
both is held to the replica's rate too, hopping from one worker to the other included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.service.errors import RateLimited
from gateway.service.principal import ANONYMOUS, enter_caller, leave_caller
from gateway.service.quotas import Quotas, RateLimits
from gateway.service.shared_spending import SharedSpending

RATE = 1000.0  # messages per second of the replica
LIMITS = RateLimits(publish_messages_per_second=RATE, burst_seconds=1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def worker(directory: Path, index: int, clock: Clock) -> Quotas:
    spending = SharedSpending(directory, index, clock=clock)
    return Quotas(LIMITS, clock=clock, spending=spending)


def charge(quotas: Quotas, messages: int, address: str = "10.0.0.1") -> bool:
    """One request of ``messages``: True when admitted."""
    token = enter_caller(ANONYMOUS, address)
    try:
        quotas.charge_publish(messages, messages * 100)
    except RateLimited:
        return False
    finally:
        leave_caller(token)
    return True


def run(workers: list[Quotas], clock: Clock, seconds: float, per_tick: int, pick: list[int]) -> int:
    """``seconds`` of requests of ``per_tick`` messages every 10 ms, to the workers in ``pick`` in turn,
    the workers exchanging every 100 ms: the messages admitted."""
    admitted = 0
    for tick in range(round(seconds * 100)):
        clock.now += 0.01
        if charge(workers[pick[tick % len(pick)]], per_tick):
            admitted += per_tick
        if tick % 10 == 9:
            for quotas in workers:
                quotas.take_siblings_spending()
    return admitted


def test_a_caller_on_one_worker_gets_the_replicas_rate(tmp_path: Path, clock: Clock) -> None:
    workers = [worker(tmp_path, 0, clock), worker(tmp_path, 1, clock)]
    # 900 messages/s for 10 s, all through worker 0 (one connection): under the replica's 1000/s, never
    # refused (with 1/2 of the rate per worker it was refused within a second)
    assert run(workers, clock, 10, 9, [0]) == 9000


def test_a_caller_on_both_workers_is_held_to_the_replicas_rate(tmp_path: Path, clock: Clock) -> None:
    workers = [worker(tmp_path, 0, clock), worker(tmp_path, 1, clock)]
    # 3000 messages/s asked for 10 s, alternately on both workers: the replica's burst and rate, and no
    # more than an exchange's worth of each worker's rate (without sharing: twice as much)
    admitted = run(workers, clock, 10, 30, [0, 1])
    assert 1000 + 10 * RATE <= admitted <= 1000 + 10 * RATE + 2 * 0.1 * RATE


def test_hopping_to_another_worker_gains_nothing(tmp_path: Path, clock: Clock) -> None:
    workers = [worker(tmp_path, 0, clock), worker(tmp_path, 1, clock)]
    assert run(workers, clock, 2, 30, [0]) <= 1000 + 2 * RATE  # worker 0 only: the bucket is empty
    # the first request on worker 1 finds the bucket worker 0 emptied, not a full one
    assert run(workers, clock, 0.5, 30, [1]) <= 0.5 * RATE + 0.1 * RATE


def test_what_a_restarted_sibling_spent_starts_again(tmp_path: Path, clock: Clock) -> None:
    first = SharedSpending(tmp_path, 1, clock=clock)
    reader = SharedSpending(tmp_path, 0, clock=clock)
    first.spent("a", 10, 1000)
    first.exchange()
    assert reader.exchange() == [("a", 10, 1000)]
    first.spent("a", 5, 500)
    first.exchange()
    assert reader.exchange() == [("a", 5, 500)]  # what was spent since the last read
    assert reader.exchange() == []
    # worker 1 restarted: another process writes the file, its counts start from nothing
    record = json.loads((tmp_path / "spent.w1").read_text())
    record.update(pid=record["pid"] + 1, spent={"a": [3, 300]})
    (tmp_path / "spent.w1").write_text(json.dumps(record))
    assert reader.exchange() == [("a", 3, 300)]


def test_a_caller_idle_for_keep_seconds_is_forgotten(tmp_path: Path, clock: Clock) -> None:
    writer = SharedSpending(tmp_path, 1, keep=60.0, clock=clock)
    reader = SharedSpending(tmp_path, 0, clock=clock)
    writer.spent("a", 10, 1000)
    writer.exchange()
    assert reader.exchange() == [("a", 10, 1000)]
    clock.now += 61
    writer.exchange()
    assert json.loads((tmp_path / "spent.w1").read_text())["spent"] == {}
    assert reader.exchange() == []
    writer.spent("a", 2, 200)  # counted again from nothing, and read as such
    writer.exchange()
    assert reader.exchange() == [("a", 2, 200)]


def test_a_fast_burst_on_both_workers_passes_the_bucket_by_half_at_most(tmp_path: Path, clock: Clock) -> None:
    workers = [worker(tmp_path, 0, clock), worker(tmp_path, 1, clock)]
    # requests of 50 messages, alternately on both workers, all within one interval: each worker exchanges
    # as soon as a quarter of the bucket was spent there unknown to the other (without: 1000 on each)
    admitted = sum(50 for i in range(100) if charge(workers[i % 2], 50))
    assert 1000 <= admitted <= 1000 * 1.5


def test_each_worker_writes_its_own_file(tmp_path: Path, clock: Clock) -> None:
    writers = [SharedSpending(tmp_path, i, 3, clock=clock) for i in range(3)]
    for i, writer in enumerate(writers):
        writer.spent("a", i + 1, 0)
        writer.exchange()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spent.w0", "spent.w1", "spent.w2"]
    assert sorted(writers[0].exchange()) == [("a", 2, 0), ("a", 3, 0)]
