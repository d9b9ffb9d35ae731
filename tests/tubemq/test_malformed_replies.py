"""Malformed answers surface as ProtocolError, never as TypeError/UnicodeDecodeError from deeper code.

Protobuf's Python parser accepts bytes that are not UTF-8 in proto2 ``string`` fields and hands them out as
``bytes``; the parse checks every string field so that such an answer fails as one ProtocolError.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.rebalance import RebalanceTask
from gateway.tubemq.errors import ProtocolError
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.routes import RouteTable
from gateway.tubemq.wire import rpc, rpc_server, strict
from gateway.tubemq.wire.frame import Frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from tests.support.consumer_support import fast

INVALID_UTF8 = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80"]
MARK = "M{:03d}"  # 4 bytes, replaced by an invalid sequence of the same length


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _required(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_required", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REQUIRED


def filled(message_type: type[Message], counter: list[int], depth: int = 0) -> Message:
    """A message with its required fields set, every string field holding a distinct marker and every
    nested message filled the same way (two levels deep)."""
    message = message_type()
    for field in message_type.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            marks = []
            for _ in range(2 if _repeated(field) else 1):
                counter[0] += 1
                marks.append(MARK.format(counter[0]))
            if _repeated(field):
                getattr(message, field.name).extend(marks)
            else:
                setattr(message, field.name, marks[0])
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth < 2:
            holder = getattr(message, field.name)
            item = holder.add() if _repeated(field) else holder
            item.CopyFrom(filled(type(item), counter, depth + 1))
        elif _required(field):
            if field.type == FieldDescriptor.TYPE_BOOL:
                setattr(message, field.name, True)
            elif field.type not in (FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_ENUM):
                setattr(message, field.name, 1)
            elif field.type == FieldDescriptor.TYPE_BYTES:
                setattr(message, field.name, b"x")
    return message


def marked(method: int) -> tuple[bytes, int]:
    """The serialized filled response of ``method`` and how many markers it holds."""
    counter = [0]
    message = filled(rpc.METHODS[method].response_type, counter)
    assert message.IsInitialized(), message
    return message.SerializeToString(), counter[0]


RESPONSES = {method: marked(method) for method in rpc.METHODS}
WITH_TEXT = sorted(m for m, (_, marks) in RESPONSES.items() if marks)


@given(st.sampled_from(WITH_TEXT), st.integers(min_value=0), st.sampled_from(INVALID_UTF8))
def test_non_utf8_in_any_string_field_is_a_protocol_error(method: int, pick: int, bad: bytes) -> None:
    data, marks = RESPONSES[method]
    assert rpc.parse_response(method, data) is not None  # the unspoilt answer parses
    mark = MARK.format(pick % marks + 1).encode()
    spoilt = data.replace(mark, bad.ljust(len(mark), b"a"), 1)
    assert spoilt != data
    with pytest.raises(ProtocolError, match="not UTF-8"):
        rpc.parse_response(method, spoilt)


@given(
    st.sampled_from(sorted(RESPONSES)),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
)
def test_mutated_answers_parse_or_fail_as_protocol_errors_and_their_readers_cope(
    method: int, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(RESPONSES[method][0])
    for position, value in flips:
        if data:
            data[position % len(data)] = value
    try:
        answer = rpc.parse_response(method, bytes(data))
    except ProtocolError:
        return
    # What parsed is text all the way down, so the readers of master answers take it without TypeError.
    if isinstance(answer, master_pb.RegisterResponseM2P):
        RouteTable().apply_register(answer)
    elif isinstance(answer, master_pb.HeartResponseM2P):
        RouteTable().apply_heartbeat(answer)
    elif isinstance(answer, master_pb.HeartResponseM2C) and answer.HasField("event"):
        RebalanceTask.from_proto(answer.event)


@given(st.binary(max_size=64), st.sampled_from(INVALID_UTF8))
def test_an_exception_answer_with_non_utf8_text_is_a_protocol_error(tail: bytes, bad: bytes) -> None:
    frame = rpc_server.encode_exception(7, rpc.STATUS_ERROR, "java.lang.Exception", "MARK" + tail.hex())
    decoded = FrameDecoder().feed(frame)
    assert len(decoded) == 1
    payload = decoded[0].payload.replace(b"MARK", bad.ljust(4, b"a"), 1)
    with pytest.raises(ProtocolError):
        rpc.decode_response(Frame(7, payload))


# --- end to end: a master that answers with non-UTF-8 text, over a real socket ------------------------


@pytest.fixture
async def bad_master() -> AsyncIterator[NodeAddress]:
    """Answers every call with its response type, string fields filled with bytes that are not UTF-8."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    request = rpc_server.decode_request(frame)
                    body, _ = RESPONSES[request.method]
                    answer = rpc_server.encode_response(
                        frame.serial, request.method, rpc.parse_response(request.method, body)
                    )
                    assert body in answer
                    # Same length, so every length prefix stays right.
                    spoilt = body.replace(MARK.format(1).encode(), b"\xff\xfeab", 1)
                    writer.write(answer.replace(body, spoilt, 1))
                    await writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield NodeAddress("127.0.0.1", server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def test_producer_start_against_a_master_answering_garbage_text_raises_protocol_error(
    bad_master: NodeAddress,
) -> None:
    async with ConnectionPool() as pool:
        producer = Producer([bad_master], pool=pool, config=ProducerConfig(rpc_timeout=2.0))
        with pytest.raises(ProtocolError, match="not UTF-8"):
            await producer.start()
        await producer.close()


async def test_consumer_start_against_a_master_answering_garbage_text_raises_protocol_error(
    bad_master: NodeAddress,
) -> None:
    async with ConnectionPool() as pool:
        consumer = Consumer([bad_master], "g", {"demo": None}, pool=pool, config=fast(register_attempts=1))
        with pytest.raises(ProtocolError, match="not UTF-8"):
            await consumer.start()
        await consumer.close()


def _strings_below(descriptor: object, depth: int = 0) -> bool:
    fields = descriptor.fields  # type: ignore[attr-defined]
    if depth > 8:
        return False
    return any(
        f.type == FieldDescriptor.TYPE_STRING
        or (f.type == FieldDescriptor.TYPE_MESSAGE and _strings_below(f.message_type, depth + 1))
        for f in fields
    )


def test_the_text_check_skips_exactly_the_message_fields_that_cannot_hold_text() -> None:
    # A GetMessage answer's repeated TransferedMessage holds no string: its thousand items are not visited.
    checked: dict[str, bool] = {}
    for spec in rpc.METHODS.values():
        for message_type in (spec.request_type, spec.response_type):
            _, nested = strict._text_plan(message_type)
            kept = {name for name, _ in nested}
            for f in message_type.DESCRIPTOR.fields:
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    checked[f"{message_type.__name__}.{f.name}"] = f.name in kept
                    assert (f.name in kept) == _strings_below(f.message_type), f.full_name
    assert checked["GetMessageResponseB2C.messages"] is False
    assert any(checked.values())
