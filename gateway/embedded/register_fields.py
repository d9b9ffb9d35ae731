"""Reading consumer registration fields the way the real master does (``PBParameterUtils``,
``DataConverterUtil``): topic lists, filter conditions, bound start offsets, V2 subscription reports.

Checks that the real master answers with an errCode raise ``FieldError``; text it cannot parse at all (where
Java's parser throws and the client gets an RPC ERROR) raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.embedded.master_common import (
    BAD_REQUEST,
    MAX_BOOKED_TOPICS,
    TOPIC_NOT_DEPLOYED,
    UNDEFINED,
    FieldError,
    java_set,
)
from gateway.tubemq.wire.meta import BrokerInfo, Partition, parse_subscribe_info
from gateway.tubemq.wire.pb import MasterService_pb2 as pb


def check_consumer_topics(topics: Iterable[str], deployed: set[str]) -> frozenset[str]:
    """Non-empty, at most 1024 distinct non-blank topics, every one deployed (else 431)."""
    items = list(topics)
    if not items:
        raise FieldError(BAD_REQUEST, "Request miss necessary subscribed topicList data!")
    names = frozenset(name.strip() for name in items if name.strip())
    if not names:
        raise FieldError(BAD_REQUEST, "Request subscribed topicList data must not Blank!")
    if len(names) > MAX_BOOKED_TOPICS:
        raise FieldError(
            BAD_REQUEST,
            f"Subscribed topicList size over max value, required max count is {MAX_BOOKED_TOPICS}",
        )
    missing = names - deployed
    if missing:
        raise FieldError(TOPIC_NOT_DEPLOYED, f"Requested topic [{java_set(missing)}] not deployed!")
    return names


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split`` of Java: trailing empty strings are dropped."""
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def parse_conditions(items: Iterable[str]) -> dict[str, frozenset[str]]:
    """``topic#a,b`` items into topic -> filter set; blank items and blank halves are skipped."""
    conditions: dict[str, set[str]] = {}
    for item in items:
        if not item.strip():
            continue
        parts = _java_split(item, "#")
        if len(parts) < 2:
            raise ValueError(f"topic condition {item!r} has no filter part")
        topic, wanted = parts[0].strip(), parts[1]
        if not topic or not wanted.strip():
            continue
        conditions.setdefault(topic, set()).update(c.strip() for c in wanted.split(",") if c.strip())
    return {topic: frozenset(items) for topic, items in conditions.items()}


def parse_required_parts(text: str, topics: frozenset[str]) -> dict[str, int]:
    """Bound mode ``brokerId:topic:partitionId=offset,...``; keys must name subscribed topics."""
    required: dict[str, int] = {}
    if not text.strip():
        return required
    shape = " must be aa:bbb:ccc=val1,ddd:eee:ff=val2"
    for item in _java_split(text.strip(), ","):
        key_value = _java_split(item, "=")
        if len(key_value) < 2:
            raise FieldError(
                BAD_REQUEST, f"[Parameter error] unformatted Partition-Offset value : {item}{shape}"
            )
        key = key_value[0].strip()
        key_items = _java_split(key, ":")
        if len(key_items) != 3:
            raise FieldError(
                BAD_REQUEST, f"[Parameter error] unformatted Partition-Offset value : {item}{shape}"
            )
        if key_items[1].strip() not in topics:
            raise FieldError(
                BAD_REQUEST,
                "[Parameter error] wrong offset reset for unsubscribed topic: reset item is "
                f"{item}, request topicList are {java_set(topics)}",
            )
        try:
            required[key] = int(key_value[1].strip())
        except ValueError:
            raise FieldError(
                BAD_REQUEST, f"[Parameter error] required long type value of {item}' Offset!"
            ) from None
    return required


def parse_subscribed(items: Iterable[str]) -> list[Partition]:
    """The partitions named by a consumer's subscribeInfo strings (blank entries skipped)."""
    return [parse_subscribe_info(item).partition for item in items if item.strip()]


@dataclass(slots=True)
class SubscriptionReport:
    """A V2 consumer's ``ClientSubRepInfo``; ``reported`` is False when it did not report partitions."""

    broker_config_id: int = UNDEFINED
    topic_meta_id: int = UNDEFINED
    last_assigned_ms: int = UNDEFINED
    reported: bool = False
    partitions: list[Partition] = field(default_factory=list)


def parse_report(
    info: pb.ClientSubRepInfo | None, broker_info: Callable[[int], BrokerInfo | None]
) -> SubscriptionReport:
    """Read ``topic#brokerId:partitionId,...`` items; partitions on brokers we do not know are skipped."""
    report = SubscriptionReport()
    if info is None:
        return report
    report.broker_config_id = info.brokerConfigId
    report.topic_meta_id = info.topicMetaInfoId
    if info.HasField("lstAssignedTime"):
        report.last_assigned_ms = info.lstAssignedTime
    report.reported = info.reportSubInfo
    if not report.reported:
        return report
    for item in info.partSubInfo:
        if not item.strip():
            continue
        segments = _java_split(item, "#")
        if len(segments) < 2:
            raise ValueError(f"partSubInfo {item!r} has no partition list")
        for pair in _java_split(segments[1], ","):
            broker_id, _, partition_id = pair.partition(":")
            broker = broker_info(int(broker_id))
            if broker is not None:
                report.partitions.append(Partition(broker, segments[0], int(partition_id)))
    return report


def flow_control_defaults(answer: pb.RegisterResponseM2C | pb.HeartResponseM2C) -> None:
    """Flow control and query priority are off: every id -2, every rule text a single space."""
    answer.ssdStoreId = UNDEFINED
    answer.defFlowCheckId = UNDEFINED
    answer.groupFlowCheckId = UNDEFINED
    answer.qryPriorityId = UNDEFINED
    answer.defFlowControlInfo = " "
    answer.groupFlowControlInfo = " "
