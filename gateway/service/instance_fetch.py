"""The fetch side of a consumer instance: core polls into the instance's buffer, several partitions at once
when a poll's budget takes more than one batch. Part of :class:`gateway.service.instance.ConsumerInstance`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from gateway.service.instance_parts import Batch, Budget
from gateway.service.instance_redelivery import Redelivery
from gateway.service.redelivery import Origin
from gateway.tubemq.consumer import ConsumedBatch
from gateway.tubemq.errors import ClientClosed, TubeMQError

__all__ = ["FETCHES_AT_ONCE", "Fetching"]

#: partitions a poll fetches at once at most, when its budget takes more than one batch
FETCHES_AT_ONCE = 4


class Fetching(Redelivery):
    """Core fetches of a consumer instance into its buffer (the state below is set by its ``__init__``)."""

    #: core fetch tasks still running; the latest, which a poll joins
    _fetches: set[asyncio.Task[bool]]
    _fetch_task: asyncio.Task[bool] | None
    #: done once the gateway is stopping
    _draining: asyncio.Future[None]
    #: partitions a seek is moving: a batch fetched meanwhile is rolled back, not delivered
    _seeking: set[str]
    #: messages and value bytes of the last batch fetched (how many partitions a poll fetches at once)
    _last_batch: tuple[int, int]

    def _fetches_for(self, budget: Budget) -> int:
        """Partitions to fetch at once for what ``budget`` still takes, judged by the last batch's size
        (1 before any batch, at most :data:`FETCHES_AT_ONCE`)."""
        count, size = self._last_batch
        if count <= 0:
            return 1
        most = -(-(budget.max_messages - len(budget.out)) // count)
        if size > 0:
            most = min(most, -(-(budget.max_bytes - budget.used) // size))
        return max(1, min(FETCHES_AT_ONCE, most))

    async def _fetch(self, timeout: float, most: int = 1) -> bool:  # noqa: ASYNC109 - bounds the core's wait
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
        try:
            batches = await self.consumer.poll_many(timeout, most)
        except ClientClosed:
            return False
        added = False
        for batch in batches:
            if self.closed_reason is not None or batch.partition_key in self._seeking:
                # fetched while the instance closes, or from the old position while a seek moves it: give it
                # back (the broker forgets it), so the close's or seek's registration need not wait for it
                with contextlib.suppress(TubeMQError):
                    await self.consumer.confirm(batch.confirm_context, False)
                continue
            self._add_batch(batch)
            added = True
        return added

    def _add_batch(self, batch: ConsumedBatch) -> None:
        now = self._clock()
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
        self._batches[record.context] = record
        if batch.topic == self.policy.retry_topic:
            self._add_retried(record, batch.messages)
        elif self._attempts:
            memory = self._attempts
            key = batch.partition_key
            for message in batch.messages:
                attempt = memory.take(key, message.message_id)
                origin = None
                if attempt > 1:
                    origin = Origin(batch.topic, key, batch.broker_id, batch.partition_id, attempt)
                self._buffer.append((record, message, origin))
        else:
            self._buffer.extend(zip(itertools.repeat(record), batch.messages, itertools.repeat(None)))
