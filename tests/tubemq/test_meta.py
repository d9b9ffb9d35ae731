import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.wire.meta import (
    BrokerInfo,
    FailureInfo,
    MetaFormatError,
    Partition,
    SubscribeInfo,
    TopicBroker,
    TopicInfo,
    format_broker_info,
    format_failure_info,
    format_partition,
    format_required_partitions,
    format_subscribe_info,
    format_topic_condition,
    format_topic_info,
    parse_broker_info,
    parse_failure_info,
    parse_partition,
    parse_partition_key,
    parse_required_partitions,
    parse_subscribe_info,
    parse_topic_condition,
    parse_topic_info,
    partition_key,
)
from tests.support.files import CAPTURE_FILE

CAPTURE = CAPTURE_FILE
CONSUMER = "capg31924_192.0.2.2-13011-4016233284762-1413966524-Pull-2.5.0-SNAPSHOT"
LOCAL_BROKER = BrokerInfo(1, "127.0.0.1", 8123)


def _walk(node: Any, field: str) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == field:
                yield from value if isinstance(value, list) else [value]
            else:
                yield from _walk(value, field)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, field)


@pytest.fixture(scope="module")
def capture() -> Any:
    return json.loads(CAPTURE.read_text())


def test_capture_broker_infos(capture: Any) -> None:
    infos = set(_walk(capture, "brokerInfos"))
    assert infos == {"1:127.0.0.1: "}
    broker = parse_broker_info("1:127.0.0.1: ")
    assert broker == LOCAL_BROKER
    assert broker.address == NodeAddress("127.0.0.1", 8123)
    assert format_broker_info(broker) == "1:127.0.0.1: "
    assert parse_broker_info("1:127.0.0.1: ", default_port=8124).port == 8124


def test_capture_topic_infos(capture: Any) -> None:
    infos = set(_walk(capture, "topicInfos"))
    assert infos == {"demo#1:3:1#"}
    info = parse_topic_info("demo#1:3:1#")
    assert info == TopicInfo("demo", (TopicBroker(1, 3, 1),), None)
    assert format_topic_info(info) == "demo#1:3:1#"
    parts = info.partitions({1: LOCAL_BROKER})
    assert [p.partition_id for p in parts] == [0, 1, 2]
    assert [p.partition_key for p in parts] == ["1:demo:0", "1:demo:1", "1:demo:2"]
    assert info.partitions({2: LOCAL_BROKER}) == []


def test_capture_subscribe_and_partition_infos(capture: Any) -> None:
    subscribe = set(_walk(capture, "subscribeInfo"))
    assert len(subscribe) == 3
    for text in subscribe:
        info = parse_subscribe_info(text)
        assert info.consumer_id == CONSUMER and info.group == "capg31924"
        assert info.partition.broker == LOCAL_BROKER and info.partition.topic == "demo"
        assert format_subscribe_info(info) == text
    assert sorted(parse_subscribe_info(t).partition.partition_id for t in subscribe) == [0, 1, 2]
    part_infos = set(_walk(capture, "partitionInfo"))
    assert part_infos == {"1:127.0.0.1:8123#demo:0", "1:127.0.0.1:8123#demo:1", "1:127.0.0.1:8123#demo:2"}
    for text in part_infos:
        part = parse_partition(text)
        assert format_partition(part) == str(part) == text


def test_doc_examples() -> None:
    info = parse_topic_info("demo#1:3:1,2:3:2#1048576")
    assert info.max_msg_size == 1048576
    assert info.brokers[1].partition_ids() == [0, 1, 2, 10000, 10001, 10002]
    assert format_topic_info(info) == "demo#1:3:1,2:3:2#1048576"
    assert parse_topic_info(" demo#1:2:1 ") == TopicInfo("demo", (TopicBroker(1, 2),))
    assert parse_broker_info("2:10.0.0.6:9123") == BrokerInfo(2, "10.0.0.6", 9123)
    assert format_broker_info(BrokerInfo(2, "10.0.0.6", 9123)) == "2:10.0.0.6:9123"
    assert format_broker_info(BrokerInfo(2, "h", 8124), default_port=8124) == "2:h: "
    assert parse_broker_info("3:h") == BrokerInfo(3, "h", 8123)
    failure = parse_failure_info("411:1:10.0.0.5:8123#demo:0")
    assert failure == FailureInfo(411, Partition(BrokerInfo(1, "10.0.0.5"), "demo", 0))
    assert format_failure_info(failure) == "411:1:10.0.0.5:8123#demo:0"
    part = Partition(LOCAL_BROKER, "demo", 10002)
    assert (part.store_index, part.partition_index) == (1, 2)
    assert partition_key(1, "demo", 0) == "1:demo:0"
    assert parse_partition_key("1:demo:0") == (1, "demo", 0)


def test_topic_condition_and_required_partitions() -> None:
    assert format_topic_condition("demo", ["refund", "order", " order "]) == "demo#order,refund"
    assert parse_topic_condition("demo#refund,order") == ("demo", ("order", "refund"))
    with pytest.raises(ValueError, match="filter item"):
        format_topic_condition("demo", [" "])
    offsets = {"1:demo:0": 280, "1:demo:1": 0}
    text = format_required_partitions(offsets)
    assert text == "1:demo:0=280,1:demo:1=0"
    assert parse_required_partitions(text) == offsets
    assert parse_required_partitions("") == {}
    with pytest.raises(MetaFormatError):
        format_required_partitions({"demo:0": 1})


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (parse_broker_info, "x:127.0.0.1:8123"),
        (parse_broker_info, "1::8123"),
        (parse_broker_info, "1:h:port"),
        (parse_broker_info, "1:h:70000"),
        (parse_broker_info, "1"),
        (parse_broker_info, "1:h:2:3"),
        (parse_topic_info, "demo"),
        (parse_topic_info, "demo##"),
        (parse_topic_info, "demo#1:3#"),
        (parse_topic_info, "demo#1:0:1#"),
        (parse_topic_info, "demo#1:3:1#big"),
        (parse_topic_info, "#1:3:1#"),
        (parse_partition, "1:127.0.0.1: #demo:0"),
        (parse_partition, "1:127.0.0.1:8123#demo"),
        (parse_partition, "1:127.0.0.1:8123#demo:x"),
        (parse_partition, "1:127.0.0.1:8123"),
        (parse_partition_key, "1:demo"),
        (parse_subscribe_info, "c#1:h:1#demo:0"),
        (parse_subscribe_info, "c@g@x#1:h:1#demo:0"),
        (parse_subscribe_info, "c@g#1:h:1"),
        (parse_subscribe_info, "@g#1:h:1#demo:0"),
        (parse_failure_info, "411"),
        (parse_failure_info, "x:1:h:1#demo:0"),
        (parse_failure_info, "411:1:h#demo:0"),
        (parse_topic_condition, "demo"),
        (parse_topic_condition, "demo#"),
        (parse_required_partitions, "1:demo:0"),
        (parse_required_partitions, "1:demo:0=x"),
        (parse_required_partitions, "demo:0=1"),
    ],
)
def test_parsers_reject(parser: Any, text: str) -> None:
    with pytest.raises(MetaFormatError) as info:
        parser(text)
    assert isinstance(info.value, ValueError)
    assert repr(text) in str(info.value)


def test_format_topic_info_needs_brokers() -> None:
    with pytest.raises(ValueError, match="broker entry"):
        format_topic_info(TopicInfo("demo", ()))


names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,20}", fullmatch=True)
hosts = st.ip_addresses(v=4).map(str) | st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True)
ints = st.integers(0, 2**31 - 1)
brokers = st.builds(BrokerInfo, ints, hosts, st.integers(1, 65535))
partitions = st.builds(Partition, brokers, names, st.integers(0, 99_999))


@given(brokers, st.sampled_from([8123, 8124]))
def test_broker_roundtrip(broker: BrokerInfo, default_port: int) -> None:
    text = format_broker_info(broker, default_port)
    assert parse_broker_info(text, default_port) == broker
    assert (text.endswith(": ")) is (broker.port == default_port)


@given(names, st.lists(st.builds(TopicBroker, ints, st.integers(1, 50), st.integers(1, 5)), min_size=1))
def test_topic_info_roundtrip(topic: str, entries: list[TopicBroker]) -> None:
    for size in (None, 1048576):
        info = TopicInfo(topic, tuple(entries), size)
        assert parse_topic_info(format_topic_info(info)) == info


@given(partitions, st.from_regex(r"[a-zA-Z0-9_.-]{1,40}", fullmatch=True), names, st.integers(-1, 999))
def test_partition_subscribe_failure_roundtrip(part: Partition, consumer: str, group: str, code: int) -> None:
    assert parse_partition(format_partition(part)) == part
    sub = SubscribeInfo(consumer, group, part)
    assert parse_subscribe_info(format_subscribe_info(sub)) == sub
    failure = FailureInfo(code, part)
    assert parse_failure_info(format_failure_info(failure)) == failure
    assert parse_partition_key(part.partition_key) == (part.broker.broker_id, part.topic, part.partition_id)


@given(st.dictionaries(st.builds(partition_key, ints, names, ints), st.integers(-1, 2**62)))
def test_required_partitions_roundtrip(offsets: dict[str, int]) -> None:
    assert parse_required_partitions(format_required_partitions(offsets)) == offsets


@given(names, st.lists(names, min_size=1))
def test_topic_condition_roundtrip(topic: str, items: list[str]) -> None:
    text = format_topic_condition(topic, items)
    assert parse_topic_condition(text) == (topic, tuple(sorted(set(items))))
    assert format_topic_condition(*parse_topic_condition(text)) == text
