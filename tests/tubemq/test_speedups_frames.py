"""The compiled loops over a read's complete one-block frames (``_frame_decoder.whole_frames``, used by
``FrameDecoder._whole_frames``) and over the complete blocks of a frame in progress (``whole_blocks``, used
by ``FrameDecoder._take_blocks``) against their references (``_whole_frames_py``, ``_take_blocks_py``): any
stream, cut anywhere, gives the same frames and the same errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.tubemq.wire import frame_decoder, rpc, speedups
from gateway.tubemq.wire.frame import Frame, FrameError, encode_frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from tests.support.speedups_support import extension


class PureDecoder(FrameDecoder):
    """The decoder with the reference loop, whichever path the process selected."""

    __slots__ = ()

    def _whole_frames(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        return self._whole_frames_py(view, pos, end, frames)

    def _take_blocks(self, data: memoryview, pos: int, blocks_left: int, room: int) -> tuple[int, int, int]:
        return self._take_blocks_py(data, pos, blocks_left, room)


class CompiledDecoder(FrameDecoder):
    """The decoder with the C loop, even where the process runs the pure path."""

    __slots__ = ()

    def _whole_frames(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        found: int = extension("gateway.tubemq.wire._frame_decoder").whole_frames(
            view[:end], pos, self._max_frame_bytes - 4, frames
        )
        return found

    def _take_blocks(self, data: memoryview, pos: int, blocks_left: int, room: int) -> tuple[int, int, int]:
        taken: tuple[int, int, int] = extension("gateway.tubemq.wire._frame_decoder").whole_blocks(
            data, pos, blocks_left, room, self._payload
        )
        return taken


@pytest.fixture(autouse=True)
def _frame_class() -> None:
    extension("gateway.tubemq.wire._frame_decoder").set_frame_type(Frame)


def _run(decoder: FrameDecoder, chunks: list[bytes]) -> list[Any]:
    seen: list[Any] = []
    for chunk in chunks:
        try:
            seen.append([(f.serial, f.payload, type(f)) for f in decoder.feed(chunk)])
        except FrameError as exc:
            seen.append(("error", str(exc)))
    return seen


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """Frames (small, empty, several blocks), now and then a header changed (token, listSize, a negative or
    huge block length) or garbage, cut into chunks anywhere."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        size = draw(st.sampled_from([0, 1, 30, 59, 60, 61, 200, 8192, 8193, 17000]))
        raw = bytearray(
            encode_frame(
                draw(st.integers(-(2**31), 2**31 - 1)), draw(st.binary(min_size=size, max_size=size))
            )
        )
        change = draw(st.integers(0, 12))
        if change == 1:
            raw[0] ^= 0xFF  # not the begin token
        elif change == 2:
            raw[8:12] = draw(st.sampled_from([b"\x00\x00\x00\x00", b"\x00\x00\x00\x02", b"\xff\xff\xff\xff"]))
        elif change == 3:
            raw[12:16] = draw(
                st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x10\x00\x00"])
            )
        elif change == 4:
            raw += draw(st.binary(max_size=20))
        parts.append(bytes(raw))
    stream = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.sampled_from([64, 8196, 40_000]))
def test_any_stream_gives_the_same_frames_and_errors(chunks: list[bytes], max_frame_bytes: int) -> None:
    assert _run(CompiledDecoder(max_frame_bytes), chunks) == _run(PureDecoder(max_frame_bytes), chunks)


@st.composite
def block_runs(draw: st.DrawFn) -> bytes:
    """Blocks as a frame carries them (an int32 length, then the bytes), now and then a length that lies
    (negative, past the end), cut off anywhere."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 6))):
        body = draw(st.binary(max_size=40))
        length = draw(st.sampled_from([len(body)] * 6 + [-1, -(2**31), len(body) + 1, 2**31 - 1]))
        out += length.to_bytes(4, "big", signed=True) + body
    return bytes(out[: draw(st.integers(0, len(out)))])


@settings(max_examples=500)
@given(block_runs(), st.integers(-2, 60), st.integers(-1, 8), st.integers(-1, 200))
def test_whole_blocks_is_its_reference(data: bytes, pos: int, blocks_left: int, room: int) -> None:
    """The C loop takes the same blocks as the Python twin from any bytes, position, count and room, and
    leaves the same pieces."""
    compiled: list[bytes] = []
    pure: list[bytes] = []
    got = extension("gateway.tubemq.wire._frame_decoder").whole_blocks(data, pos, blocks_left, room, compiled)
    want = frame_decoder._Python.whole_blocks(memoryview(data), pos, blocks_left, room, pure)
    assert (got, compiled) == (want, pure)
    assert all(type(piece) is bytes for piece in compiled + pure)


def test_a_frame_of_many_blocks_in_two_reads_is_whole() -> None:
    """A 530 KB answer (65 blocks) in two reads, one block cut between them."""
    payload = bytes(range(256)) * 2070
    wire = encode_frame(5, payload)
    for decoder in (CompiledDecoder(), PureDecoder()):
        assert decoder.feed(wire[:300_000]) == []
        assert decoder.buffered_bytes < 300_000
        (frame,) = decoder.feed(wire[300_000:])
        assert (frame.serial, frame.payload) == (5, payload)
        assert decoder.at_frame_boundary and decoder.buffered_bytes == 0


def test_the_process_decoder_uses_the_compiled_loop_where_built() -> None:
    assert (not isinstance(frame_decoder._loops, frame_decoder._Python)) == (
        speedups.ACTIVE == speedups.COMPILED
    )
    frames = FrameDecoder().feed(encode_frame(7, b"abc") + encode_frame(-8, b""))
    assert [(f.serial, f.payload) for f in frames] == [(7, b"abc"), (-8, b"")]
    assert all(type(f) is Frame for f in frames)


def test_a_frame_class_of_another_shape_is_refused() -> None:
    class Other:
        __slots__ = ("serial",)

    with pytest.raises(TypeError):
        extension("gateway.tubemq.wire._frame_decoder").set_frame_type(Other)
    extension("gateway.tubemq.wire._frame_decoder").set_frame_type(Frame)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    serial=st.sampled_from([0, 1, -1, 7, (1 << 31) - 1, -(1 << 31), 1 << 31, -(1 << 31) - 1]),
    size=st.sampled_from([0, 1, 127, 128, 1100, 8100, 8150, 8160, 8168, 8170, 8180, 8192, 8193, 20000]),
    method=st.integers(0, 1 << 20),
    timeout_ms=st.integers(1, 1 << 31),
    service=st.integers(0, 1 << 20),
)
def test_a_request_frame_is_the_reference_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, serial: int, size: int, method: int, timeout_ms: int, service: int
) -> None:
    """``rpc.encode_request`` of a serialized request frames it in one C call where the extension is, and
    as ``_request_frame`` (the reference) where it is not: byte for byte alike, for frames of one block and
    of several, and serials inside and outside int32."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    prefix = rpc._request_prefix(service, rpc.PROTOCOL_VERSION)
    if not -(1 << 31) <= serial < (1 << 31):
        with pytest.raises(ValueError):  # the reference refuses it: so must the fast path
            rpc._request_frame(serial, prefix, rpc._body_head(method, timeout_ms), data)
        with pytest.raises(ValueError):
            rpc.encode_request(serial, method, data, timeout_ms, service)
        return
    want = rpc._request_frame(serial, prefix, rpc._body_head(method, timeout_ms), data)
    monkeypatch.setattr(rpc, "_loops", extension("gateway.tubemq.wire._rpc"))
    assert rpc.encode_request(serial, method, data, timeout_ms, service) == want
    monkeypatch.setattr(rpc, "_loops", rpc._Python())
    assert rpc.encode_request(serial, method, data, timeout_ms, service) == want
