"""The fetch side of a consumer instance: core polls into the instance's buffer, several partitions at once
when a poll's budget takes more than one batch. A collaborator of
:class:`gateway.service.instance.ConsumerInstance`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

from gateway.service.instance_holdings import Holdings
from gateway.service.instance_records import Batch, Budget, Segment, value_sizes
from gateway.service.instance_redelivery import Redeliverer
from gateway.service.prefetch import FetchAhead
from gateway.service.redelivery import Origin
from gateway.tubemq.consumer import ConsumedBatch
from gateway.tubemq.errors import ClientClosed, TubeMQError

__all__ = ["FETCHES_AT_ONCE", "Fetcher"]

log = logging.getLogger("gateway.service.consumers")

#: partitions a poll fetches at once at most, when its budget takes more than one batch
FETCHES_AT_ONCE = 4


class Fetcher:
    """Core fetches of one consumer instance into the buffer of its :class:`Holdings`; a batch of the
    retry topic goes to its :class:`Redeliverer`. ``draining`` is done once the gateway is stopping: a
    poll waiting for a fetch stops waiting then."""

    __slots__ = (
        "_ahead",
        "_ahead_task",
        "_draining",
        "_fetch_task",
        "_fetches",
        "_last_batch",
        "_redeliverer",
        "_state",
        "fetches_ahead",
        "poll_fetches",
    )

    def __init__(
        self,
        state: Holdings,
        redeliverer: Redeliverer,
        draining: asyncio.Future[None],
        ahead: FetchAhead,
    ) -> None:
        self._state = state
        self._redeliverer = redeliverer
        self._draining = draining
        #: the fetch-ahead bounds and this instance's share of its worker's
        self._ahead = ahead
        #: core fetches a poll started and waited for (nothing in hand or on its way) that brought batches
        self.poll_fetches = 0
        #: fetches started ahead of a poll
        self.fetches_ahead = 0
        #: core fetch tasks still running; the latest, which a poll joins
        self._fetches: set[asyncio.Task[bool]] = set()
        self._fetch_task: asyncio.Task[bool] | None = None
        #: the latest fetch ahead (one broker round trip, bounded by the RPC timeout)
        self._ahead_task: asyncio.Task[bool] | None = None
        #: messages and value bytes of the last batch fetched (how many partitions a poll fetches at once)
        self._last_batch = (0, 0)

    @property
    def running(self) -> int:
        """Core fetch loops running (0 or 1)."""
        return sum(1 for task in self._fetches if not task.done())

    async def join(self) -> None:
        """Wait for the fetch tasks still running to end (their errors are theirs)."""
        if self._fetches:
            await asyncio.gather(*self._fetches, return_exceptions=True)

    def fetches_for(self, budget: Budget) -> int:
        """Partitions to fetch at once for what ``budget`` still takes, judged by the last batch's size
        (1 before any batch, at most :data:`FETCHES_AT_ONCE`)."""
        count, size = self._last_batch
        if count <= 0:
            return 1
        most = -(-(budget.max_messages - budget.taken) // count)
        if size > 0:
            most = min(most, -(-(budget.max_bytes - budget.used) // size))
        return max(1, min(FETCHES_AT_ONCE, most))

    async def fetch(self, timeout: float, most: int = 1, *, empty: bool = True) -> bool:  # noqa: ASYNC109 - bounds the core's wait
        """Run one core poll (of up to ``most`` partitions at once) into the buffer, or join the one still
        running; True if it added a batch.

        The core poll runs in a task of its own: a poll cancelled by a client disconnect must not lose a
        batch the core already handed out; the task finishes and leaves the batch in the buffer. The next
        poll joins that task instead of starting a second fetch loop over the same partitions. A poll that
        does not wait (``timeout`` 0) and has nothing to answer yet (``empty``) joins a fetch ahead to its
        end, as it would wait for a fetch of its own: the partitions that have messages are in it. One that
        has messages answers them and leaves the fetch ahead to the next poll (a stream's next step finds it
        in hand), and none joins a poll's fetch left running."""
        task = self._fetch_task
        bound: float | None = None  # the task's own timeout bounds it
        if task is None or task.done():
            task = self._start(self._fetch_into_buffer(timeout, most))
        elif timeout > 0:
            bound = timeout
        elif not empty or task is not self._ahead_task:
            return False
        # Waiting does not cancel the task (a cancelled poll leaves it running); a drain ends the wait.
        waiters: set[asyncio.Future[Any]] = {task, self._draining}
        done, _ = await asyncio.wait(waiters, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task in done else False

    def ahead(self, max_messages: int, max_bytes: int) -> None:
        """Fetch ahead of the client's next poll (:mod:`gateway.service.prefetch`): the batches a poll of
        ``max_messages`` and ``max_bytes`` needs beyond what the instance holds, from the partitions that
        are free now (not one whose batch is out: the broker keeps one unconfirmed read per partition),
        within the instance's and the worker's prefetch caps. Nothing while a fetch is on its way; the next
        poll joins this one as it joins its own."""
        state = self._state
        if state.closed_reason is not None or state.consumer.closed or self._draining.done():
            return
        task = self._fetch_task
        if task is not None and not task.done():
            return
        held = self.held_bytes()
        room = Budget(max_messages - state.buffered(), max_bytes - held)
        wanted = self.fetches_for(room) if room.max_messages > 0 and room.max_bytes > 0 else 0
        count = self._ahead.plan(held, wanted, self._last_batch[1])
        if not count:
            return
        fetching = state.consumer.fetch_ready(count)
        if fetching is not None:
            self.fetches_ahead += 1
            self._ahead_task = self._start(self._ahead_into_buffer(fetching))

    def held_bytes(self) -> int:
        """Value bytes fetched and not delivered yet (each batch's bytes times its share undelivered)."""
        batches = self._state.batches.values()
        return sum(b.size * b.undelivered // b.count for b in batches if b.undelivered and b.count)

    def close(self) -> None:
        """The instance closed: it holds nothing fetched ahead any more."""
        self._ahead.close()

    def _start(self, work: Coroutine[Any, Any, bool]) -> asyncio.Task[bool]:
        task = self._fetch_task = asyncio.create_task(work)
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)
        return task

    async def _ahead_into_buffer(self, fetching: Awaitable[list[ConsumedBatch]]) -> bool:
        try:
            batches = await fetching
        except ClientClosed:
            return False
        except TubeMQError as exc:
            # the core gave the partitions back; the next poll fetches them again
            log.warning("a fetch ahead failed (%s); the next poll fetches again", exc)
            return False
        return await self._add_fetched(batches)

    async def _fetch_into_buffer(self, timeout: float, most: int) -> bool:  # noqa: ASYNC109
        try:
            batches = await self._state.consumer.poll_many(timeout, most)
        except ClientClosed:
            return False
        added = await self._add_fetched(batches)
        if added:
            self.poll_fetches += 1
        return added

    async def _add_fetched(self, batches: list[ConsumedBatch]) -> bool:
        """Put fetched batches into the buffer; True if any went in."""
        state = self._state
        added = False
        for batch in batches:
            if state.closed_reason is not None or batch.partition_key in state.seeking:
                # fetched while the instance closes, or from the old position while a seek moves it: give it
                # back (the broker forgets it), so the close's or seek's registration need not wait for it
                with contextlib.suppress(TubeMQError):
                    await state.consumer.confirm(batch.confirm_context, False)
                continue
            self._add_batch(batch)
            added = True
        if added:
            self._ahead.hold(self.held_bytes())
        return added

    def _add_batch(self, batch: ConsumedBatch) -> None:
        state = self._state
        now = state.clock()
        self._last_batch = (len(batch.messages), batch.body_bytes)
        record = Batch(
            context=batch.confirm_context,
            topic=batch.topic,
            partition_key=batch.partition_key,
            broker_id=batch.broker_id,
            partition_id=batch.partition_id,
            fetched_at=now,
            undelivered=len(batch.messages),
            start_offset=batch.curr_offset,
            first_index=batch.messages[0].index if batch.messages else 0,
            count=len(batch.messages),
            size=batch.body_bytes,
        )
        state.batches[record.context] = record
        if batch.topic == state.policy.retry_topic:
            self._redeliverer.add_retried(record, batch.messages)
            return
        messages = batch.messages
        if not messages:
            return
        sizes = value_sizes(messages)
        if not state.attempts:
            state.buffer.append(Segment(record, messages, 0, len(messages), sizes))
            return
        # messages this instance delivered before (their batch was rolled back) count their attempts on:
        # one segment per stretch of one attempt
        memory = state.attempts
        key = batch.partition_key
        attempts = [memory.take(key, m.message_id) for m in messages]
        start = 0
        for i in range(1, len(messages) + 1):
            if i < len(messages) and attempts[i] == attempts[start]:
                continue
            attempt = attempts[start]
            origin = None
            if attempt > 1:
                origin = Origin(batch.topic, key, batch.broker_id, batch.partition_id, attempt)
            state.buffer.append(Segment(record, messages, start, i, sizes, origin))
            start = i
