"""Producer request builders against the real Java capture, and the route table fed by master answers."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.producer.master_requests import (
    build_close_request,
    build_heartbeat_request,
    build_register_request,
)
from gateway.tubemq.producer.partitioner import PartitionRef
from gateway.tubemq.producer.routes import DEFAULT_MAX_MSG_SIZE, MAX_MAX_MSG_SIZE, RouteTable
from gateway.tubemq.producer.send_request import NO_CHECKSUM, SendRequestTemplate
from gateway.tubemq.wire.payload import decode_payload, ipv4_to_sent_addr, prepare_message
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import encode_request, encode_requests
from tests.support.files import CAPTURE_FILE

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.tubemq.producer._send_request")

CAPTURE = json.loads(CAPTURE_FILE.read_text())


def captured(method: int) -> list[dict[str, Any]]:
    calls = [c for conn in CAPTURE["connections"] for c in conn["calls"] if c["method"] == method]
    assert calls, f"the capture has no call of method {method}"
    return calls


def frame_of(call: dict[str, Any], request: Any) -> str:
    envelope = call["request_envelope"]
    return encode_request(
        call["serial"],
        call["method"],
        request,
        envelope["timeout"],
        envelope["request_header"]["serviceType"],
    ).hex()


def test_register_request_matches_the_java_bytes() -> None:
    for call in captured(1):
        fields = call["request"]
        request = build_register_request(
            fields["clientId"],
            fields["hostName"],
            broker_checksum=int(fields["brokerCheckSum"]),
            config_id=int(fields["appdConfig"]["configId"]),
            topics=fields.get("topicList", []),
            jdk_version=fields["jdkVersion"],
        )
        assert frame_of(call, request) == call["request_frame_hex"]


def test_heartbeat_request_matches_the_java_bytes() -> None:
    for call in captured(2):
        fields = call["request"]
        request = build_heartbeat_request(
            fields["clientId"],
            fields["hostName"],
            broker_checksum=int(fields["brokerCheckSum"]),
            config_id=int(fields["appdConfig"]["configId"]),
            topics=fields["topicList"],
        )
        assert frame_of(call, request) == call["request_frame_hex"]


def test_close_request_matches_the_java_bytes() -> None:
    for call in captured(3):
        assert frame_of(call, build_close_request(call["request"]["clientId"])) == call["request_frame_hex"]


def test_send_request_matches_the_java_bytes() -> None:
    for call in captured(13):
        fields = call["request"]
        envelope = call["request_envelope"]
        captured_data = base64.b64decode(fields["data"])
        decoded = decode_payload(captured_data, fields["flag"])
        # the producer's own preparation of body + attributes + msgType/msgTime gives the same payload
        message = prepare_message(decoded.body, decoded.attributes, decoded.msg_type, decoded.msg_time)
        assert (message.data, message.flag) == (captured_data, fields["flag"])
        # Java's size check counts body bytes plus attribute characters
        assert message.size == len(captured_data) - 4
        assert ipv4_to_sent_addr("192.0.2.2") == fields["sentAddr"]
        template = SendRequestTemplate(
            fields["clientId"],
            fields["topicName"],
            sent_addr=ipv4_to_sent_addr("192.0.2.2"),
            visit_token=int(fields["authInfo"]["visitAuthorizedToken"]),
        )
        inner = template.encode(
            fields["partitionId"], message.data, message.flag, message.msg_type, message.msg_time
        )
        (frame,) = encode_requests(
            [call["serial"]], 13, [inner], envelope["timeout"], envelope["request_header"]["serviceType"]
        )
        assert frame.hex() == call["request_frame_hex"]


_texts = st.one_of(st.none(), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(
    client_id=st.text(min_size=1, max_size=60),
    topic=st.text(min_size=1, max_size=60),
    partition_id=st.integers(-(2**31), 2**31 - 1),
    data=st.binary(max_size=3000),
    flag=st.integers(-(2**31), 2**31 - 1),
    sent_addr=st.integers(-(2**31), 2**31 - 1),
    visit_token=st.integers(-(2**63), 2**63 - 1),
    auth_token=_texts,
    msg_type=_texts,
    msg_time=_texts,
)
def test_send_template_writes_protobufs_bytes(
    client_id: str,
    topic: str,
    partition_id: int,
    data: bytes,
    flag: int,
    sent_addr: int,
    visit_token: int,
    auth_token: str | None,
    msg_type: str | None,
    msg_time: str | None,
) -> None:
    for text in (client_id, topic, auth_token, msg_type, msg_time):
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError:
            assume(False)
    # protobuf's own serialization of the request the Java client fills (§4.3)
    expected = broker_pb.SendMessageRequestP2B(
        clientId=client_id,
        topicName=topic,
        partitionId=partition_id,
        data=data,
        flag=flag,
        checkSum=NO_CHECKSUM,
        sentAddr=sent_addr,
    )
    if msg_type:
        expected.msgType = msg_type
    if msg_time:
        expected.msgTime = msg_time
    expected.authInfo.visitAuthorizedToken = visit_token
    if auth_token:
        expected.authInfo.authAuthorizedToken = auth_token
    template = SendRequestTemplate(
        client_id, topic, sent_addr=sent_addr, visit_token=visit_token, auth_token=auth_token
    )
    for _ in range(2):  # the second call takes the cached partition head
        assert template.encode(partition_id, data, flag, msg_type, msg_time) == expected.SerializeToString()


def test_send_request_optional_fields() -> None:
    template = SendRequestTemplate("c", "demo", sent_addr=1, visit_token=-2, auth_token="tok")
    request = broker_pb.SendMessageRequestP2B.FromString(template.encode(10001, b"x", 0, None, ""))
    assert not request.HasField("msgType") and not request.HasField("msgTime")
    assert request.checkSum == -1
    assert request.authInfo.authAuthorizedToken == "tok"
    assert request.IsInitialized()


def answer(call: dict[str, Any], message_type: type[Any]) -> Any:
    return json_format.ParseDict(call["response"], message_type())


def test_route_table_from_the_captured_answers() -> None:
    table = RouteTable()
    register = answer(captured(1)[0], master_pb.RegisterResponseM2P)
    assert table.apply_register(register)
    assert table.broker_checksum == 1795329255931
    assert table.brokers[1].address == NodeAddress("127.0.0.1", 8123)  # "1:127.0.0.1: " = default port
    assert table.visit_token == 1795329255732
    assert table.config_id == -2
    heartbeat = answer(captured(2)[0], master_pb.HeartResponseM2P)
    assert not table.apply_heartbeat(heartbeat)
    route = table.route("demo")
    assert route is not None
    assert route.partitions == (PartitionRef(1, 0), PartitionRef(1, 1), PartitionRef(1, 2))
    assert route.max_msg_size == DEFAULT_MAX_MSG_SIZE  # "demo#1:3:1#": no per-topic size
    assert dict(route.brokers) == {1: NodeAddress("127.0.0.1", 8123)}
    assert "demo" in repr(table)


def heartbeat(
    checksum: int, topics: list[str], brokers: list[str] | None = None, max_size: int | None = None
) -> master_pb.HeartResponseM2P:
    reply = master_pb.HeartResponseM2P(
        success=True, errCode=200, errMsg="OK!", brokerCheckSum=checksum, topicInfos=topics
    )
    if brokers is not None:
        reply.brokerInfos.extend(brokers)
    reply.appdConfig.configId = 7
    if max_size is not None:
        reply.appdConfig.maxMsgSize = max_size
    return reply


def test_route_table_partitions_sizes_and_broker_changes() -> None:
    table = RouteTable(default_port=9000)
    assert table.apply_heartbeat(
        heartbeat(5, ["t#1:2:2,2:1:1,9:1:1#2048", "u#2:1:1#"], ["1:h1: ", "2:h2:8123"])
    )
    t = table.route("t")
    assert t is not None
    assert t.partitions == (
        PartitionRef(1, 0),
        PartitionRef(1, 1),
        PartitionRef(1, 10000),
        PartitionRef(1, 10001),
        PartitionRef(2, 0),
    )  # broker 9 is not in the broker list: skipped
    assert t.max_msg_size == 2048
    assert dict(t.brokers) == {1: NodeAddress("h1", 9000), 2: NodeAddress("h2", 8123)}
    assert table.config_id == 7
    # maxMsgSize from the master is clamped to [1 MiB, 20 MiB] and used for topics without their own
    table.apply_heartbeat(heartbeat(5, ["u#2:1:1#"], max_size=100))
    assert table.cluster_max_msg_size == DEFAULT_MAX_MSG_SIZE
    table.apply_heartbeat(heartbeat(5, ["u#2:1:1#"], max_size=10**9))
    u = table.route("u")
    assert u is not None and u.max_msg_size == MAX_MAX_MSG_SIZE
    assert table.route("t") is None, "a topic missing from the answer has no partitions"
    # a new checksum with a new list replaces the brokers; garbage strings are skipped
    assert table.apply_heartbeat(heartbeat(6, ["u#2:1:1#", "bad topic info"], ["2:h3: ", "junk"]))
    assert table.brokers[2].address == NodeAddress("h3", 9000)
    assert table.skipped == 2
    table.forget_topic("u")
    assert table.route("u") is None
