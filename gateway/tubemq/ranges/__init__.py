"""Partition-explicit reads: a topic's partition layout from the master, bounded offset-range reads, and
the offset where a partition's message times reach a minute.

This face is what the layers above the core use of ``ranges`` (the range service and the Spark source).
"""

from gateway.tubemq.ranges.by_time import TimeSearch, find_time_offset
from gateway.tubemq.ranges.partitions import TopicLayout, discover_partitions
from gateway.tubemq.ranges.reader import RangeReader
from gateway.tubemq.ranges.records import OffsetBounds

__all__ = [
    "OffsetBounds",
    "RangeReader",
    "TimeSearch",
    "TopicLayout",
    "discover_partitions",
    "find_time_offset",
]
