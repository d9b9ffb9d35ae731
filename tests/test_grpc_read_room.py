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
