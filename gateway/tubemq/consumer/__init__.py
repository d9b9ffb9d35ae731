"""The consumer: group membership through the master, partition leases, fetches, commits.

This face is what the layers above the core use of the consumer: ``Consumer`` and its config, the
consumed message types, its events (for metrics and logs), and the release of consumers a dead process
left registered (``release_leftovers``).
"""

from gateway.tubemq.consumer.batch import (
    INDEX_ENTRY_SIZE,
    ConsumedBatch,
    ConsumedMessage,
    offset_at_index,
)
from gateway.tubemq.consumer.client import (
    MAX_FILTER_ITEM_LENGTH,
    AssignedPartition,
    Consumer,
    InvalidConfirmContext,
)
from gateway.tubemq.consumer.config import BoundConsumption, ConsumerConfig, StartPosition
from gateway.tubemq.consumer.events import (
    ConsumerClosed,
    ConsumerHeartbeatFailed,
    ConsumerRegistered,
    FetchOutcome,
    OffsetCommitted,
    PartitionRegistered,
    PartitionRegisterFailed,
    PartitionReleased,
    RebalanceEvent,
)
from gateway.tubemq.consumer.leftovers import LeftoverConsumer, ReleaseOutcome, release_leftovers
from gateway.tubemq.consumer.seek import LATEST_OFFSET, PartitionNotHeld

__all__ = [
    "INDEX_ENTRY_SIZE",
    "LATEST_OFFSET",
    "MAX_FILTER_ITEM_LENGTH",
    "AssignedPartition",
    "BoundConsumption",
    "ConsumedBatch",
    "ConsumedMessage",
    "Consumer",
    "ConsumerClosed",
    "ConsumerConfig",
    "ConsumerHeartbeatFailed",
    "ConsumerRegistered",
    "FetchOutcome",
    "InvalidConfirmContext",
    "LeftoverConsumer",
    "OffsetCommitted",
    "PartitionNotHeld",
    "PartitionRegisterFailed",
    "PartitionRegistered",
    "PartitionReleased",
    "RebalanceEvent",
    "ReleaseOutcome",
    "StartPosition",
    "offset_at_index",
    "release_leftovers",
]
