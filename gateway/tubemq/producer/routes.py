"""The producer's view of the cluster: brokers, topic partitions and size limits, fed by master answers.

* Brokers come from ``brokerInfos`` (register and heartbeat answers) and are replaced only when the answer's
  ``brokerCheckSum`` differs from the one held (§7.2, §7.3); a blank port means ``default_port``.
* Topics come from every successful heartbeat's ``topicInfos``: the table is rebuilt from scratch, so a
  published topic missing from the answer has no publishable partitions. Partition ids are
  ``store * 10000 + index``; entries naming a broker absent from the broker list are skipped.
* The maximum message size of a topic is the third topicInfo segment, else the cluster default from
  ``appdConfig.maxMsgSize`` (clamped to 1-20 MiB like Java's ``MaxMsgSizeHolder``), else 1 MiB.

Unparsable strings are skipped (and counted in ``skipped``) rather than failing the whole answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import NoPartition, PartitionsAway
from gateway.tubemq.producer.partitioner import PartitionRef
from gateway.tubemq.wire.meta import (
    DEFAULT_BROKER_PORT,
    BrokerInfo,
    MetaFormatError,
    parse_broker_info,
    parse_topic_info,
)
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = ["DEFAULT_MAX_MSG_SIZE", "MAX_MAX_MSG_SIZE", "UNDEFINED_CONFIG_ID", "RouteTable", "TopicRoute"]

DEFAULT_MAX_MSG_SIZE = 1024 * 1024
MAX_MAX_MSG_SIZE = 20 * 1024 * 1024
UNDEFINED_CONFIG_ID = -2
"""The ``configId`` a client holds before the master has sent one (Java's ``META_VALUE_UNDEFINED``)."""


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic's messages can go now: partitions sorted by ``(broker_id, partition_id)``."""

    topic: str
    partitions: tuple[PartitionRef, ...]
    brokers: Mapping[int, NodeAddress]
    max_msg_size: int


@dataclass(slots=True)
class RouteTable:
    """Broker list, topic routes and the settings the master approved; see the module docstring."""

    default_port: int = DEFAULT_BROKER_PORT
    broker_checksum: int = -1
    config_id: int = UNDEFINED_CONFIG_ID
    cluster_max_msg_size: int = DEFAULT_MAX_MSG_SIZE
    visit_token: int = UNDEFINED_CONFIG_ID
    auth_token: str | None = None
    skipped: int = 0
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicRoute] = field(default_factory=dict)
    #: the brokers each topic had partitions on when it last had any (kept while its partitions are away)
    last_seen_on: dict[str, frozenset[int]] = field(default_factory=dict)
    _outage_asks: dict[str, float] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"<RouteTable brokers={sorted(self.brokers)} topics={sorted(self.topics)} "
            f"checksum={self.broker_checksum} config_id={self.config_id}>"
        )

    def route(self, topic: str) -> TopicRoute | None:
        return self.topics.get(topic)

    def apply_register(self, answer: master_pb.RegisterResponseM2P) -> bool:
        """Take a successful register answer; returns whether the broker list changed."""
        changed = self._apply_brokers(answer.brokerCheckSum, answer.brokerInfos)
        if answer.HasField("authorizedInfo"):
            self._apply_authorized(answer.authorizedInfo)
        if answer.HasField("appdConfig"):
            self._apply_config(answer.appdConfig)
        return changed

    def apply_heartbeat(self, answer: master_pb.HeartResponseM2P) -> bool:
        """Take a successful heartbeat answer; returns whether the broker list changed."""
        if answer.HasField("authorizedInfo"):
            self._apply_authorized(answer.authorizedInfo)
        if answer.HasField("appdConfig"):
            self._apply_config(answer.appdConfig)
        changed = False
        if answer.brokerCheckSum != self.broker_checksum and answer.brokerInfos:
            changed = self._apply_brokers(answer.brokerCheckSum, answer.brokerInfos)
        self._apply_topics(answer.topicInfos)
        return changed

    def forget_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        self.last_seen_on.pop(topic, None)
        self._outage_asks.pop(topic, None)

    def partitions_away(self, topic: str) -> frozenset[int]:
        """The brokers of an outage of ``topic``: it had partitions, the master lists none now, and brokers
        it had them on are still in the broker list (the master keeps a configured broker listed while it is
        stopped, and drops its partitions). Empty when the topic has a route, was never seen with partitions,
        or its brokers left the cluster: then the topic is simply not publishable."""
        if topic in self.topics:
            return frozenset()
        return frozenset(b for b in self.last_seen_on.get(topic, ()) if b in self.brokers)

    def no_route(self, topic: str) -> NoPartition:
        """The error of a send to ``topic`` without a route: PartitionsAway in an outage, else NoPartition."""
        away = self.partitions_away(topic)
        return PartitionsAway(topic, away) if away else NoPartition(topic)

    def outage_asked(self, topic: str, now: float, interval: float) -> PartitionsAway | None:
        """For a topic in an outage whose master answer is younger than ``interval`` s: the error to raise
        without asking again; otherwise None (and the ask is recorded when in an outage)."""
        away = self.partitions_away(topic)
        if not away:
            return None
        if now - self._outage_asks.get(topic, now - interval) < interval:
            return PartitionsAway(topic, away)
        self._outage_asks[topic] = now
        return None

    def _apply_brokers(self, checksum: int, infos: Iterable[str]) -> bool:
        if checksum == self.broker_checksum:
            return False
        brokers: dict[int, BrokerInfo] = {}
        for text in infos:
            try:
                broker = parse_broker_info(text, self.default_port)
            except MetaFormatError:
                self.skipped += 1
                continue
            brokers[broker.broker_id] = broker
        self.broker_checksum = checksum
        changed = brokers != self.brokers
        self.brokers = brokers
        return changed

    def _apply_authorized(self, info: master_pb.MasterAuthorizedInfo) -> None:
        self.visit_token = info.visitAuthorizedToken
        if info.HasField("authAuthorizedToken") and info.authAuthorizedToken.strip():
            self.auth_token = info.authAuthorizedToken

    def _apply_config(self, config: master_pb.ApprovedClientConfig) -> None:
        self.config_id = config.configId
        if config.HasField("maxMsgSize"):
            self.cluster_max_msg_size = min(max(config.maxMsgSize, DEFAULT_MAX_MSG_SIZE), MAX_MAX_MSG_SIZE)

    def _apply_topics(self, infos: Iterable[str]) -> None:
        topics: dict[str, TopicRoute] = {}
        for text in infos:
            try:
                info = parse_topic_info(text)
            except MetaFormatError:
                self.skipped += 1
                continue
            partitions = sorted(
                PartitionRef(p.broker.broker_id, p.partition_id) for p in info.partitions(self.brokers)
            )
            if not partitions:
                continue
            used = {p.broker_id for p in partitions}
            addresses = {bid: self.brokers[bid].address for bid in sorted(used)}
            limit = info.max_msg_size if info.max_msg_size and info.max_msg_size > 0 else None
            topics[info.topic] = TopicRoute(
                topic=info.topic,
                partitions=tuple(partitions),
                brokers=MappingProxyType(addresses),
                max_msg_size=limit or self.cluster_max_msg_size,
            )
            self.last_seen_on[info.topic] = frozenset(used)
        self.topics = topics
