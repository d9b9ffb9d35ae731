"""One end of an in-process byte stream: :class:`MemoryTransport`, an asyncio transport with no socket.

Two of them, made peers by :class:`~gateway.tubemq.net.memory.MemoryNetwork`, carry bytes between two asyncio
protocols in one event loop as a TCP connection would: what one end writes reaches the other's protocol in a
later loop iteration, in order, in as many pieces as the receiving buffer takes (a
:class:`asyncio.BufferedProtocol` is fed through ``get_buffer``/``buffer_updated``, any other protocol through
``data_received``). Flow control is a socket's: a receiver that paused reading gets nothing until it resumes,
the bytes wait with the sender, whose protocol is paused past the high-water mark and resumed below the low
one. ``close`` delivers what was written, then the end of the stream; ``abort`` drops it and resets the peer
(``ConnectionResetError``), as an aborted socket's RST does. No TLS: the network refuses an SSL context.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

__all__ = ["MemoryTransport"]

_HIGH_WATER = 64 * 1024
#: the most one delivery hands the receiving protocol (a socket read's buffer)
READ_SIZE = 256 * 1024


class MemoryTransport(asyncio.Transport):
    """One end of an in-process stream; ``pair`` makes two ends of one stream. ``name`` and ``peer`` are the
    ``sockname`` and ``peername`` the ends report (``get_extra_info``), as a socket's would."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.BaseProtocol,
        name: tuple[str, int],
        peer: tuple[str, int],
    ) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._extra = {"sockname": name, "peername": peer, "socket": None}
        self._other: MemoryTransport | None = None
        self._unsent: deque[memoryview] = deque()
        self._unsent_bytes = 0
        self._high, self._low = _HIGH_WATER, _HIGH_WATER // 4
        self._writing_paused = False
        self._reading_paused = False
        self._scheduled = False
        self._closing = False  # close() or abort() called, or the stream ended
        self._reset = (
            False  # abort() called on either end: nothing more is delivered, the stream is not ended
        )
        self._lost = False  # connection_lost delivered to this end's protocol

    @staticmethod
    def pair(a: MemoryTransport, b: MemoryTransport) -> None:
        """Make ``a`` and ``b`` the two ends of one stream."""
        a._other, b._other = b, a

    # --- asyncio.BaseTransport -------------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Deliver what was written, then end the stream on both sides."""
        if self._closing:
            return
        self._closing = True
        self._schedule()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # --- asyncio.ReadTransport -------------------------------------------------------------------------

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            other = self._other
            if other is not None:
                other._schedule()

    # --- asyncio.WriteTransport ------------------------------------------------------------------------

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._check_pause()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def get_write_buffer_size(self) -> int:
        return self._unsent_bytes

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._closing or not data:
            return
        self._unsent.append(memoryview(bytes(data)))  # a copy: the caller may reuse its buffer
        self._unsent_bytes += len(data)
        self._schedule()
        self._check_pause()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("an in-memory stream ends as a whole: close() it")

    def abort(self) -> None:
        """Drop what was not delivered and reset the stream: the peer's protocol loses it with an error."""
        if self._lost:
            return
        self._closing = self._reset = True
        self._unsent.clear()
        self._unsent_bytes = 0
        other = self._other
        self._loop.call_soon(self._lose, None)
        if other is not None and not other._lost:
            other._closing = other._reset = True
            other._unsent.clear()
            other._unsent_bytes = 0
            self._loop.call_soon(other._lose, ConnectionResetError("Connection reset by peer"))

    # --- delivery --------------------------------------------------------------------------------------

    def _schedule(self) -> None:
        if not self._scheduled and not self._lost:
            self._scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        """Hand what waits to the peer's protocol while it reads; end the stream once closed and empty."""
        self._scheduled = False
        other = self._other
        if self._lost or self._reset or other is None:
            return
        unsent = self._unsent
        while unsent and not other._reading_paused and not other._lost:
            chunk = unsent.popleft()
            if len(chunk) > READ_SIZE:  # a socket read takes at most a buffer's worth
                unsent.appendleft(chunk[READ_SIZE:])
                chunk = chunk[:READ_SIZE]
            self._unsent_bytes -= len(chunk)
            _feed(other._protocol, chunk)
        self._check_pause()
        if self._closing and not unsent:
            self._end(other)

    def _end(self, other: MemoryTransport) -> None:
        """The stream ended in order: the peer reads its end, then both ends are lost."""
        if not other._lost:
            other._closing = True
            other._protocol_eof()
            other._lose(None)
        self._lose(None)

    def _protocol_eof(self) -> None:
        eof = getattr(self._protocol, "eof_received", None)
        if eof is not None:
            eof()

    def _lose(self, error: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._protocol.connection_lost(error)

    def _check_pause(self) -> None:
        size = self._unsent_bytes
        if not self._writing_paused and size > self._high and not self._lost:
            self._writing_paused = True
            self._protocol.pause_writing()
        elif self._writing_paused and size <= self._low:
            self._writing_paused = False
            self._protocol.resume_writing()


def _feed(protocol: asyncio.BaseProtocol, data: memoryview) -> None:
    """Give ``data`` to ``protocol`` as one socket read would."""
    if isinstance(protocol, asyncio.BufferedProtocol):
        taken = 0
        while taken < len(data):
            buffer = memoryview(protocol.get_buffer(len(data) - taken)).cast("B")
            n = min(len(buffer), len(data) - taken)
            if n == 0:
                raise RuntimeError("get_buffer() returned an empty buffer")
            buffer[:n] = data[taken : taken + n]
            protocol.buffer_updated(n)
            taken += n
    else:
        assert isinstance(protocol, asyncio.Protocol)
        protocol.data_received(bytes(data))
