"""Message ids as a real broker's ``IdWorker`` makes them: 64-bit wrap, absolute value, a per-store generator.

The reference below is written independently of :mod:`gateway.embedded.msgid`: it does the Java long
arithmetic with ``ctypes.c_int64`` (wrapping shifts and ``Math.abs``, which leaves ``Long.MIN_VALUE``).
"""

from __future__ import annotations

import ctypes
import itertools
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.embedded.broker_common import StoreTable
from gateway.embedded.msgid import ID_EPOCH, ID_PERIOD_NS, MessageIdGenerator, id_for, id_phase
from gateway.embedded.store import TopicStore
from gateway.embedded.topics import TopicSpec

HALF = ID_PERIOD_NS // 2
#: a clock reading at the bottom of a cycle (the id arithmetic gives 0) and one at its top turn
BOTTOM = ID_EPOCH + 5 * ID_PERIOD_NS
TOP = BOTTOM + HALF


def java_id(nanos: int, worker: int, sequence: int) -> int:
    """``Math.abs(nanos - twepoch << 22 | worker << 12 | sequence)`` in Java longs."""
    shifted = ctypes.c_int64((nanos - ID_EPOCH) << 22).value
    value = ctypes.c_int64(shifted | (worker << 12) | sequence).value
    return value if value >= 0 else ctypes.c_int64(-value).value


class Ticks:
    """A nanosecond clock that moves ``step`` on every reading."""

    def __init__(self, start: int, step: int = 1) -> None:
        self.now = start - step
        self.step = step
        self.readings = 0

    def __call__(self) -> int:
        self.now += self.step
        self.readings += 1
        return self.now


@given(
    nanos=st.integers(0, 2**63 - 1),
    worker=st.integers(0, 1023),
    sequence=st.integers(0, 4095),
)
def test_the_arithmetic_is_the_java_long_arithmetic(nanos: int, worker: int, sequence: int) -> None:
    assert id_for(nanos, worker, sequence) == java_id(nanos, worker, sequence)


@given(st.integers(-(2**20), 2**20), st.sampled_from([BOTTOM, TOP]))
def test_readings_near_a_turn_mirror_and_the_turns_themselves(offset: int, turn: int) -> None:
    assert id_for(turn + offset) == id_for(turn - offset) == java_id(turn + offset, 0, 0)


def test_the_turns_give_zero_and_the_smallest_long() -> None:
    assert id_for(BOTTOM) == 0
    assert id_for(TOP) == -(2**63) == java_id(TOP, 0, 0)  # Math.abs(Long.MIN_VALUE) stays negative
    assert id_for(TOP - 1) == id_for(TOP + 1) == 2**63 - 2**22
    assert (id_phase(BOTTOM), id_phase(TOP), id_phase(TOP - 1)) == (0, HALF, HALF - 1)


def test_ids_rise_for_half_a_cycle_and_fall_for_the_other_half() -> None:
    step = HALF // 1000
    rising = MessageIdGenerator(clock=Ticks(BOTTOM + 1, step))
    ids = [rising.next_id() for _ in range(999)]
    assert ids == sorted(ids) and len(set(ids)) == 999
    falling = MessageIdGenerator(clock=Ticks(TOP + 1, step))
    ids = [falling.next_id() for _ in range(999)]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 999
    assert all(0 < i < 2**63 for i in ids)


def test_a_clock_reading_shared_by_several_ids_counts_a_sequence_then_waits_for_the_clock() -> None:
    readings = itertools.chain([TOP + 3] * 4099, [TOP + 9])
    count = itertools.count(1)
    taken = [0]

    def clock() -> int:
        taken[0] = next(count)
        return next(readings)

    generator = MessageIdGenerator(worker_id=5, clock=clock)
    ids = [generator.next_id() for _ in range(4097)]
    assert ids[:4096] == [java_id(TOP + 3, 5, s) for s in range(4096)]
    # The 4097th id of one reading: the sequence wrapped, so the generator read the clock until it moved.
    assert ids[4096] == java_id(TOP + 9, 5, 0)
    assert taken[0] == 4097 + 3
    # In the falling half an id of sequence s is s below the sequence-0 one: low bits 4096 - s under
    # worker bits 1023 (worker 0).
    zero = MessageIdGenerator(clock=lambda: TOP + 3)
    first, second = zero.next_id(), zero.next_id()
    assert second == first - 1 and second & 0x3FFFFF == (1023 << 12) | 4095


def test_a_clock_going_back_restarts_the_sequence_as_the_broker_does() -> None:
    readings = iter([BOTTOM + 10, BOTTOM + 10, BOTTOM + 4, BOTTOM + 10])
    generator = MessageIdGenerator(clock=lambda: next(readings))
    assert [generator.next_id() for _ in range(4)] == [
        java_id(BOTTOM + 10, 0, 0),
        java_id(BOTTOM + 10, 0, 1),
        java_id(BOTTOM + 4, 0, 0),
        java_id(BOTTOM + 10, 0, 0),  # the same id as the first: the broker does not remember more
    ]
    with pytest.raises(ValueError):
        MessageIdGenerator(worker_id=1024)
    assert repr(generator) == f"MessageIdGenerator(worker=0, last={BOTTOM + 10}, seq=0)"


def test_each_store_has_its_own_generator_with_worker_zero(tmp_path: Path) -> None:
    reading = [TOP + 100]
    table = StoreTable([TopicSpec("tt", 2, 2)], None, id_clock=lambda: reading[0])
    first = [table.get("tt", index).append(index * 10000, b"x", 0).message_id for index in (0, 1)]
    assert first == [java_id(TOP + 100, 0, 0)] * 2  # nothing keeps two stores' ids apart
    table.close()

    path = tmp_path / "s.log"
    store = TopicStore("t", 0, path=path, id_clock=lambda: reading[0])
    before = store.append(0, b"before", 0).message_id
    store.close()
    reopened = TopicStore("t", 0, path=path, id_clock=lambda: reading[0])
    # A reopened store starts a fresh generator (as a restarted broker does): ids of its log do not matter.
    assert reopened.append(0, b"after", 0).message_id == before == java_id(TOP + 100, 0, 0)
    reopened.close()


def test_the_default_clock_is_the_monotonic_nanosecond_clock() -> None:
    before = time.monotonic_ns()
    got = MessageIdGenerator().next_id()
    after = time.monotonic_ns()
    # A sequence-0 id of worker 0 is the reading's phase shifted 22 bits, mirrored in the falling half.
    assert got & 0x3FFFFF == 0
    phases = {got >> 22, ID_PERIOD_NS - (got >> 22)}
    assert any(id_phase(before) <= phase <= id_phase(after) for phase in phases)
