"""The fetch side of a consumer instance: core polls into the instance's buffer, several partitions at once
when a poll's budget takes more than one batch. A collaborator of
:class:`gateway.service.instance.ConsumerInstance`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from gateway.service.instance_holdings import Holdings
from gateway.service.instance_records import Batch, Budget
from gateway.service.instance_redelivery import Redeliverer
from gateway.service.redelivery import Origin
from gateway.tubemq.consumer import ConsumedBatch
from gateway.tubemq.errors import ClientClosed, TubeMQError

__all__ = ["FETCHES_AT_ONCE", "Fetcher"]

#: partitions a poll fetches at once at most, when its budget takes more than one batch
FETCHES_AT_ONCE = 4


class Fetcher:
    """Core fetches of one consumer instance into the buffer of its :class:`Holdings`; a batch of the
    retry topic goes to its :class:`Redeliverer`. ``draining`` is done once the gateway is stopping: a
    poll waiting for a fetch stops waiting then."""

    __slots__ = ("_draining", "_fetch_task", "_fetches", "_last_batch", "_redeliverer", "_state")

    def __init__(self, state: Holdings, redeliverer: Redeliverer, draining: asyncio.Future[None]) -> None:
        self._state = state
        self._redeliverer = redeliverer
        self._draining = draining
        #: core fetch tasks still running; the latest, which a poll joins
        self._fetches: set[asyncio.Task[bool]] = set()
        self._fetch_task: asyncio.Task[bool] | None = None
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
        most = -(-(budget.max_messages - len(budget.out)) // count)
        if size > 0:
            most = min(most, -(-(budget.max_bytes - budget.used) // size))
        return max(1, min(FETCHES_AT_ONCE, most))

    async def fetch(self, timeout: float, most: int = 1) -> bool:  # noqa: ASYNC109 - bounds the core's wait
        """Run one core poll (of up to ``most`` partitions at once) into the buffer, or join the one still
        running; True if it added a batch.

        The core poll runs in a task of its own: a poll cancelled by a client disconnect must not lose a
        batch the core already handed out; the task finishes and leaves the batch in the buffer. The next
        poll joins that task instead of starting a second fetch loop over the same partitions."""
        task = self._fetch_task
        if task is None or task.done():
            task = self._fetch_task = asyncio.create_task(self._fetch_into_buffer(timeout, most))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)
            bound: float | None = None  # the task's own timeout bounds it
        elif timeout <= 0:
            return False
        else:
            bound = timeout
        # Waiting does not cancel the task (a cancelled poll leaves it running); a drain ends the wait.
        waiters: set[asyncio.Future[Any]] = {task, self._draining}
        done, _ = await asyncio.wait(waiters, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task in done else False

    async def _fetch_into_buffer(self, timeout: float, most: int) -> bool:  # noqa: ASYNC109
        state = self._state
        try:
            batches = await state.consumer.poll_many(timeout, most)
        except ClientClosed:
            return False
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
        )
        state.batches[record.context] = record
        if batch.topic == state.policy.retry_topic:
            self._redeliverer.add_retried(record, batch.messages)
        elif state.attempts:
            memory = state.attempts
            key = batch.partition_key
            for message in batch.messages:
                attempt = memory.take(key, message.message_id)
                origin = None
                if attempt > 1:
                    origin = Origin(batch.topic, key, batch.broker_id, batch.partition_id, attempt)
                state.buffer.append((record, message, origin))
        else:
            state.buffer.extend(zip(itertools.repeat(record), batch.messages, itertools.repeat(None)))
