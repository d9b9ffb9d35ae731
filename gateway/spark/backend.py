"""What the data source asks of TubeMQ - plan, read a range, write rows - over the native client core or,
with the ``gateway`` option, over a tubemq-gateway's REST API (:mod:`gateway.spark.rest`).

Rows read come as Arrow record batches (:mod:`gateway.spark.arrow`). Rows written are Spark ``Row``
tuples whose column names come from the DataFrame (:mod:`gateway.spark.batches` says which are used); they
go out in bounded batches, each through the producer's batch path (``Producer.send_prepared``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, wait
from typing import Any

from gateway.spark.arrow import from_messages
from gateway.spark.batches import batches, picker, row_bytes
from gateway.spark.core import PartitionRange, PlannedPartition, get_core, plan_topic
from gateway.spark.failures import WriteFailed
from gateway.spark.options import SourceOptions
from gateway.tubemq.errors import ClientError
from gateway.tubemq.producer import Producer
from gateway.tubemq.wire import BatchPreparer, PreparedMessage

__all__ = ["DataLost", "data_loss", "plan", "read_batches", "write_rows"]

log = logging.getLogger(__name__)


def plan(options: SourceOptions) -> dict[str, PlannedPartition]:
    """The partitions of every topic of ``options`` by key, with their stores' bounds (asked now)."""
    if options.gateway is not None:
        from gateway.spark import rest

        return rest.plan(options)
    planned: dict[str, PlannedPartition] = {}
    assert options.masters is not None
    masters = options.masters
    core = get_core(options.timeout, options.tubemq)

    async def plan_all() -> list[dict[str, PlannedPartition]]:
        return await asyncio.gather(
            *(plan_topic(core, masters, topic, options.group_prefix) for topic in options.topics)
        )

    for found in core.run(plan_all()):
        planned.update(found)
    return planned


class DataLost(RuntimeError):
    """Messages a read should return are gone from the broker (``failOnDataLoss`` is true)."""


def data_loss(options: SourceOptions, message: str) -> None:
    """Raise :class:`DataLost` with ``message`` when ``failOnDataLoss`` is true, else log it and go on."""
    if options.fail_on_data_loss:
        raise DataLost(f"{message}; set option failOnDataLoss to false to read on from what exists")
    log.warning("data lost: %s; reading on (failOnDataLoss is false)", message)


def read_batches(options: SourceOptions, task: PartitionRange) -> Iterator[Any]:
    """Arrow record batches of ``task``'s partition in ``[start, end)``, in offset order."""
    if task.end <= task.start:
        return
    if options.gateway is not None:
        from gateway.spark import rest

        yield from rest.read_batches(options, task)
        return
    core = get_core(options.timeout, options.tubemq)
    reader = core.reader(options.group_prefix)
    reader.visit_token = task.visit_token
    lost_before = reader.stats.lost_bytes
    checked = not task.fail_on_data_loss
    for batch in core.iterate(reader.read(task.partition, task.start, task.end, options.stream_ids)):
        if not checked:  # the first register has answered: did the broker skip expired entries?
            checked = True
            _check_expired(task, reader.stats.lost_bytes - lost_before)
        if batch.messages:
            yield from_messages(task.topic, task.key, batch.messages)
    if not checked:
        _check_expired(task, reader.stats.lost_bytes - lost_before)


def _check_expired(task: PartitionRange, lost: int) -> None:
    if lost > 0:
        raise DataLost(
            f"partition {task.key}: offsets {task.start}..{task.start + lost} expired before they were read "
            f"(the broker's oldest is now {task.start + lost}); set option failOnDataLoss to false to read "
            "on from what exists"
        )


def _prepared(
    rows: Iterable[Any], columns: Sequence[str], renew: int
) -> Iterator[tuple[PreparedMessage | Exception, int]]:
    """Each row checked by the publish rules and encoded (``payload.BatchPreparer``, a new one every ``renew``
    rows: a batch's rows share the check and text of their attributes, stream id and msg_time), or the error
    naming the field it breaks (kept in its place: its batch reports it), with its bytes."""
    pick = picker({name: i for i, name in enumerate(columns)})
    preparer = BatchPreparer()
    for n, row in enumerate(rows, 1):
        outgoing = pick(row)
        body, key, attributes, stream_id, msg_time = outgoing
        try:
            message: PreparedMessage | Exception = preparer.prepare(
                body, attributes, stream_id, msg_time, key
            )
        except ClientError as exc:
            message = exc
        if n % renew == 0:
            preparer = BatchPreparer()
        yield message, row_bytes(outgoing)


async def _send_batch(producer: Producer, topic: str, batch: list[PreparedMessage | Exception]) -> int:
    """Send one batch through the producer's batch path; its size once a broker acknowledged every message,
    else :class:`WriteFailed` counting the messages that were not stored and naming the first one's error."""
    ready = [m for m in batch if not isinstance(m, Exception)]
    try:
        sent = await producer.send_prepared(topic, ready) if ready else []
    except Exception as exc:  # the producer is closed, or the topic unpublished or unrouted: none was sent
        raise WriteFailed(
            f"{len(batch)} of {len(batch)} messages to {topic!r} failed; first: {exc!r}"
        ) from exc
    if len(ready) < len(batch):  # rows that broke a publish rule keep their place among the outcomes
        answers = iter(sent)
        sent = [m if isinstance(m, Exception) else next(answers) for m in batch]
    failures = [outcome for outcome in sent if isinstance(outcome, Exception)]
    if failures:
        raise WriteFailed(
            f"{len(failures)} of {len(batch)} messages to {topic!r} failed; first: {failures[0]!r}"
        ) from failures[0]
    return len(batch)


def write_rows(options: SourceOptions, columns: Sequence[str], rows: Iterable[Any]) -> int:
    """Send every row, in batches bounded by ``writeBatchRows`` and ``writeBatchBytes``
    (:mod:`gateway.spark.batches`); returns how many once a broker acknowledged each; raises
    :class:`WriteFailed` when any message failed (the batches before it were stored, those after it are not
    sent)."""
    limits = options.write_batch_rows, options.write_batch_bytes
    if options.gateway is not None:
        from gateway.spark import rest

        pick = picker({name: i for i, name in enumerate(columns)})
        outgoing = (pick(row) for row in rows)
        return sum(
            rest.send_chunk(options, chunk)
            for chunk in batches(((o, row_bytes(o)) for o in outgoing), *limits)
        )
    assert options.masters is not None
    core = get_core(options.timeout, options.tubemq)
    topic = options.topic
    producer = core.run(core.producer(options.masters, topic))
    stored = 0
    # One batch in flight on the core's loop while this thread reads and prepares the next from Spark.
    sending: Future[int] | None = None
    try:
        for batch in batches(_prepared(rows, columns, options.write_batch_rows), *limits):
            if sending is not None:
                stored += sending.result()
            sending = core.submit(_send_batch(producer, topic, batch))
        if sending is not None:
            stored += sending.result()
            sending = None
    finally:
        if sending is not None:  # reading a row failed: let the batch in flight finish before the task ends
            wait([sending])
    return stored
