"""Batch reads of the ``tubemq`` source.

**Batch read**: one Spark partition per TubeMQ partition, each reading exactly its ``[start, end)`` of index
offsets (``startingOffsets`` / ``endingOffsets``, planned once on the driver) with the exact cut of
:mod:`gateway.tubemq.ranges.reader`. Columns: ``topic``, ``partition`` (partition key), ``offset`` (the
message's index offset when the wire proves it, else null: see the range reader), ``message_id``, ``key``
(the key it was published with: the ``$msgKey$`` attribute, else null), ``value``, ``attributes``,
``stream_id`` (``$msgType$``), ``msg_time`` (``$msgTime$``, producer local time), ``append_time`` (always
null: a TubeMQ fetch does not carry the broker's append time).

A topic none of whose partitions is subscribable yet (not deployed on a broker, or subscribing is off there)
reads as no rows, with a warning in the driver's log; a topic the master does not know fails the read with
the master's error.

**Several topics**: ``topic`` (or ``subscribe``) may name several, comma-separated; partition keys carry
the topic, so offsets, ranges and rows keep them apart.

**Stream-id filter**: option ``streamId`` (a comma list) reads only messages of those stream ids, filtered
by the broker (TubeMQ's filter items) and checked again here against hash collisions; exact ranges stay
exact (the broker steps over other stream ids' entries as over sibling partitions'). In a batch query,
``where stream_id = 'x'`` and ``stream_id in ('x', 'y')`` are pushed down to the same filter when
``spark.sql.python.filterPushdown.enabled`` is true when :func:`gateway.spark.register` runs (it then
registers :class:`gateway.spark.source.TubeMQFilteringDataSource`; Spark 4.3 refuses a Python reader that
can take filters while pushdown is off, so the plain source has none). Through a gateway (``gateway``
option) the filter applies to the rows the gateway returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader, EqualTo, Filter, In, InputPartition

from gateway.spark import backend
from gateway.spark.options import SourceOptions, stream_id_filter
from gateway.spark.partitions import TubeMQInputPartition, read_partition, split_ranges

__all__ = ["TubeMQBatchReader", "TubeMQFilteringBatchReader"]

log = logging.getLogger("gateway.spark.source")  # the name its warnings had before the split


class TubeMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        planned = backend.plan(opts)
        if not planned:
            log.warning(
                "topics %s list no subscribable partition yet (not deployed on a broker, or subscribing "
                "is off there): the read returns no rows",
                list(opts.topics),
            )
        for spec, name in ((opts.starting, "startingOffsets"), (opts.ending, "endingOffsets")):
            unknown = sorted(set(spec.per_partition) - set(planned))
            if unknown:
                raise ValueError(f"{name} names partitions the topic does not have now: {unknown}")
        ranges = []
        for key in sorted(planned):
            p = planned[key]
            low, high = p.bounds.min_offset, p.bounds.max_offset
            start = opts.starting.resolve(key, low, high)
            end = min(opts.ending.resolve(key, low, high), high)
            if start < low:
                backend.data_loss(opts, f"partition {key}: startingOffsets {start} expired (oldest is {low})")
            elif start > high:
                backend.data_loss(opts, f"partition {key}: startingOffsets {start} is past its end {high}")
            ranges.append(p.range(start, max(start, end), fail_on_data_loss=opts.fail_on_data_loss))
        return [TubeMQInputPartition(r) for r in split_ranges(ranges, opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)


class TubeMQFilteringBatchReader(TubeMQBatchReader):
    """A batch reader that takes ``stream_id = 'x'`` and ``stream_id IN (...)`` filters down to the broker's
    stream-id filter (the other filters stay with Spark)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        wanted = set(self.options.stream_ids) if self.options.stream_ids else None
        taken: list[Filter] = []
        for item in filters:
            values = _stream_id_values(item)
            if values is None:
                yield item
                continue
            narrowed = values if wanted is None else wanted & values
            if not narrowed:  # nothing can match: Spark's own filter returns no rows
                yield item
                continue
            wanted = narrowed
            taken.append(item)
        if taken and wanted is not None:
            self.options = replace(
                self.options, stream_ids=stream_id_filter(sorted(wanted), "stream_id filter")
            )


def _stream_id_values(item: Filter) -> set[str] | None:
    """The stream ids a ``stream_id`` equality or IN filter keeps; None for any other filter."""
    if getattr(item, "attribute", None) != ("stream_id",):
        return None
    if isinstance(item, EqualTo):
        values: tuple[Any, ...] = (item.value,)
    elif isinstance(item, In):
        values = tuple(item.value)
    else:
        return None
    if not values or not all(isinstance(v, str) and v.strip() == v and v for v in values):
        return None
    return set(values)
