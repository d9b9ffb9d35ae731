"""TubeMQ frame codec, sans-IO (protocol doc §1.2, §1.3).

A frame is a 12-byte header (begin token, serial number, block count; big-endian signed int32 each)
followed by blocks, each a 4-byte big-endian length and that many bytes. The concatenated block bytes
form the payload, which is a sequence of varint-length-delimited protobuf messages.

Choices where the wire leaves room (all checked against the Java source, apache/inlong
``corerpc/netty/NettyProtocolDecoder.java`` and ``NettyRpcServer.java``):

* The encoder cuts payloads into blocks of exactly ``BLOCK_SIZE`` bytes (the last holds the remainder),
  because the Java decoder rejects blocks longer than 8192 bytes and the C++ client does too. An empty
  payload is sent as one empty block: a frame with ``listSize`` 0 is never completed by the Java
  decoder (it would swallow the following frame's bytes), while one zero-length block is accepted.
* The decoder accepts blocks of any non-negative length, bounded only by ``max_frame_bytes`` (more
  lenient than Java, which caps a block at 8192 bytes). It rejects ``listSize`` 0 outright instead of
  desynchronising like Java does.
* ``decode_delimited`` ignores bytes after the requested parts by default, as Java's
  ``parseDelimitedFrom`` sequence on the server and the client does; pass ``exact=True`` to refuse them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from gateway.tubemq.errors import ProtocolError

__all__ = [
    "BEGIN_TOKEN",
    "BLOCK_SIZE",
    "DEFAULT_MAX_FRAME_BYTES",
    "HEADER_SIZE",
    "MAX_LIST_SIZE",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "decode_delimited",
    "decode_varint",
    "encode_delimited",
    "encode_frame",
    "encode_varint",
]

BEGIN_TOKEN = 0xFF7FF4FE
"""Frame begin token; on the wire as the signed int32 -8391426."""
BLOCK_SIZE = 8192
"""Block size senders cut payloads into (Java ``RPC_MAX_BUFFER_SIZE``), in bytes."""
MAX_LIST_SIZE = 3584
"""Largest block count the Java decoder accepts ((20 MiB + 8 MiB) / 8192)."""
HEADER_SIZE = 12
"""Bytes of the frame header: token, serial, listSize."""
_PREFIX_SIZE = 4
DEFAULT_MAX_FRAME_BYTES = MAX_LIST_SIZE * (BLOCK_SIZE + _PREFIX_SIZE)
"""Default bound on a frame's bytes after its header (block length prefixes + block bytes): the largest
frame a Java peer may send, 3584 full blocks."""

_TOKEN_SIGNED = BEGIN_TOKEN - (1 << 32)
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_UINT64_LIMIT = 1 << 64
_MAX_VARINT_BYTES = 10

_HEADER = struct.Struct(">iii")
_HEADER_ONE_BLOCK = struct.Struct(">iiii")
_LENGTH = struct.Struct(">i")
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


class FrameError(ProtocolError):
    """The byte stream is not valid TubeMQ framing (or a delimited payload is malformed).

    After a framing error the stream cannot be resynchronised: close the connection.
    """


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame: ``serial`` is the signed int32 from the wire, ``payload`` the joined blocks."""

    serial: int
    payload: bytes


def encode_frame(serial: int, payload: bytes | bytearray | memoryview) -> bytes:
    """Return the whole frame for ``payload`` cut into 8192-byte blocks.

    ``serial`` must fit a signed int32. Raises ``ValueError`` when the payload needs more than
    ``MAX_LIST_SIZE`` blocks, which no Java peer would accept.
    """
    if not _INT32_MIN <= serial <= _INT32_MAX:
        raise ValueError(f"serial {serial} does not fit a signed int32")
    size = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    if size <= BLOCK_SIZE:
        # The common case (every rpc request): one header pack and one concatenation.
        return _HEADER_ONE_BLOCK.pack(_TOKEN_SIGNED, serial, 1, size) + payload
    blocks = -(-size // BLOCK_SIZE)
    if blocks > MAX_LIST_SIZE:
        raise ValueError(f"payload of {size} bytes needs {blocks} blocks, above the limit of {MAX_LIST_SIZE}")
    with memoryview(payload) as raw, raw.cast("B") as view:
        parts: list[bytes | memoryview] = [_HEADER.pack(_TOKEN_SIGNED, serial, blocks)]
        full = _LENGTH.pack(BLOCK_SIZE)
        for start in range(0, size - BLOCK_SIZE, BLOCK_SIZE):
            parts.append(full)
            parts.append(view[start : start + BLOCK_SIZE])
        last = (blocks - 1) * BLOCK_SIZE
        parts.append(_LENGTH.pack(size - last))
        parts.append(view[last:])
        # join copies each slice exactly once into the result.
        result = b"".join(parts)
        parts.clear()
    return result


def encode_frame_parts(serial: int, parts: list[bytes]) -> bytes:
    """``encode_frame(serial, b"".join(parts))`` with one copy of the parts when they fit one block."""
    size = 0
    for part in parts:
        size += len(part)
    if size > BLOCK_SIZE or not _INT32_MIN <= serial <= _INT32_MAX:
        return encode_frame(serial, b"".join(parts))
    parts.insert(0, _HEADER_ONE_BLOCK.pack(_TOKEN_SIGNED, serial, 1, size))
    return b"".join(parts)


class _State(Enum):
    HEADER = "header"
    LENGTH = "block length"
    BLOCK = "block bytes"
    FAILED = "failed"


class FrameDecoder:
    """Incremental frame decoder: feed it any split of the byte stream, get completed frames.

    Only the bytes of the frame in progress are kept (at most ``max_frame_bytes`` plus a partial
    header). Block lengths are checked against ``max_frame_bytes`` before any block byte is buffered.
    After the first ``FrameError`` every further ``feed`` raises ``FrameError`` too.
    """

    __slots__ = (
        "_block_left",
        "_blocks_left",
        "_body_bytes",
        "_error",
        "_max_frame_bytes",
        "_partial",
        "_payload",
        "_payload_bytes",
        "_serial",
        "_state",
    )

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        """``max_frame_bytes`` bounds a frame's size after its header, prefixes included, in bytes."""
        if max_frame_bytes < _PREFIX_SIZE:
            raise ValueError(f"max_frame_bytes must be at least {_PREFIX_SIZE}, got {max_frame_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._state = _State.HEADER
        self._partial = bytearray()  # an incomplete header or block length
        # Block bytes of the frame in progress, as pieces joined once when it completes: a large answer
        # then lands in fresh memory once (growing a buffer and copying it out touched it twice).
        self._payload: list[bytes] = []
        self._payload_bytes = 0
        self._serial = 0
        self._blocks_left = 0
        self._block_left = 0
        self._body_bytes = 0  # bytes after the header announced so far, prefixes included
        self._error = ""

    def __repr__(self) -> str:
        if self._state is _State.HEADER and not self._partial:
            where = "between frames"
        elif self._state is _State.FAILED:
            where = f"failed: {self._error}"
        else:
            where = (
                f"in frame serial={self._serial}, {self._state.value}, blocks_left={self._blocks_left}, "
                f"buffered={self.buffered_bytes}"
            )
        return f"<FrameDecoder {where}, max_frame_bytes={self._max_frame_bytes}>"

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for the frame in progress (0 between frames)."""
        return len(self._partial) + self._payload_bytes

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is held, i.e. the stream may end here cleanly."""
        return self._state is _State.HEADER and not self._partial

    @property
    def failed(self) -> bool:
        """True once a ``FrameError`` was raised; the decoder then refuses all input."""
        return self._state is _State.FAILED

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Consume ``data`` and return the frames it completes, in stream order."""
        if self._state is _State.FAILED:
            raise FrameError(
                f"frame decoder already failed: {self._error}; close the link, the stream cannot resync"
            )
        frames: list[Frame] = []
        with memoryview(data) as raw, raw.cast("B") as view:
            try:
                self._consume(view, frames)
            except FrameError as exc:
                self._fail(str(exc))
                raise
        return frames

    def _fail(self, message: str) -> None:
        self._state = _State.FAILED
        self._error = message
        self._partial = bytearray()
        self._payload = []
        self._payload_bytes = 0

    def _consume(self, view: memoryview, frames: list[Frame]) -> None:
        pos = 0
        end = len(view)
        while pos < end:
            if self._state is _State.HEADER and not self._partial:
                pos = self._whole_frames(view, pos, end, frames)
                if pos == end:
                    return
            if self._state is _State.BLOCK:
                pos = self._read_block(view, pos, end, frames)
                continue
            if self._state is _State.LENGTH and not self._partial:
                pos = self._whole_blocks(view, pos, end, frames)
                if pos == end or self._state is not _State.LENGTH:
                    continue
            need = HEADER_SIZE if self._state is _State.HEADER else _PREFIX_SIZE
            got = self._read_fixed(view, pos, end, need)
            if got is None:
                return
            fields, at, pos = got
            if self._state is _State.HEADER:
                self._start_frame(*_HEADER.unpack_from(fields, at))
            else:
                self._start_block(_LENGTH.unpack_from(fields, at)[0])
                if self._block_left == 0:
                    # An empty block must complete now, not when the next chunk arrives.
                    self._block_done(frames)
            self._partial.clear()

    def _read_fixed(
        self, view: memoryview, pos: int, end: int, need: int
    ) -> tuple[bytearray | memoryview, int, int] | None:
        """Get ``need`` bytes (header or block length) as ``(buffer, offset, new pos)``, or None if short."""
        if self._partial:
            take = min(need - len(self._partial), end - pos)
            self._partial += view[pos : pos + take]
            if len(self._partial) < need:
                return None
            return self._partial, 0, pos + take
        if end - pos >= need:
            return view, pos, pos + need
        self._partial += view[pos:end]
        return None

    def _read_block(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        take = min(self._block_left, end - pos)
        if take == self._block_left and self._blocks_left == 1 and not self._payload:
            # The whole payload lies in this chunk: copy it once, skipping the payload buffer.
            frames.append(Frame(self._serial, view[pos : pos + take].tobytes()))
            self._state = _State.HEADER
            return pos + take
        self._payload.append(view[pos : pos + take].tobytes())
        self._payload_bytes += take
        self._block_left -= take
        if self._block_left == 0:
            self._block_done(frames)
        return pos + take

    def _whole_frames(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        """Slice out complete single-block frames lying at ``pos``; return where they stop.

        The hot path for rpc traffic (payloads under 8192 bytes): one unpack per frame. Anything
        else, including every malformed header, is left to the general state machine.
        """
        unpack = _HEADER_ONE_BLOCK.unpack_from
        limit = self._max_frame_bytes - _PREFIX_SIZE
        while end - pos >= HEADER_SIZE + _PREFIX_SIZE:
            token, serial, list_size, length = unpack(view, pos)
            start = pos + HEADER_SIZE + _PREFIX_SIZE
            if token != _TOKEN_SIGNED or list_size != 1 or not 0 <= length <= limit or length > end - start:
                break
            pos = start + length
            frames.append(Frame(serial, view[start:pos].tobytes()))
        return pos

    def _whole_blocks(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        """Take the blocks lying whole at ``pos`` (a block length is due) into the payload; return where
        they stop. A large answer comes in 8192-byte blocks, some 65 to a 530 KB GetMessage answer: one
        unpack and one append each here, instead of two turns of the state machine. A block that is cut
        off, too long or negative is left to the general state machine (which reads or refuses it).
        Each block is copied out of the chunk (8 KiB, reused memory); the frame's pieces are joined once."""
        unpack = _LENGTH.unpack_from
        append = self._payload.append
        blocks_left = self._blocks_left
        body = self._body_bytes
        taken = self._payload_bytes
        room = self._max_frame_bytes - body
        while end - pos >= _PREFIX_SIZE:
            (length,) = unpack(view, pos)
            start = pos + _PREFIX_SIZE
            if not 0 <= length <= end - start or _PREFIX_SIZE + length > room:
                break
            room -= _PREFIX_SIZE + length
            body += _PREFIX_SIZE + length
            pos = start + length
            append(view[start:pos].tobytes())
            taken += length
            blocks_left -= 1
            if not blocks_left:
                self._body_bytes = body
                self._blocks_left = 0
                self._complete(frames)
                return pos
        self._payload_bytes = taken
        self._body_bytes = body
        self._blocks_left = blocks_left
        return pos

    def _start_frame(self, token: int, serial: int, list_size: int) -> None:
        if token != _TOKEN_SIGNED:
            raw = _LENGTH.pack(token).hex(" ")
            raise FrameError(f"wrong begin token {raw}, expected ff 7f f4 fe: not a TubeMQ stream")
        if list_size <= 0 or list_size > MAX_LIST_SIZE:
            why = "a frame needs at least one block" if list_size == 0 else f"allowed 1..{MAX_LIST_SIZE}"
            raise FrameError(f"frame serial={serial} has listSize {list_size}: {why}")
        self._serial = serial
        self._blocks_left = list_size
        self._body_bytes = 0
        self._state = _State.LENGTH

    def _start_block(self, length: int) -> None:
        if length < 0:
            raise FrameError(f"frame serial={self._serial} has a negative block length {length}")
        body = self._body_bytes + _PREFIX_SIZE + length
        if body > self._max_frame_bytes:
            raise FrameError(
                f"frame serial={self._serial} grows to {body} bytes with a {length}-byte block, "
                f"above max_frame_bytes={self._max_frame_bytes}"
            )
        self._body_bytes = body
        self._block_left = length
        self._state = _State.BLOCK

    def _block_done(self, frames: list[Frame]) -> None:
        self._blocks_left -= 1
        if self._blocks_left:
            self._state = _State.LENGTH
            return
        self._complete(frames)

    def _complete(self, frames: list[Frame]) -> None:
        pieces = self._payload
        frames.append(Frame(self._serial, pieces[0] if len(pieces) == 1 else b"".join(pieces)))
        self._payload = []
        self._payload_bytes = 0
        self._state = _State.HEADER


def encode_varint(value: int) -> bytes:
    """Return ``value`` (0 <= value < 2**64) as a protobuf varint (unsigned LEB128, 1..10 bytes)."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    # Lengths of message bodies and requests: two or three bytes, without the loop (a third of its cost).
    if 0 <= value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if 0 <= value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    if not 0 <= value < _UINT64_LIMIT:
        raise ValueError(f"varint value {value} is outside 0..2**64-1")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[int, int]:
    """Read one varint at ``offset``; return ``(value, offset just past it)``.

    Raises ``FrameError`` when the data ends inside the varint, or the varint is longer than 10
    bytes or exceeds 64 bits.
    """
    result = 0
    shift = 0
    pos = offset
    end = len(data)
    while True:
        if pos >= end:
            raise FrameError(f"truncated varint at offset {offset}: data ends after {pos - offset} bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if pos - offset >= _MAX_VARINT_BYTES:
            raise FrameError(f"varint at offset {offset} is longer than {_MAX_VARINT_BYTES} bytes")
    if result >= _UINT64_LIMIT:
        raise FrameError(f"varint at offset {offset} exceeds 64 bits")
    return result, pos


def encode_delimited(*parts: bytes | bytearray | memoryview) -> bytes:
    """Concatenate ``parts``, each preceded by its length in bytes as a varint (``writeDelimitedTo``)."""
    pieces: list[bytes | bytearray | memoryview] = []
    for part in parts:
        size = part.nbytes if isinstance(part, memoryview) else len(part)
        pieces.append(_SMALL_VARINTS[size] if size < 128 else encode_varint(size))
        pieces.append(part)
    return b"".join(pieces)


def decode_delimited(
    payload: bytes | bytearray | memoryview, count: int, *, exact: bool = False
) -> list[bytes]:
    """Read exactly ``count`` varint-length-delimited parts from the start of ``payload``.

    Bytes after the last part are ignored, as the Java server and client do, unless ``exact`` is
    true. Raises ``FrameError`` on a malformed varint, a part running past the payload, fewer than
    ``count`` parts, or (with ``exact``) trailing bytes.
    """
    with memoryview(payload) as raw, raw.cast("B") as view:
        end = len(view)
        parts: list[bytes] = []
        pos = 0
        for index in range(count):
            if pos >= end:
                raise FrameError(f"payload of {end} bytes ends before part {index + 1} of {count}")
            size, start = decode_varint(view, pos)
            if size > end - start:
                raise FrameError(
                    f"part {index + 1} of {count} announces {size} bytes at offset {start}, "
                    f"but only {end - start} remain"
                )
            pos = start + size
            parts.append(view[start:pos].tobytes())
        if exact and pos != end:
            raise FrameError(f"{end - pos} trailing bytes after {count} delimited parts")
    return parts
