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
* The decoder (:mod:`gateway.tubemq.wire.frame_decoder`) accepts blocks of any non-negative length,
  bounded only by ``max_frame_bytes`` (more lenient than Java, which caps a block at 8192 bytes). It
  rejects ``listSize`` 0 outright instead of desynchronising like Java does.
* ``decode_delimited`` ignores bytes after the requested parts by default, as Java's
  ``parseDelimitedFrom`` sequence on the server and the client does; pass ``exact=True`` to refuse them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gateway.tubemq.errors import ProtocolError

__all__ = [
    "BEGIN_TOKEN",
    "BLOCK_SIZE",
    "DEFAULT_MAX_FRAME_BYTES",
    "HEADER_SIZE",
    "MAX_LIST_SIZE",
    "Frame",
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
PREFIX_SIZE = 4
"""Bytes of a block's length prefix."""
DEFAULT_MAX_FRAME_BYTES = MAX_LIST_SIZE * (BLOCK_SIZE + PREFIX_SIZE)
"""Default bound on a frame's bytes after its header (block length prefixes + block bytes): the largest
frame a Java peer may send, 3584 full blocks."""

TOKEN_SIGNED = BEGIN_TOKEN - (1 << 32)
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_UINT64_LIMIT = 1 << 64
_MAX_VARINT_BYTES = 10

# The header and length layouts, shared with the decoder (frame_decoder.py).
HEADER_STRUCT = struct.Struct(">iii")
HEADER_ONE_BLOCK_STRUCT = struct.Struct(">iiii")
LENGTH_STRUCT = struct.Struct(">i")
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
        return HEADER_ONE_BLOCK_STRUCT.pack(TOKEN_SIGNED, serial, 1, size) + payload
    blocks = -(-size // BLOCK_SIZE)
    if blocks > MAX_LIST_SIZE:
        raise ValueError(f"payload of {size} bytes needs {blocks} blocks, above the limit of {MAX_LIST_SIZE}")
    with memoryview(payload) as raw, raw.cast("B") as view:
        parts: list[bytes | memoryview] = [HEADER_STRUCT.pack(TOKEN_SIGNED, serial, blocks)]
        full = LENGTH_STRUCT.pack(BLOCK_SIZE)
        for start in range(0, size - BLOCK_SIZE, BLOCK_SIZE):
            parts.append(full)
            parts.append(view[start : start + BLOCK_SIZE])
        last = (blocks - 1) * BLOCK_SIZE
        parts.append(LENGTH_STRUCT.pack(size - last))
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
    parts.insert(0, HEADER_ONE_BLOCK_STRUCT.pack(TOKEN_SIGNED, serial, 1, size))
    return b"".join(parts)


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
