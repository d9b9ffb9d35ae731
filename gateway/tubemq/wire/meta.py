"""Metadata strings exchanged with the master and brokers (§5.1).

Separators: ``#`` between segments, ``:`` between attributes, ``@`` between consumer id and group, ``,``
between items, ``=`` between a key and its value. Parsers raise :class:`MetaFormatError` (a ValueError)
naming the string they could not read; formatters write exactly what the Java master and client write.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.tubemq.address import NodeAddress

__all__ = [
    "DEFAULT_BROKER_PORT",
    "DEFAULT_BROKER_TLS_PORT",
    "STORE_PARTITION_BASE",
    "BrokerInfo",
    "FailureInfo",
    "MetaFormatError",
    "Partition",
    "SubscribeInfo",
    "TopicBroker",
    "TopicInfo",
    "default_broker_port",
    "format_broker_info",
    "format_failure_info",
    "format_partition",
    "format_required_partitions",
    "format_subscribe_info",
    "format_topic_condition",
    "format_topic_info",
    "parse_broker_info",
    "parse_failure_info",
    "parse_partition",
    "parse_partition_key",
    "parse_required_partitions",
    "parse_subscribe_info",
    "parse_topic_condition",
    "parse_topic_info",
    "partition_key",
]

DEFAULT_BROKER_PORT = 8123
DEFAULT_BROKER_TLS_PORT = 8124
#: partition id = store index * STORE_PARTITION_BASE + partition index within the store
STORE_PARTITION_BASE = 10000

_INT = re.compile(r"-?[0-9]+")


class MetaFormatError(ValueError):
    """A metadata string does not have the expected format."""

    def __init__(self, kind: str, text: str, problem: str) -> None:
        super().__init__(f"invalid {kind} {text!r}: {problem}")
        self.kind = kind
        self.text = text


def _int(value: str, kind: str, text: str, what: str) -> int:
    value = value.strip()
    if not _INT.fullmatch(value):
        raise MetaFormatError(kind, text, f"{what} {value!r} is not an integer")
    return int(value)


def _name(value: str, kind: str, text: str, what: str) -> str:
    if not value or value != value.strip():
        raise MetaFormatError(kind, text, f"{what} {value!r} is blank or padded")
    return value


# --- brokerInfo -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class BrokerInfo:
    """A broker as the master lists it: ``brokerId:host:port``."""

    broker_id: int
    host: str
    port: int = DEFAULT_BROKER_PORT

    @property
    def address(self) -> NodeAddress:
        return NodeAddress(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.broker_id}:{self.host}:{self.port}"


def parse_broker_info(text: str, default_port: int | None = DEFAULT_BROKER_PORT) -> BrokerInfo:
    """Parse ``brokerId:host:port``; a missing or blank port (``1:10.0.0.5: ``) means ``default_port``
    (8123 on the plain list, 8124 on the TLS list). With ``default_port=None`` the port is required."""
    kind = "brokerInfo"
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise MetaFormatError(kind, text, "expected brokerId:host:port")
    broker_id = _int(parts[0], kind, text, "broker id")
    host = _name(parts[1].strip(), kind, text, "host")
    if len(parts) == 2 or not parts[2].strip():
        if default_port is None:
            raise MetaFormatError(kind, text, "the port is missing")
        return BrokerInfo(broker_id, host, default_port)
    port = _int(parts[2], kind, text, "port")
    if not 0 < port < 65536:
        raise MetaFormatError(kind, text, f"port {port} is out of range")
    return BrokerInfo(broker_id, host, port)


def default_broker_port(tls: bool) -> int:
    """The port a blank brokerInfo port stands for: 8124 on the TLS broker list a master sends to a client
    that reached it over TLS, else 8123 (Java: ``DataConverterUtil.convertBrokerInfo``)."""
    return DEFAULT_BROKER_TLS_PORT if tls else DEFAULT_BROKER_PORT


def format_broker_info(broker: BrokerInfo, default_port: int = DEFAULT_BROKER_PORT) -> str:
    """Write ``brokerId:host:port`` like the master: the default port becomes a single space."""
    if broker.port == default_port:
        return f"{broker.broker_id}:{broker.host}: "
    return str(broker)


# --- partitions -------------------------------------------------------------------------------------


def partition_key(broker_id: int, topic: str, partition_id: int) -> str:
    """The partition key ``brokerId:topic:partitionId`` (bound offsets, confirm contexts)."""
    return f"{broker_id}:{topic}:{partition_id}"


def parse_partition_key(text: str) -> tuple[int, str, int]:
    """Parse ``brokerId:topic:partitionId`` into its three parts."""
    kind = "partition key"
    parts = text.split(":")
    if len(parts) != 3:
        raise MetaFormatError(kind, text, "expected brokerId:topic:partitionId")
    return (
        _int(parts[0], kind, text, "broker id"),
        _name(parts[1], kind, text, "topic"),
        _int(parts[2], kind, text, "partition id"),
    )


@dataclass(frozen=True, slots=True, order=True)
class Partition:
    """One partition of a topic on a broker; ``str()`` gives the partition string."""

    broker: BrokerInfo
    topic: str
    partition_id: int

    @property
    def partition_key(self) -> str:
        return partition_key(self.broker.broker_id, self.topic, self.partition_id)

    @property
    def store_index(self) -> int:
        return self.partition_id // STORE_PARTITION_BASE

    @property
    def partition_index(self) -> int:
        """The partition's index within its store."""
        return self.partition_id % STORE_PARTITION_BASE

    def __str__(self) -> str:
        return f"{self.broker}#{self.topic}:{self.partition_id}"


def format_partition(partition: Partition) -> str:
    """``brokerId:host:port#topic:partitionId``, always with an explicit port."""
    return str(partition)


def parse_partition(text: str) -> Partition:
    """Parse a partition string ``brokerId:host:port#topic:partitionId``."""
    kind = "partition string"
    segments = text.split("#")
    if len(segments) != 2:
        raise MetaFormatError(kind, text, "expected brokerId:host:port#topic:partitionId")
    return _partition(segments[0], segments[1], kind, text)


def _partition(broker_text: str, part_text: str, kind: str, text: str) -> Partition:
    try:
        broker = parse_broker_info(broker_text, default_port=None)
    except MetaFormatError as exc:
        raise MetaFormatError(kind, text, str(exc)) from None
    topic, sep, pid = part_text.partition(":")
    if not sep or ":" in pid:
        raise MetaFormatError(kind, text, "expected topic:partitionId after '#'")
    return Partition(broker, _name(topic, kind, text, "topic"), _int(pid, kind, text, "partition id"))


# --- topicInfo --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicBroker:
    """How a topic is deployed on one broker: ``brokerId:numPartitions:numStores``."""

    broker_id: int
    num_partitions: int
    num_stores: int = 1

    def partition_ids(self) -> list[int]:
        """Partition ids ``store * 10000 + index``, store by store, as the Java client builds them."""
        return [
            store * STORE_PARTITION_BASE + index
            for store in range(self.num_stores)
            for index in range(self.num_partitions)
        ]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A producer heartbeat's topicInfo: the brokers publishing a topic and its max message size."""

    topic: str
    brokers: tuple[TopicBroker, ...]
    max_msg_size: int | None = None

    def partitions(self, brokers: Mapping[int, BrokerInfo]) -> list[Partition]:
        """The topic's partitions on the listed brokers; broker ids absent from ``brokers`` are skipped
        (the master lists brokers in a separate field)."""
        result: list[Partition] = []
        for entry in self.brokers:
            broker = brokers.get(entry.broker_id)
            if broker is not None:
                result.extend(Partition(broker, self.topic, pid) for pid in entry.partition_ids())
        return result


def parse_topic_info(text: str) -> TopicInfo:
    """Parse ``topic#brokerId:numPartitions:numStores[,...]#maxMsgSize`` (max size may be empty)."""
    kind = "topicInfo"
    segments = text.strip().split("#")
    if len(segments) not in (2, 3):
        raise MetaFormatError(kind, text, "expected topic#brokerId:numPartitions:numStores[,...]#maxMsgSize")
    topic = _name(segments[0], kind, text, "topic")
    entries: list[TopicBroker] = []
    for item in segments[1].split(","):
        fields = item.split(":")
        if len(fields) != 3:
            raise MetaFormatError(
                kind, text, f"broker entry {item!r} is not brokerId:numPartitions:numStores"
            )
        broker_id, num_partitions, num_stores = (_int(f, kind, text, "broker entry field") for f in fields)
        if num_partitions < 1 or num_stores < 1:
            raise MetaFormatError(kind, text, f"broker entry {item!r} has no partitions")
        entries.append(TopicBroker(broker_id, num_partitions, num_stores))
    max_size = None
    if len(segments) == 3 and segments[2].strip():
        max_size = _int(segments[2], kind, text, "max message size")
    return TopicInfo(topic, tuple(entries), max_size)


def format_topic_info(info: TopicInfo) -> str:
    """Write a topicInfo like the master; the trailing ``#`` is always present."""
    if not info.brokers:
        raise ValueError(f"topicInfo of {info.topic!r} needs at least one broker entry")
    entries = ",".join(f"{b.broker_id}:{b.num_partitions}:{b.num_stores}" for b in info.brokers)
    size = "" if info.max_msg_size is None else str(info.max_msg_size)
    return f"{info.topic}#{entries}#{size}"


# --- subscribeInfo and failureInfo ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscribeInfo:
    """A partition held by a consumer: ``consumerId@group#brokerId:host:port#topic:partitionId``."""

    consumer_id: str
    group: str
    partition: Partition

    def __str__(self) -> str:
        return f"{self.consumer_id}@{self.group}#{self.partition}"


def parse_subscribe_info(text: str) -> SubscribeInfo:
    kind = "subscribeInfo"
    segments = text.split("#")
    if len(segments) != 3:
        raise MetaFormatError(kind, text, "expected consumerId@group#brokerId:host:port#topic:partitionId")
    consumer = segments[0].split("@")
    if len(consumer) != 2:
        raise MetaFormatError(kind, text, "expected consumerId@group before the first '#'")
    return SubscribeInfo(
        _name(consumer[0], kind, text, "consumer id"),
        _name(consumer[1], kind, text, "group"),
        _partition(segments[1], segments[2], kind, text),
    )


def format_subscribe_info(info: SubscribeInfo) -> str:
    return str(info)


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """A partition the broker reports as failed in a heartbeat answer: ``errCode:<partition string>``."""

    err_code: int
    partition: Partition

    def __str__(self) -> str:
        return f"{self.err_code}:{self.partition}"


def parse_failure_info(text: str) -> FailureInfo:
    kind = "failureInfo"
    code, sep, rest = text.partition(":")
    if not sep:
        raise MetaFormatError(kind, text, "expected errCode:brokerId:host:port#topic:partitionId")
    try:
        partition = parse_partition(rest)
    except MetaFormatError as exc:
        raise MetaFormatError(kind, text, str(exc)) from None
    return FailureInfo(_int(code, kind, text, "error code"), partition)


def format_failure_info(info: FailureInfo) -> str:
    return str(info)


# --- consumer registration strings ------------------------------------------------------------------


def format_topic_condition(topic: str, items: Iterable[str]) -> str:
    """``topic#item1,item2`` for a filtered subscription; items are trimmed, de-duplicated and sorted
    (the Java consumer keeps them in a sorted set)."""
    conditions = sorted({item.strip() for item in items if item.strip()})
    if not conditions:
        raise ValueError(f"topic condition of {topic!r} needs at least one filter item")
    return f"{topic}#{','.join(conditions)}"


def parse_topic_condition(text: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``topic#item1,item2`` into the topic and its sorted, distinct filter items."""
    kind = "topicCondition"
    topic, sep, rest = text.partition("#")
    topic = topic.strip()
    items = tuple(sorted({item.strip() for item in rest.split(",") if item.strip()}))
    if not sep or not topic or not items or "#" in rest:
        raise MetaFormatError(kind, text, "expected topic#item[,item...]")
    return topic, items


def format_required_partitions(offsets: Mapping[str, int]) -> str:
    """``partKey=offset[,...]`` for a bound (offset-specified) registration, in the mapping's order."""
    for key in offsets:
        parse_partition_key(key)
    return ",".join(f"{key}={offset}" for key, offset in offsets.items())


def parse_required_partitions(text: str) -> dict[str, int]:
    kind = "requiredPartition"
    result: dict[str, int] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, offset = item.partition("=")
        if not sep:
            raise MetaFormatError(kind, text, f"item {item!r} is not partKey=offset")
        try:
            parse_partition_key(key)
        except MetaFormatError as exc:
            raise MetaFormatError(kind, text, str(exc)) from None
        result[key] = _int(offset, kind, text, "offset")
    return result
