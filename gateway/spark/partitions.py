"""The tasks of a read: one Spark input partition per exact ``[start, end)`` of a TubeMQ partition, large
ranges split into more tasks (``minPartitions``), and reading one task's range (:mod:`gateway.spark.backend`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import InputPartition

from gateway.spark import backend
from gateway.spark.core import PartitionRange
from gateway.spark.options import SourceOptions
from gateway.tubemq.consumer import INDEX_ENTRY_SIZE

__all__ = ["TubeMQInputPartition", "read_partition", "split_ranges"]


class TubeMQInputPartition(InputPartition):
    """One TubeMQ partition's ``[start, end)``."""

    def __init__(self, value: PartitionRange) -> None:
        super().__init__(value)
        self.range = value


def read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, TubeMQInputPartition):
        # When partitions() plans none (no partition of the topics is subscribable yet), Spark still runs
        # one task, with a placeholder InputPartition(None): it reads nothing.
        return iter(())
    return backend.read_batches(options, partition.range)


def split_ranges(ranges: list[PartitionRange], min_partitions: int | None) -> list[PartitionRange]:
    """``ranges`` cut into at least about ``min_partitions`` tasks (as Kafka's ``minPartitions``): each
    non-empty range gets pieces in proportion to its size, cut at index entries (every piece is read
    exactly, so the pieces together hold exactly the range's messages). None or few enough: unchanged."""
    sizes = [(r.end - r.start) // INDEX_ENTRY_SIZE for r in ranges]
    total = sum(sizes)
    if min_partitions is None or total == 0 or len([n for n in sizes if n > 0]) >= min_partitions:
        return ranges
    pieces: list[PartitionRange] = []
    for r, entries in zip(ranges, sizes, strict=True):
        parts = max(1, min(entries, -(-entries * min_partitions // total)))
        cuts = [r.start + INDEX_ENTRY_SIZE * (entries * i // parts) for i in range(parts)] + [r.end]
        pieces.extend(replace(r, start=low, end=high) for low, high in itertools.pairwise(cuts))
    return pieces
