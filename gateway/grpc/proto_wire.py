"""The protobuf wire format's pieces the hand-built gRPC messages share: varints and length-delimited fields,
written (:func:`varint`, :func:`text_field`) and read (:func:`read_varint`).

The gateway's hot gRPC messages are encoded by hand (``consumed_wire``: delivered messages; ``publish_wire``:
publish receipts) and publish requests decoded by hand (``publish_wire``), because building or reading a
protobuf object per message cost more than the rest of a message's way through the gateway's adapter; tests
hold each against the protobuf library's own encoding.
"""

from __future__ import annotations

__all__ = ["read_varint", "text_field", "varint"]

_BYTE = [bytes((i,)) for i in range(0x80)]
#: the continuation bits of an n-byte varint: 0x80 in every byte but the last
_CONTINUED = [0] + [int.from_bytes(b"\x80" * (n - 1) + b"\x00", "little") for n in range(1, 11)]
_LOW56 = (1 << 56) - 1


def varint(value: int) -> bytes:
    """A base-128 varint; negative values as their 64-bit two's complement (int32 and int64 alike).

    Offsets and message ids take 4 to 9 bytes: a loop over 7-bit groups costs 0.3-0.75 us each, the
    branches and the bit spread below about half of that."""
    if value < 0x4000:
        if value >= 0x80:
            return bytes((value & 0x7F | 0x80, value >> 7))
        if value >= 0:
            return _BYTE[value]
        value += 1 << 64
    elif value < 0x10000000:
        if value < 0x200000:
            return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14 & 0x7F | 0x80, value >> 21))
    size = (value.bit_length() + 6) // 7
    # Spread the low 56 bits, 7 to a byte (28 | 28, then 14 | 14 in each half, then 7 | 7), then the
    # 8 high bits into bytes 8 and 9; then set the continuation bits.
    x = value & _LOW56
    x = (x & 0xFFFFFFF) | ((x & 0xFFFFFFF0000000) << 4)
    x = (x & 0x00003FFF00003FFF) | ((x & 0x0FFFC0000FFFC000) << 2)
    x = (x & 0x007F007F007F007F) | ((x & 0x3F803F803F803F80) << 1)
    if size > 8:
        high = value >> 56
        x |= ((high & 0x7F) | ((high & 0x3F80) << 1)) << 64
    return (x | _CONTINUED[size]).to_bytes(size, "little")


def text_field(tag: bytes, text: str) -> bytes:
    """A length-delimited field: ``tag``, then ``text``'s UTF-8 bytes with their length."""
    data = text.encode()
    return tag + varint(len(data)) + data


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos]`` and the position after it; raises IndexError when ``data`` ends inside it
    and ValueError past 10 bytes."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ValueError("a varint longer than 10 bytes")
