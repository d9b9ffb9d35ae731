"""The producer: topic routes from the master, partition choice, sends to brokers, the send results.

This face is what the layers above the core use of the producer: ``Producer`` and its config, the
route and result types, and its events (for metrics and logs).
"""

from gateway.tubemq.producer.client import Producer
from gateway.tubemq.producer.config import ProducerConfig, TopicRouteInfo
from gateway.tubemq.producer.events import (
    BrokerShielded,
    BrokerUnshielded,
    ProducerHeartbeatFailed,
    ProducerRegistered,
    RegisterFailed,
    SendCompleted,
)
from gateway.tubemq.producer.send import SendResult

__all__ = [
    "BrokerShielded",
    "BrokerUnshielded",
    "Producer",
    "ProducerConfig",
    "ProducerHeartbeatFailed",
    "ProducerRegistered",
    "RegisterFailed",
    "SendCompleted",
    "SendResult",
    "TopicRouteInfo",
]
