"""Compressed gRPC request messages are inflated by the gateway within a bound (gateway/grpc/inflate.py),
read as the protobuf library reads the same message uncompressed."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st

from gateway.grpc.inflate import compressed_head, inflate
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.publish_wire import decode_publish, leading_topic

LIMIT = 4096

messages = st.builds(
    pb.Message,
    value=st.binary(min_size=1, max_size=600),
    key=st.text(max_size=20),
    attributes=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
requests = st.builds(pb.PublishRequest, topic=st.text(max_size=30), messages=st.lists(messages, max_size=5))


@given(requests)
def test_a_request_compressed_either_way_reads_as_the_request_itself(request: pb.PublishRequest) -> None:
    raw = request.SerializeToString()
    assert inflate(raw, LIMIT) is raw  # uncompressed: handed on as it is
    for compressed in (gzip.compress(raw), zlib.compress(raw)):
        inflated = inflate(compressed, max(len(raw), 1))
        assert inflated == raw
        assert decode_publish(inflated) == decode_publish(raw)


@given(st.binary(min_size=1, max_size=3 * LIMIT))
def test_nothing_is_inflated_past_the_bound(data: bytes) -> None:
    for compressed in (gzip.compress(data), zlib.compress(data)):
        inflated = inflate(compressed, LIMIT)
        assert (inflated is None) == (len(data) > LIMIT)
        assert inflated is None or inflated == data


def test_a_gzip_stream_declaring_more_than_the_bound_is_not_inflated() -> None:
    bomb = gzip.compress(bytes(64 * 1024 * 1024))
    assert len(bomb) < 100 * 1024 and inflate(bomb, 21 * 1024 * 1024) is None
    # a trailer that lies (declares 1 byte) is stopped at the bound all the same
    liar = bomb[:-4] + (1).to_bytes(4, "little")
    assert inflate(liar, 21 * 1024 * 1024) is None


@given(st.binary(max_size=200))
def test_bytes_that_only_look_compressed_are_handed_on(tail: bytes) -> None:
    for head in (b"\x1f\x8b", b"\x78\x9c", b"\x78\x01"):
        raw = head + tail
        inflated = inflate(raw, LIMIT)
        assert inflated is raw or inflated is None or inflated == zlib.decompress(raw, 47)


def test_a_cut_or_padded_stream_is_not_inflated() -> None:
    """Handed on whole (the protobuf reader refuses it: INVALID_ARGUMENT), or refused as too large when
    what stands in its trailer declares more than the bound."""
    for compressed in (gzip.compress(b"x" * 1000), zlib.compress(b"x" * 1000)):
        for odd in (compressed[:-9], compressed[:-2], compressed + b"junk"):
            assert inflate(odd, LIMIT) in (odd, None)


@given(requests, st.integers(min_value=0, max_value=80))
def test_a_compressed_requests_topic_is_read_from_its_first_inflated_bytes(
    request: pb.PublishRequest, size: int
) -> None:
    raw = request.SerializeToString()
    assert compressed_head(raw, size) is None  # not compressed: nothing to look at before it
    head = compressed_head(gzip.compress(raw), size)
    assert head == raw[:size]
    topic = leading_topic(head)
    whole = len(request.topic.encode()) + 2 <= size  # its tag, a one-byte length (topics of < 128 bytes)
    assert topic == (request.topic if request.topic and whole else None) or (topic is None and not whole)
