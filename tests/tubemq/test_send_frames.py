"""Golden bytes of SendMessage requests: every message, keyed or not, single or in a batch, is prepared once
(``payload.prepare_message``) and encoded by the one encoder (``SendRequestTemplate``); the request bytes
and whole RPC frames are those the encoders before it wrote (``tests/fixtures/send_frames.json`` was
captured from ``build_send_request`` for single and keyed sends and the template for batches, while both
existed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire.payload import ipv4_to_sent_addr, prepare_message
from gateway.tubemq.wire.rpc import encode_request, encode_requests
from tests.support.files import FIXTURES

CLIENT_ID = "192.168.1.10-4242-1700000000000-1-Python-0.1"
TOPIC = "demo"
SENT_ADDR = ipv4_to_sent_addr("192.168.1.10")
SERIAL = 7
TIMEOUT_MS = 10_000
_TOKEN = {"visit_token": 1_700_000_000_123, "auth_token": "tok-1"}
_NO_TOKEN = {"visit_token": -2, "auth_token": None}


def _case(name: str, path: str, partition_id: int, tokens: dict[str, Any], **message: Any) -> dict[str, Any]:
    return {"name": name, "path": path, "partition_id": partition_id, **tokens, "message": message}


CASES: list[dict[str, Any]] = [
    _case("single plain", "single", 0, _NO_TOKEN, body="hello"),
    _case("single attributes", "single", 1, _NO_TOKEN, body="v", attributes={"region": "eu", "a": "1"}),
    _case("single streamId", "single", 2, _TOKEN, body="v", stream_id="s1"),
    _case("single msgTime", "single", 0, _NO_TOKEN, body="v", msg_time="202401311530"),
    _case("keyed", "single", 3, _NO_TOKEN, body="order", key="customer-42"),
    _case("keyed escapes", "single", 1, _TOKEN, body="x", key="a,b=c%d$x"),
    _case("keyed non-ASCII", "single", 2, _NO_TOKEN, body="\xe9t\xe9", key="ключ"),
    _case(
        "keyed everything",
        "single",
        0,
        _TOKEN,
        body="full",
        key="k",
        stream_id=" orders ",
        msg_time="202401311530",
        attributes={"city": "Zürich", "n": "1"},
    ),
    _case("partition streamId", "single", 2, _NO_TOKEN, body="p", partition=2, stream_id="s2"),
    _case("single large", "single", 1, _NO_TOKEN, body="x" * 20_000, attributes={"big": "1"}),
    _case("batch plain", "batch", 0, _TOKEN, body="m0"),
    _case("batch attributes", "batch", 1, _TOKEN, body="m1", attributes={"bench": "1"}),
    _case("batch streamId and time", "batch", 2, _TOKEN, body="m2", stream_id="s", msg_time="202412312359"),
    _case("batch streamId", "batch", 3, _NO_TOKEN, body="m3", stream_id="\u00e9v\u00e9nements"),
    _case("batch large", "batch", 0, _NO_TOKEN, body="y" * 20_000),
]

GOLDEN = {f["name"]: f for f in json.loads((FIXTURES / "send_frames.json").read_text())["frames"]}


def test_the_golden_file_covers_every_case() -> None:
    assert sorted(GOLDEN) == sorted(c["name"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_prepared_messages_encode_to_the_golden_bytes(case: dict[str, Any]) -> None:
    m = case["message"]
    prepared = prepare_message(
        m["body"].encode("latin-1"),
        m.get("attributes"),
        m.get("stream_id"),
        m.get("msg_time"),
        m.get("key"),
        m.get("partition"),
    )
    template = SendRequestTemplate(
        CLIENT_ID, TOPIC, sent_addr=SENT_ADDR, visit_token=case["visit_token"], auth_token=case["auth_token"]
    )
    inner = template.encode(
        case["partition_id"], prepared.data, prepared.flag, prepared.msg_type, prepared.msg_time
    )
    golden = GOLDEN[case["name"]]
    assert inner.hex() == golden["request_hex"]
    # framed alone (a batch of one) or among others, the frame is the same
    assert encode_request(SERIAL, 13, inner, TIMEOUT_MS).hex() == golden["frame_hex"]
    (frame,) = encode_requests([SERIAL], 13, [inner], TIMEOUT_MS)
    assert frame.hex() == golden["frame_hex"]
