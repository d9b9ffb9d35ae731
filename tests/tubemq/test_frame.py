"""Frame codec: the §1.7 worked example, round trips under arbitrary stream splits, garbage, capture."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tubemq.errors import ProtocolError
from gateway.tubemq.wire.frame import (
    BLOCK_SIZE,
    DEFAULT_MAX_FRAME_BYTES,
    MAX_LIST_SIZE,
    Frame,
    FrameError,
    decode_delimited,
    decode_varint,
    encode_delimited,
    encode_frame,
    encode_frame_parts,
    encode_varint,
)
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from tests.support.files import CAPTURE_FILE

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.tubemq.wire._frame_decoder")

CAPTURE = CAPTURE_FILE

# §1.7: producer close, serial 1, CloseRequestP2M{clientId="p1"}, timeout 10000.
EXAMPLE_PARTS = [bytes.fromhex("0800"), bytes.fromhex("08011003"), bytes.fromhex("0803 10904e 1a04 0a027031")]
EXAMPLE_PAYLOAD = bytes.fromhex("02 0800 04 08011003 0b 080310904e1a040a027031")
EXAMPLE_FRAME = bytes.fromhex("ff7ff4fe 00000001 00000001 00000014") + EXAMPLE_PAYLOAD


def header(serial: int, list_size: int, token: int = 0xFF7FF4FE) -> bytes:
    return struct.pack(">Iii", token, serial, list_size)


def block(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def feed_in_pieces(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> list[Frame]:
    frames: list[Frame] = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        frames += decoder.feed(stream[start:cut])
        start = cut
    return frames


# --- worked example and encoder layout ---------------------------------------------------------------


def test_worked_example_byte_for_byte() -> None:
    assert encode_delimited(*EXAMPLE_PARTS) == EXAMPLE_PAYLOAD
    assert len(EXAMPLE_PAYLOAD) == 20
    assert encode_frame(1, EXAMPLE_PAYLOAD) == EXAMPLE_FRAME
    assert len(EXAMPLE_FRAME) == 36
    assert FrameDecoder().feed(EXAMPLE_FRAME) == [Frame(1, EXAMPLE_PAYLOAD)]
    assert decode_delimited(EXAMPLE_PAYLOAD, 3, exact=True) == EXAMPLE_PARTS


def test_checksum_minus_one_is_a_ten_byte_varint() -> None:
    assert encode_varint((1 << 64) - 1) == bytes.fromhex("ffffffffffffffffff01")
    assert decode_varint(bytes.fromhex("30ffffffffffffffffff01"), 1) == ((1 << 64) - 1, 11)


@pytest.mark.parametrize(
    ("size", "lengths"),
    [
        (0, [0]),
        (1, [1]),
        (BLOCK_SIZE, [BLOCK_SIZE]),
        (BLOCK_SIZE + 1, [BLOCK_SIZE, 1]),
        (3 * BLOCK_SIZE, [BLOCK_SIZE] * 3),
        (3 * BLOCK_SIZE + 100, [BLOCK_SIZE] * 3 + [100]),
    ],
)
def test_encoder_cuts_8192_byte_blocks(size: int, lengths: list[int]) -> None:
    payload = bytes(i % 251 for i in range(size))
    frame = encode_frame(-7, payload)
    assert frame[:12] == header(-7, len(lengths))
    pos, seen, data = 12, [], b""
    while pos < len(frame):
        (length,) = struct.unpack_from(">i", frame, pos)
        seen.append(length)
        data += frame[pos + 4 : pos + 4 + length]
        pos += 4 + length
    assert seen == lengths
    assert data == payload


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_encoder_accepts_bytes_like(kind: type) -> None:
    payload = bytes(range(256)) * 70
    assert encode_frame(3, kind(payload)) == encode_frame(3, payload)
    assert encode_frame(3, kind(b"ab")) == encode_frame(3, b"ab")
    assert encode_delimited(kind(b"xy"), kind(b"")) == b"\x02xy\x00"


def test_encoder_rejects_bad_serial_and_oversized_payload() -> None:
    with pytest.raises(ValueError, match="signed int32"):
        encode_frame(1 << 31, b"x")
    with pytest.raises(ValueError, match="signed int32"):
        encode_frame(-(1 << 31) - 1, b"x")
    assert FrameDecoder().feed(encode_frame(-(1 << 31), b"x")) == [Frame(-(1 << 31), b"x")]
    with pytest.raises(ValueError, match="3585 blocks"):
        encode_frame(1, bytes(MAX_LIST_SIZE * BLOCK_SIZE + 1))


def test_largest_frame_round_trips_under_default_limit() -> None:
    payload = bytes(MAX_LIST_SIZE * BLOCK_SIZE)
    frame = encode_frame(9, payload)
    assert len(frame) == 12 + DEFAULT_MAX_FRAME_BYTES
    assert FrameDecoder().feed(frame) == [Frame(9, payload)]


# --- decoder: arbitrary splits --------------------------------------------------------------------

serials = st.integers(-(1 << 31), (1 << 31) - 1)
small_payloads = st.binary(max_size=40 * 1024)


@st.composite
def streams(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> tuple[list[Frame], bytes, list[int]]:
    frames = draw(st.lists(st.builds(Frame, serials, payloads), min_size=1, max_size=6))
    stream = b"".join(encode_frame(f.serial, f.payload) for f in frames)
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=30))
    return frames, stream, cuts


@given(streams(small_payloads))
def test_any_split_yields_the_frames(case: tuple[list[Frame], bytes, list[int]]) -> None:
    frames, stream, cuts = case
    decoder = FrameDecoder()
    assert feed_in_pieces(decoder, stream, cuts) == frames
    assert decoder.at_frame_boundary
    assert decoder.buffered_bytes == 0


@settings(max_examples=10)
@given(streams(st.integers(100_000, 400_000).map(lambda n: bytes(i % 253 for i in range(n)))))
def test_large_frames_split_anywhere(case: tuple[list[Frame], bytes, list[int]]) -> None:
    frames, stream, cuts = case
    assert feed_in_pieces(FrameDecoder(), stream, cuts) == frames


@settings(max_examples=20)
@given(st.lists(st.builds(Frame, serials, st.binary(max_size=40)), min_size=1, max_size=3))
def test_every_byte_boundary_and_one_byte_feeds(frames: list[Frame]) -> None:
    stream = b"".join(encode_frame(f.serial, f.payload) for f in frames)
    for cut in range(len(stream) + 1):
        assert feed_in_pieces(FrameDecoder(), stream, [cut]) == frames
    decoder = FrameDecoder()
    got: list[Frame] = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert got == frames


@given(st.lists(st.binary(max_size=20_000), min_size=1, max_size=8), serials, st.data())
def test_blocks_of_any_length_are_accepted(blocks: list[bytes], serial: int, data: st.DataObject) -> None:
    stream = header(serial, len(blocks)) + b"".join(block(b) for b in blocks)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert feed_in_pieces(FrameDecoder(), stream, cuts) == [Frame(serial, b"".join(blocks))]


def test_feed_accepts_bytes_like_and_empty_chunks() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(bytearray(EXAMPLE_FRAME[:5])) == []
    assert decoder.feed(memoryview(EXAMPLE_FRAME)[5:]) == [Frame(1, EXAMPLE_PAYLOAD)]


def test_repr_shows_progress() -> None:
    decoder = FrameDecoder()
    assert "between frames" in repr(decoder)
    decoder.feed(EXAMPLE_FRAME[:20])
    assert "serial=1" in repr(decoder)
    assert decoder.buffered_bytes == 4 and not decoder.at_frame_boundary


# --- decoder: garbage -----------------------------------------------------------------------------


def assert_stays_failed(decoder: FrameDecoder) -> None:
    assert decoder.failed
    with pytest.raises(FrameError, match="already failed"):
        decoder.feed(EXAMPLE_FRAME)
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"GET / HTTP/1.1\r\n", r"wrong begin token 47 45 54 20"),
        (header(5, -1), r"serial=5 has listSize -1"),
        (header(5, MAX_LIST_SIZE + 1), r"listSize 3585: allowed 1\.\.3584"),
        (header(5, 0), r"listSize 0: a frame needs at least one block"),
        (header(5, 2) + block(b"ok") + struct.pack(">i", -3), r"negative block length -3"),
    ],
)
@pytest.mark.parametrize("step", [1, 1000])
def test_garbage_raises_frame_error(stream: bytes, message: str, step: int) -> None:
    decoder = FrameDecoder()
    stream += bytes(16)  # enough bytes for the single-chunk fast path to look at the header too
    with pytest.raises(FrameError, match=message) as info:
        for i in range(0, len(stream), step):  # the error must not depend on the split
            decoder.feed(stream[i : i + step])
    assert isinstance(info.value, ProtocolError)
    assert_stays_failed(decoder)


def test_garbage_after_a_good_frame_still_yields_nothing_more() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="wrong begin token 00 00 00 00"):
        decoder.feed(EXAMPLE_FRAME + bytes(12))
    assert_stays_failed(decoder)


@pytest.mark.parametrize("list_size", [1, MAX_LIST_SIZE])
def test_huge_block_lengths_fail_before_allocating(list_size: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(header(1, list_size))
    with pytest.raises(FrameError, match=r"2147483647-byte block, above max_frame_bytes=29374464"):
        decoder.feed(struct.pack(">i", 0x7FFFFFFF) + bytes(1000))
    assert_stays_failed(decoder)
    with pytest.raises(FrameError, match=r"grows to 8196 bytes with a 8192-byte block"):
        FrameDecoder(max_frame_bytes=8195).feed(encode_frame(1, bytes(8192)))


def test_frame_limit_counts_accumulated_blocks() -> None:
    decoder = FrameDecoder(max_frame_bytes=3 * (4 + 100))
    good = header(2, 3) + block(bytes(100)) * 3
    assert decoder.feed(good) == [Frame(2, bytes(300))]
    decoder.feed(header(3, 4) + block(bytes(100)) * 3)
    assert decoder.buffered_bytes == 300
    with pytest.raises(FrameError, match=r"serial=3 grows to 316 bytes with a 0-byte block"):
        decoder.feed(block(b""))
    assert_stays_failed(decoder)


def test_buffer_never_exceeds_the_current_frame() -> None:
    decoder = FrameDecoder(max_frame_bytes=20_000)
    frame = encode_frame(4, bytes(16_000))
    for start in range(0, len(frame) - 1, 999):
        decoder.feed(frame[start : start + 999])
        assert decoder.buffered_bytes <= 16_000 + 4
    assert decoder.at_frame_boundary


def test_decoder_rejects_a_tiny_limit() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        FrameDecoder(max_frame_bytes=3)


# --- varints and delimited parts ------------------------------------------------------------------


@given(st.integers(0, (1 << 64) - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == max(1, -(-value.bit_length() // 7))
    assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2097151, "ffff7f"),
        (2097152, "80808001"),
    ],
)
def test_varint_known_values(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded


@pytest.mark.parametrize("value", [-1, 1 << 64])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        encode_varint(value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated varint"),
        (b"\x80\x80", "truncated varint"),
        (b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\xff" * 9 + b"\x02", "exceeds 64 bits"),
    ],
)
def test_bad_varints(data: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_varint(data)


@given(st.lists(st.binary(max_size=300), max_size=5), st.binary(max_size=5))
def test_delimited_round_trip(parts: list[bytes], trailing: bytes) -> None:
    payload = encode_delimited(*parts)
    assert decode_delimited(payload, len(parts), exact=True) == parts
    assert decode_delimited(payload + trailing, len(parts)) == parts


@pytest.mark.parametrize(
    ("payload", "count", "message"),
    [
        (b"\x02ab", 2, "ends before part 2 of 2"),
        (b"\x05ab", 1, "announces 5 bytes at offset 1, but only 2 remain"),
        (b"\x80", 1, "truncated varint"),
        (b"\xff" * 11, 1, "longer than 10 bytes"),
    ],
)
def test_bad_delimited_payloads(payload: bytes, count: int, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_delimited(payload, count)


def test_trailing_bytes_refused_only_when_exact() -> None:
    assert decode_delimited(b"\x01a\x00zz", 2) == [b"a", b""]
    with pytest.raises(FrameError, match="2 trailing bytes after 2 delimited parts"):
        decode_delimited(b"\x01a\x00zz", 2, exact=True)


# --- real capture ---------------------------------------------------------------------------------


def capture_frames() -> list[tuple[int, str]]:
    data = json.loads(CAPTURE.read_text())
    return [
        (call["serial"], call[key])
        for connection in data["connections"]
        for call in connection["calls"]
        for key in ("request_frame_hex", "response_frame_hex")
    ]


def test_capture_frames_decode_and_re_encode() -> None:
    cases = capture_frames()
    assert len(cases) == 76
    for serial, frame_hex in cases:
        raw = bytes.fromhex(frame_hex)
        (frame,) = FrameDecoder().feed(raw)
        assert frame.serial == serial
        assert len(decode_delimited(frame.payload, 3, exact=True)) == 3
        assert encode_frame(frame.serial, frame.payload) == raw


def test_capture_connection_streams_decode_in_one_go() -> None:
    data = json.loads(CAPTURE.read_text())
    for connection in data["connections"]:
        calls = connection["calls"]
        for key in ("request_frame_hex", "response_frame_hex"):
            stream = bytes.fromhex("".join(call[key] for call in calls))
            frames = feed_in_pieces(FrameDecoder(), stream, list(range(7, len(stream), 13)))
            assert [f.serial for f in frames] == [call["serial"] for call in calls]


@given(serials, st.lists(st.binary(max_size=5000), max_size=5))
def test_encode_frame_parts_equals_encode_frame_of_the_join(serial: int, parts: list[bytes]) -> None:
    assert encode_frame_parts(serial, list(parts)) == encode_frame(serial, b"".join(parts))


def test_encode_frame_parts_rejects_what_encode_frame_rejects() -> None:
    with pytest.raises(ValueError, match="serial"):
        encode_frame_parts(1 << 31, [b"x"])
