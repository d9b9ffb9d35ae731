"""Replay the broker calls of the real capture against a fresh embedded broker and compare the answers;
also drive the broker over real loopback sockets with the client ``Connection``.

The capture (tests/fixtures/tubemq-real-capture.json) holds a real Java producer, a pull consumer from the
latest offset and a second producer talking to a real TubeMQ broker. Our broker starts from an empty store, so
offsets are compared relative to the capture's first append offset; message ids and append times are
time-based and only checked for shape.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.server import CallContext
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.wire.pb import BrokerService_pb2 as pb
from gateway.tubemq.wire.rpc import METHODS, Method
from tests.support.files import CAPTURE_FILE

CAPTURE = json.loads(CAPTURE_FILE.read_text(encoding="utf-8"))
OFFSET_FIELDS = {"appendOffset", "currOffset", "maxOffset"}
TIME_BASED = {"messageId", "appendTime"}


def broker_calls() -> list[dict[str, Any]]:
    """The broker calls in the order they happened: producer 1, the consumer up to its first fetch,
    producer 2 (whose messages that consumer then reads), the rest of the consumer."""
    first_producer, consumer, second_producer = (
        c["calls"] for c in CAPTURE["connections"] if c["server"] == "broker"
    )
    first_fetch = next(i for i, call in enumerate(consumer) if call["method"] == 17)
    assert consumer[first_fetch]["response"]["errCode"] == 404
    return first_producer + consumer[: first_fetch + 1] + second_producer + consumer[first_fetch + 1 :]


CALLS = broker_calls()
BASE_OFFSET = int(CALLS[0]["response"]["appendOffset"])


def request_of(call: dict[str, Any]) -> Message:
    message = METHODS[call["method"]].request_type()
    return json_format.ParseDict(call["request"], message)


def assert_same_answer(captured: dict[str, Any], ours: Message) -> None:
    got = json_format.MessageToDict(ours, preserving_proto_field_name=True)
    assert set(got) == set(captured), "different fields present"
    for name, value in captured.items():
        if name in TIME_BASED:
            assert int(got[name]) > 0
        elif name == "errMsg" and "messageId" in captured:
            assert got[name] == got["messageId"]  # legacy: the id in decimal
        elif name in OFFSET_FIELDS and int(value) >= 0:
            assert int(got[name]) == int(value) - BASE_OFFSET, name
        elif name == "messages":
            assert len(got[name]) == len(value)
            for mine, theirs in zip(got[name], value, strict=True):
                assert set(mine) == set(theirs)
                assert {k: mine[k] for k in mine if k != "messageId"} == {
                    k: theirs[k] for k in theirs if k != "messageId"
                }
        else:
            assert got[name] == value, name


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    async with EmbeddedBroker(1, [TopicSpec("demo", 3)]) as b:
        yield b


def context(serial: int) -> CallContext:
    return CallContext(
        peer=NodeAddress("127.0.0.1", 40000),
        serial=serial,
        service=2,
        protocol_version=3,
        timeout=10.0,
        received_at=0.0,
        tls=False,
    )


async def test_capture_replay_gives_the_captured_answers(broker: EmbeddedBroker) -> None:
    assert BASE_OFFSET == 84476
    assert len(CALLS) == 22
    for call in CALLS:
        answer = await broker.handle(call["method"], request_of(call), context(call["serial"]))
        assert type(answer) is METHODS[call["method"]].response_type
        assert_same_answer(call["response"], answer)
    assert broker.consumers.registrations == {}


async def test_capture_replay_over_loopback_sockets(broker: EmbeddedBroker) -> None:
    # One link per captured connection, used in the captured order, with each call's captured service.
    links: dict[str, Connection] = {}
    try:
        for call in CALLS:
            client = call["request"]["clientId"]
            if client not in links:
                links[client] = Connection(broker.address)
                await links[client].connect(timeout=5.0)
            service = call["request_envelope"]["request_header"]["serviceType"]
            answer = await links[client].request(call["method"], request_of(call), 5.0, service)
            assert_same_answer(call["response"], answer)
    finally:
        for link in links.values():
            await link.close()
    assert len(links) == 3


async def test_acknowledged_messages_survive_a_restart_over_the_wire(tmp_path: Path) -> None:
    topics = [TopicSpec("demo", 3)]
    send = pb.SendMessageRequestP2B(clientId="p", topicName="demo", flag=0, checkSum=-1, sentAddr=0)
    async with EmbeddedBroker(1, topics, data_dir=tmp_path) as first:
        link = Connection(first.address)
        await link.connect(timeout=5.0)
        acked: dict[int, bytes] = {}
        for i in range(9):
            send.partitionId, send.data = i % 3, b"msg-%d" % i
            answer = await link.request(Method.SEND_MESSAGE, send, 5.0)
            assert isinstance(answer, pb.SendMessageResponseB2P) and answer.success
            acked[answer.messageId] = bytes(send.data)
        await link.close()
    async with EmbeddedBroker(1, topics, data_dir=tmp_path) as second:
        link = Connection(second.address)
        await link.connect(timeout=5.0)
        try:
            received: dict[int, bytes] = {}
            for pid in range(3):
                register = pb.RegisterRequestC2B(
                    opType=31, clientId="c", groupName="g", topicName="demo", partitionId=pid, readStatus=0
                )
                registered = await link.request(Method.CONSUMER_BROKER_REGISTER, register, 5.0)
                assert isinstance(registered, pb.RegisterResponseB2C) and registered.currOffset == 0
                fetch = pb.GetMessageRequestC2B(
                    clientId="c", partitionId=pid, groupName="g", topicName="demo"
                )
                batch = await link.request(Method.GET_MESSAGES, fetch, 5.0)
                assert isinstance(batch, pb.GetMessageResponseB2C) and batch.success
                received.update({m.messageId: m.payLoadData for m in batch.messages})
            assert received == acked
        finally:
            await link.close()


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_broker_over_tls(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with EmbeddedBroker(1, [TopicSpec("demo")], ssl=server_ctx) as broker:
        link = Connection(broker.address, ssl=ssl.create_default_context(cafile=str(cert)))
        await link.connect(timeout=5.0)
        try:
            send = pb.SendMessageRequestP2B(
                clientId="p", topicName="demo", partitionId=0, data=b"secret", flag=0, checkSum=-1, sentAddr=0
            )
            answer = await link.request(Method.SEND_MESSAGE, send, 5.0)
            assert isinstance(answer, pb.SendMessageResponseB2P) and answer.appendOffset == 0
        finally:
            await link.close()
