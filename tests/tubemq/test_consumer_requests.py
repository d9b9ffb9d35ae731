"""Partition register/unregister builders (method 15) against the real Java capture."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.tubemq.consumer.partition_registration import (
    READ_PRIORITY,
    build_partition_register_request,
    build_partition_unregister_request,
)
from gateway.tubemq.wire.meta import BrokerInfo, Partition
from gateway.tubemq.wire.rpc import OP_REGISTER, OP_UNREGISTER, encode_request
from tests.support.files import CAPTURE_FILE

CAPTURE = json.loads(CAPTURE_FILE.read_text())
BROKER = BrokerInfo(1, "127.0.0.1", 8123)


def captured(op_type: int) -> list[dict[str, Any]]:
    calls = [
        c
        for conn in CAPTURE["connections"]
        for c in conn["calls"]
        if c["method"] == 15 and c["request"]["opType"] == op_type
    ]
    assert calls, f"the capture has no method-15 call with opType {op_type}"
    return calls


def frame_of(call: dict[str, Any], request: Any) -> str:
    envelope = call["request_envelope"]
    return encode_request(
        call["serial"], 15, request, envelope["timeout"], envelope["request_header"]["serviceType"]
    ).hex()


def partition_of(fields: dict[str, Any]) -> Partition:
    return Partition(BROKER, fields["topicName"], fields["partitionId"])


def test_register_matches_the_java_bytes() -> None:
    for call in captured(OP_REGISTER):
        fields = call["request"]
        request = build_partition_register_request(
            fields["clientId"],
            fields["groupName"],
            partition_of(fields),
            read_status=fields["readStatus"],
            visit_token=int(fields["authInfo"]["visitAuthorizedToken"]),
            # the Java client sends the master's setting for the group, undefined (-2) in the capture
            read_priority=fields["qryPriorityId"],
        )
        assert frame_of(call, request) == call["request_frame_hex"]


def test_register_asks_for_memory_reads_filtered_or_not() -> None:
    request = build_partition_register_request(
        "c", "g", Partition(BROKER, "t", 0), read_status=0, visit_token=1
    )
    assert request.qryPriorityId == READ_PRIORITY == 303


def test_unregister_matches_the_java_bytes() -> None:
    for call in captured(OP_UNREGISTER):
        fields = call["request"]
        assert fields["readStatus"] == 1
        request = build_partition_unregister_request(
            fields["clientId"],
            fields["groupName"],
            partition_of(fields),
            consumed=False,
            visit_token=int(fields["authInfo"]["visitAuthorizedToken"]),
        )
        assert frame_of(call, request) == call["request_frame_hex"]


@pytest.mark.parametrize(("consumed", "status"), [(True, 0), (False, 1)])
def test_unregister_commits_or_rolls_back(consumed: bool, status: int) -> None:
    request = build_partition_unregister_request(
        "c", "g", Partition(BROKER, "t", 3), consumed=consumed, visit_token=7
    )
    assert (request.opType, request.readStatus, request.partitionId) == (OP_UNREGISTER, status, 3)


def test_register_forces_the_offset_and_sorts_filters_only_when_given() -> None:
    partition = Partition(BROKER, "t", 0)
    plain = build_partition_register_request("c", "g", partition, read_status=0, visit_token=7)
    assert not plain.HasField("currOffset") and list(plain.filterCondStr) == []
    forced = build_partition_register_request(
        "c", "g", partition, read_status=0, visit_token=7, offset=56, filters={"b", "a"}
    )
    assert forced.currOffset == 56 and list(forced.filterCondStr) == ["a", "b"]
