"""Decoding fetched messages (§4.6) and what a batch says about offsets (§10.3)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.batch import (
    INDEX_ENTRY_SIZE,
    ConsumedBatch,
    decode_messages,
    is_dense_to_end,
    lag_entries,
)
from gateway.tubemq.consumer.config import BoundConsumption, ConsumerConfig, StartPosition
from gateway.tubemq.wire.payload import crc32_checksum, encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from tests.support.files import CAPTURE_FILE

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.tubemq.consumer._batch")

CAPTURE = CAPTURE_FILE


def captured_fetches() -> list[broker_pb.GetMessageResponseB2C]:
    data = json.loads(CAPTURE.read_text())
    answers = []
    for connection in data["connections"]:
        for call in connection["calls"]:
            if call["method"] == 17 and call["response"].get("messages"):
                answer = broker_pb.GetMessageResponseB2C()
                for m in call["response"]["messages"]:
                    answer.messages.add(
                        messageId=int(m["messageId"]),
                        checkSum=m["checkSum"],
                        payLoadData=base64.b64decode(m["payLoadData"]),
                        flag=m["flag"],
                    )
                answers.append(answer)
    return answers


def wire(body: bytes, msg_type: str | None = None, **attrs: str) -> broker_pb.TransferedMessage:
    data, flag = encode_payload(body, attrs or None, msg_type, "202401311530" if msg_type else None)
    return broker_pb.TransferedMessage(
        messageId=7, checkSum=crc32_checksum(data), payLoadData=data, flag=flag
    )


ATTRIBUTE_SETS: list[tuple[str | None, dict[str, str]]] = [
    (None, {}),
    ("a", {}),
    ("a", {"k": "v"}),
    ("b", {"k": "v", "x": "y"}),
]


@given(st.lists(st.tuples(st.integers(0, len(ATTRIBUTE_SETS) - 1), st.binary(max_size=20)), max_size=12))
def test_each_message_gets_its_own_attributes_and_body_in_any_mix(
    items: list[tuple[int, bytes]],
) -> None:
    answer = broker_pb.GetMessageResponseB2C()
    for i, (choice, body) in enumerate(items):
        msg_type, attrs = ATTRIBUTE_SETS[choice]
        data, flag = encode_payload(body, attrs or None, msg_type, "202401311530" if msg_type else None)
        answer.messages.add(messageId=i, checkSum=crc32_checksum(data), payLoadData=data, flag=flag)
    messages, stats = decode_messages(answer.messages, None, 0, exact=True)
    assert stats.kept == len(items) and stats.bytes == sum(len(b) for _, b in items)
    for i, (message, (choice, body)) in enumerate(zip(messages, items, strict=True)):
        msg_type, attrs = ATTRIBUTE_SETS[choice]
        assert (message.message_id, message.body, message.attributes) == (i, body, attrs)
        assert message.stream_id == msg_type and message.offset == INDEX_ENTRY_SIZE * i
        assert message.msg_time == ("202401311530" if msg_type else None)
    # Messages with the same attribute text share one attributes dict (renderers cache by it).
    by_choice = {}
    for message, (choice, _) in zip(messages, items, strict=True):
        if ATTRIBUTE_SETS[choice][1]:
            assert by_choice.setdefault(choice, message.attributes) is message.attributes


def test_decodes_the_real_java_batches() -> None:
    answers = captured_fetches()
    assert len(answers) == 3
    bodies = set()
    for answer in answers:
        messages, stats = decode_messages(answer.messages, None, 84560, exact=False)
        assert stats.kept == 1 and stats.bad_checksum == 0
        (message,) = messages
        assert message.stream_id == "s-cap2"
        assert message.msg_time == "202611221200"
        assert message.offset is None and message.index == 0
        bodies.add(message.body)
        assert set(message.attributes) == {"idx"}
    assert bodies == {b"cap2-0", b"cap2-1", b"cap2-2"}


def test_the_real_batches_are_not_provably_dense() -> None:
    # Captured: 1 message read from 84560 while the store's end was 84644 (three siblings' entries).
    assert not is_dense_to_end(84560, 84644, 1)
    assert is_dense_to_end(84560, 84560 + 3 * INDEX_ENTRY_SIZE, 3)
    assert not is_dense_to_end(-1, 28, 1)
    assert not is_dense_to_end(0, 0, 0)


def test_lag_in_index_entries() -> None:
    assert lag_entries(0, 10 * INDEX_ENTRY_SIZE, 4) == 6
    assert lag_entries(280, 280, 0) == 0
    assert lag_entries(-1, 280, 1) == -1
    assert lag_entries(0, -1, 1) == -1
    assert lag_entries(56, 28, 0) == -1


def test_drops_bad_checksums_and_truncated_prefixes() -> None:
    good = wire(b"ok", "a")
    bad_crc = wire(b"x", "a")
    bad_crc.checkSum ^= 1
    short = broker_pb.TransferedMessage(
        messageId=9, checkSum=crc32_checksum(b"\x00\x00"), payLoadData=b"\x00\x00", flag=1
    )
    messages, stats = decode_messages([bad_crc, short, good], None, 0, exact=True)
    assert [m.body for m in messages] == [b"ok"]
    assert (stats.bad_checksum, stats.bad_payload, stats.kept) == (1, 1, 1)
    assert messages[0].index == 2 and messages[0].offset == 2 * INDEX_ENTRY_SIZE


def test_client_side_filter_drops_missing_and_unlisted_types() -> None:
    batch = [wire(b"1", "a"), wire(b"2", "b"), wire(b"3"), wire(b"4", "a", k="v")]
    messages, stats = decode_messages(batch, frozenset({"a"}), 56, exact=False)
    assert [m.body for m in messages] == [b"1", b"4"]
    assert messages[1].attributes == {"k": "v"}
    assert stats.filtered == 2 and stats.bytes == 2
    unfiltered, _ = decode_messages(batch, None, 56, exact=False)
    assert len(unfiltered) == 4 and unfiltered[2].stream_id is None and unfiltered[2].flag == 0


@given(st.integers(0, 10_000), st.lists(st.binary(max_size=20), min_size=1, max_size=20), st.booleans())
def test_offsets_given_end(start_entry: int, bodies: list[bytes], dense: bool) -> None:
    start = start_entry * INDEX_ENTRY_SIZE
    messages, _ = decode_messages([wire(b) for b in bodies], None, start, exact=False)
    batch = ConsumedBatch(
        topic="t",
        partition_key="1:t:0",
        partition_id=0,
        broker_id=1,
        broker=NodeAddress("h", 1),
        messages=messages,
        curr_offset=start,
        max_offset=-1,
        lag_bytes=-1,
        fetched_count=len(bodies),
        confirm_context="1:t:0:1",
    )
    end = start + INDEX_ENTRY_SIZE * len(bodies) + (0 if dense else INDEX_ENTRY_SIZE)
    offsets = batch.offsets_given_end(end)
    if dense:
        assert offsets == [start + INDEX_ENTRY_SIZE * i for i in range(len(bodies))]
    else:
        assert offsets is None


def test_start_position_read_status() -> None:
    assert StartPosition.LATEST.read_status(True) == 1
    assert StartPosition.LATEST_ALWAYS.read_status(True) == 2
    assert StartPosition.EARLIEST.read_status(True) == 0
    assert {p.read_status(False) for p in StartPosition} == {0}


def test_bound_consumption_checks() -> None:
    bound = BoundConsumption("s1", 2, offsets={"1:demo:0": 280, "1:demo:1": 0})
    assert bound.required_partition() == "1:demo:0=280,1:demo:1=0"
    with pytest.raises(ValueError):
        BoundConsumption(" ", 1)
    with pytest.raises(ValueError):
        BoundConsumption("s", 0)
    with pytest.raises(ValueError):
        BoundConsumption("s", 1, offsets={"demo:0": 1})
    with pytest.raises(ValueError):
        BoundConsumption("s", 1, offsets={"1:demo:0": -1})
    with pytest.raises(ValueError):
        ConsumerConfig(heartbeat_interval=0)
    with pytest.raises(ValueError):
        ConsumerConfig(report_every=0)
