"""Room in the in-flight publish bytes for gRPC publish messages about to be read (gateway/grpc/read_room.py):
taken before a message is received, in the order asked while other reads hold room, for at most the time
given; refused at once when what is held leaves none."""

from __future__ import annotations

import asyncio

import pytest

from gateway.grpc.read_room import ReadRoom
from gateway.service.admission import Admission
from gateway.service.errors import Unavailable

CAP = 100


async def test_reads_wait_in_their_order_for_the_room_of_reads_in_progress() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    await room.take(60, CAP, 5)  # a read in progress
    order: list[str] = []

    async def read(name: str, size: int) -> None:
        await room.take(size, CAP, 5)
        order.append(name)

    first = asyncio.create_task(read("first", 60))
    await asyncio.sleep(0)
    second = asyncio.create_task(read("second", 10))  # fits now, but waits behind the first
    await asyncio.sleep(0.05)
    assert order == [] and room.waiting == 2 and admission.inflight_bytes == 60
    room.give_back(60, 5)  # its message is in: 5 bytes, held until its publish ends
    await asyncio.gather(first, second)
    assert order == ["first", "second"] and admission.inflight_bytes == 75 and room.waiting == 0


async def test_a_read_is_refused_at_once_when_what_is_held_leaves_no_room() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    assert admission.reserve(90, CAP)  # an HTTP body, or messages being published
    with pytest.raises(Unavailable, match="publish requests"):
        await room.take(20, CAP, 5)
    assert admission.inflight_bytes == 90 and room.waiting == 0
    # a stream's read waits all the same: its own messages may be what is held
    streamed = asyncio.create_task(room.take(20, CAP, 5, queue=True))
    await asyncio.sleep(0.01)
    assert room.waiting == 1
    admission.release(90)
    await streamed
    assert admission.inflight_bytes == 20


async def test_a_read_that_finds_no_room_in_time_is_refused_and_holds_nothing() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    await room.take(60, CAP, 5)
    assert admission.reserve(30, CAP)
    with pytest.raises(Unavailable, match=r"limits\.body_timeout"):
        await room.take(20, CAP, 0.05)
    assert admission.inflight_bytes == 90 and room.waiting == 0
    # the one behind a read that gave up is not held up by it
    behind = asyncio.create_task(room.take(10, CAP, 5))
    await asyncio.sleep(0.01)
    assert behind.done() and admission.inflight_bytes == 100


async def test_a_read_cancelled_while_waiting_holds_nothing() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    await room.take(CAP, CAP, 5)
    waiting = asyncio.create_task(room.take(50, CAP, 5))
    await asyncio.sleep(0.01)
    room.give_back(CAP, 0)  # room granted to it ...
    waiting.cancel()  # ... as its call ends
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.inflight_bytes == 0 and room.waiting == 0


async def test_no_bound_means_no_wait() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    for _ in range(10):
        await room.take(1 << 30, 0, 0.01)
    assert admission.inflight_bytes == 10 << 30


async def test_a_caller_holding_its_share_waits_without_holding_up_other_callers() -> None:
    admission = Admission()
    room = ReadRoom(admission)
    share = 25  # each caller's reads hold at most 25 bytes of room (always one read's)
    await room.take(20, CAP, 5, caller="carol", share=share)
    carol = [asyncio.create_task(room.take(20, CAP, 5, caller="carol", share=share)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert room.waiting == 3 and room.held_by("carol") == 20
    # alice asks after carol's waiting reads, and reads at once: carol's wait for her share, not for room
    await asyncio.wait_for(room.take(20, CAP, 5, caller="alice", share=share), 1)
    assert room.held_by("alice") == 20 and room.waiting == 3 and admission.inflight_bytes == 40
    room.give_back(20, 20, "carol")  # carol's message is in (its bytes stay held): her next read may start
    await asyncio.sleep(0.01)
    assert sum(task.done() for task in carol) == 1 and room.held_by("carol") == 20
    assert admission.inflight_bytes == 60
    # a caller whose share stays full is refused after the patience, naming its share
    with pytest.raises(Unavailable, match="share of 25 bytes"):
        await room.take(20, CAP, 0.05, caller="carol", share=share)
    for task in carol:
        task.cancel()
    await asyncio.gather(*carol, return_exceptions=True)
    room.give_back(20, 0, "carol")
    room.give_back(20, 0, "alice")
    assert room.waiting == 0 and admission.inflight_bytes == 20 and room.held_by("carol") == 0


async def test_callers_take_the_room_given_back_in_turn() -> None:
    """Room given back goes to the callers' first waiting reads in turn: a caller granted a read waits
    behind the others for its next one, so one caller's many reads do not keep another's from the budget."""
    admission = Admission()
    room = ReadRoom(admission)
    await room.take(CAP, CAP, 5, caller="x")  # a read in progress holds the whole budget
    order: list[str] = []

    async def read(caller: str) -> None:
        await room.take(CAP, CAP, 5, caller=caller)
        order.append(caller)

    carol = [asyncio.create_task(read("carol")) for _ in range(3)]
    await asyncio.sleep(0)
    alice = asyncio.create_task(read("alice"))  # asks after all of carol's
    await asyncio.sleep(0.01)
    assert room.waiting == 4
    room.give_back(CAP, 0, "x")
    for turn in range(4):
        await asyncio.sleep(0.01)
        assert len(order) == turn + 1 and room.waiting == 3 - turn
        room.give_back(CAP, 0, order[-1])
    await asyncio.gather(*carol, alice)
    assert order == ["carol", "alice", "carol", "carol"]
    assert admission.inflight_bytes == 0 and room.held_by("carol") == 0
