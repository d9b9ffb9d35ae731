"""Compressed request messages, inflated by the gateway within its method's bound.

The gRPC server runs with the C core's per-message decompression off (``grpc.per_message_decompression``,
gateway/grpc/server.py): the core would inflate a compressed message whole (up to
``grpc.max_receive_message_length``) and copy it twice on its way to Python before any bound of the gateway's
could look at it, about three times the message's size in memory at once (a 20 MiB value gzip-compressed to
20 KiB: +65 MiB). The request deserializers (gateway/grpc/call_budget.py) inflate it here instead, once, into
the bytes they parse, never past the bound of the method (a publish: ``grpc.max_message_bytes``; anything
else: ``limits.max_control_body_bytes``), and a gzip message whose trailer declares more is refused without
being inflated at all.

grpc-python does not say whether a message came compressed (the flag is in the message's 5-byte prefix, and
the call's ``grpc-encoding`` header is not among the metadata a server sees), so the encoding is read from the
bytes: gzip's magic number (0x1f 0x8b; a protobuf message cannot begin with 0x1f, wire type 7 does not exist)
and the zlib header grpc's deflate writes (0x78 and the header's checksum; 0x78 would begin a protobuf message
with field 15 as a varint, which no request message of the gateway's services has). Anything else is the
message itself, and so are bytes that look compressed but do not inflate (the protobuf reader then judges
them).
"""

from __future__ import annotations

import zlib

__all__ = ["compressed_head", "inflate"]

_GZIP = 16 + zlib.MAX_WBITS  # a gzip member (header and trailer)


def _wbits(raw: bytes) -> int:
    """The zlib ``wbits`` reading ``raw``'s encoding; 0 when it is not compressed."""
    if len(raw) < 2:
        return 0
    first = raw[0]
    if first == 0x1F and raw[1] == 0x8B:
        return _GZIP
    if first == 0x78 and (0x7800 | raw[1]) % 31 == 0:
        return zlib.MAX_WBITS
    return 0


def compressed_head(raw: bytes, size: int) -> bytes | None:
    """The first ``size`` bytes (at most) ``raw`` inflates to; None when it is not compressed (or those
    bytes do not inflate)."""
    wbits = _wbits(raw)
    if not wbits:
        return None
    if size < 1:
        return b""  # (a max_length of 0 would inflate it all)
    try:
        return zlib.decompressobj(wbits).decompress(raw, size)
    except zlib.error:
        return None


def inflate(raw: bytes, limit: int) -> bytes | None:
    """``raw`` inflated when it is a gzip or zlib stream, else ``raw`` itself; None when it would inflate to
    more than ``limit`` bytes (a gzip stream declaring more is not inflated at all)."""
    wbits = _wbits(raw)
    if not wbits:
        return raw
    if wbits == _GZIP and len(raw) >= 18 and int.from_bytes(raw[-4:], "little") > limit:
        return None  # the trailer's size (modulo 2**32; what inflates past it is stopped below)
    stream = zlib.decompressobj(wbits)
    try:
        inflated = stream.decompress(raw, limit + 1)
    except zlib.error:
        return raw
    if len(inflated) > limit:
        return None
    if not stream.eof or stream.unused_data:
        return raw  # not one whole stream: not compressed by a gRPC client
    return inflated
