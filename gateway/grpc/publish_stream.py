"""PublishStream: batches in, one ack per message out in stream order, a bounded in-flight window.

A reader task takes requests off the stream while fewer than ``window`` messages are unacknowledged and
starts one publish per request (a batch, prepared then published as :func:`publish_batch` does for a
Publish too, with :meth:`PublishService.publish`'s rules); the response side
waits for those publishes in arrival order and writes the acks of every publish that is done by then in
one response. When the window is full the reader stops reading, so the request stream backs up into
gRPC's HTTP/2 flow control and the client's writes block: memory per stream stays bounded.

Batches in flight run concurrently, except that a batch holding a key (or an explicit partition) of a
topic waits for the previous batch holding it, so those messages are stored in stream order.

Why batches and coalesced acks rather than one message per request and per response: grpc.aio reads and
writes one stream message at a time, each a round trip through its completion queue; with one message
per stream message that round trip, not TubeMQ, caps a stream at about a thousand messages a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.grpc.call_budget import claim_message_bytes
from gateway.grpc.call_outcome import forget_failures, forget_frames
from gateway.grpc.idempotent import keyed_stream_acks
from gateway.grpc.publish_wire import PublishBatch, failed_acks, stream_acks
from gateway.service.errors import InvalidInput, ServiceError
from gateway.service.idempotency import Idempotency
from gateway.service.publish import OutgoingMessage, PublishOutcome, PublishService

#: the idempotency keys, looked up when a batch carries one (raises Unavailable when they cannot be used)
Keys = Callable[[], Idempotency]

_Chain = tuple[str, str, Any]


@dataclass(slots=True)
class _Flight:
    """What the reader has started and the writer has not answered yet."""

    window: int
    slots: asyncio.Semaphore
    batches: deque[tuple[asyncio.Task[bytes], int]] = field(default_factory=deque)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reading: bool = True


async def publish_stream(
    service: PublishService, requests: AsyncIterable[PublishBatch], window: int, keys: Keys
) -> AsyncIterator[bytes]:
    """Serialized ``PublishStreamResponse`` for ``requests``: every message acked once, in order; at most
    ``window`` messages (or one bigger request) read and not yet acknowledged. A batch with an idempotency
    key is published through the steps of ``keys()`` (:func:`~gateway.grpc.idempotent.keyed_stream_acks`)."""
    flight = _Flight(window, asyncio.Semaphore(window))
    reader = asyncio.create_task(_read(service, requests, flight, keys), name="grpc-publish-stream-reader")
    try:
        while True:
            while not flight.batches:
                if not flight.reading:
                    await reader  # raises the request stream's own error, if it failed
                    return
                flight.changed.clear()
                await flight.changed.wait()
            await asyncio.wait((flight.batches[0][0],))
            acks: list[bytes] = []  # each request's acks: joined, they are the response's repeated field
            while flight.batches and flight.batches[0][0].done():
                task, taken = flight.batches.popleft()
                acks.append(task.result())
                for _ in range(taken):
                    flight.slots.release()
            yield b"".join(acks)
    finally:
        reader.cancel()
        for task, _ in flight.batches:
            task.cancel()
        with contextlib.suppress(BaseException):
            await reader


async def _read(
    service: PublishService, requests: AsyncIterable[PublishBatch], flight: _Flight, keys: Keys
) -> None:
    topic = ""
    sequence = 0
    # Last batch of each ordering chain (topic + key, or topic + partition), for the next one to wait for.
    tails: dict[_Chain, asyncio.Task[bytes]] = {}
    try:
        async for request in requests:
            if request.topic:
                topic = request.topic
            if not request.messages:
                continue
            count = len(request.messages)
            taken = min(count, flight.window)
            for _ in range(taken):
                await flight.slots.acquire()
            chains = _chains(topic, request.messages)
            before = {tails[c] for c in chains if c in tails}
            task = asyncio.create_task(_publish(service, topic, request, sequence, before, keys))
            # the request's bytes stay counted in the process's in-flight publish bytes until it is acked
            task.add_done_callback(_releasing(claim_message_bytes()))
            for chain in chains:
                tails[chain] = task
                task.add_done_callback(functools.partial(_forget, tails, chain))
            flight.batches.append((task, taken))
            flight.changed.set()
            sequence += count
    finally:
        flight.reading = False
        flight.changed.set()


def _releasing(release: Callable[[], None]) -> Callable[[object], None]:
    def done(_: object) -> None:
        release()

    return done


def _chains(topic: str, messages: Sequence[OutgoingMessage]) -> set[_Chain]:
    chains: set[_Chain] = set()
    for m in messages:
        if m.key is not None:
            chains.add(("key", topic, m.key))
        elif m.partition is not None:
            chains.add(("partition", topic, m.partition))
    return chains


async def publish_batch(
    service: PublishService, topic: str, messages: Sequence[OutgoingMessage]
) -> list[PublishOutcome]:
    """A batch read from a Publish or PublishStream request, published as the REST adapter publishes the
    usual batch: prepared by the publish rules (:meth:`PublishService.prepare`), then
    :meth:`PublishService.publish_prepared`. A batch some rule refuses goes through
    :meth:`PublishService.publish`, which answers the first error in its own order (access, the topic, then
    the messages)."""
    try:
        prepared = service.prepare(messages)
    except ServiceError:
        return await service.publish(topic, messages)
    return await service.publish_prepared(topic, prepared)


def _forget(tails: dict[_Chain, asyncio.Task[bytes]], chain: _Chain, task: Any) -> None:
    if tails.get(chain) is task:
        del tails[chain]


async def _publish(
    service: PublishService,
    topic: str,
    request: PublishBatch,
    first: int,
    before: set[asyncio.Task[bytes]],
    keys: Keys,
) -> bytes:
    count = len(request.messages)

    async def publish() -> list[PublishOutcome]:
        outcomes = await publish_batch(service, topic, request.messages)
        forget_failures(outcomes)
        return outcomes

    try:
        if before:
            await asyncio.wait(before)
        if not topic:
            raise InvalidInput("topic is required on the first request of the stream", field="topic")
        if request.key is not None:
            return await keyed_stream_acks(keys(), topic, request, first, publish)
        outcomes = await publish()
    except ServiceError as exc:
        forget_frames(exc)
        return failed_acks(first, count, exc)
    finally:
        request.release()
    return stream_acks(first, outcomes)
