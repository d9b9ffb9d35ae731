"""Partition-explicit reads: a topic's partition layout from the master and bounded offset-range reads.

This face is what the layers above the core use of ``ranges`` (the range service and the Spark source).
"""

from gateway.tubemq.ranges.partitions import TopicLayout, discover_partitions
from gateway.tubemq.ranges.reader import RangeReader
from gateway.tubemq.ranges.records import OffsetBounds

__all__ = ["OffsetBounds", "RangeReader", "TopicLayout", "discover_partitions"]
