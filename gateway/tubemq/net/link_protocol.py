"""A link's asyncio protocol: reads go from the socket into one reused buffer and straight to the link (not
through a StreamReader, which would copy each read into its buffer and out again), and writers can wait
while the transport has asked to pause writing. Nothing is buffered here: the link's frame decoder keeps at
most the frame in progress, so memory stays bounded without pausing reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

__all__ = ["READ_CHUNK", "LinkProtocol"]

READ_CHUNK = 256 * 1024
"""Bytes of the buffer each read lands in."""


class LinkProtocol(asyncio.BufferedProtocol):
    """The loop reads into one reused buffer and ``received`` gets each read as a view of it (valid only
    during the call); ``ended`` gets the end of the stream (None) or the error that broke it, once or
    twice (end of stream, then the loss); ``made`` gets the transport when it is connected."""

    __slots__ = ("_ended", "_loop", "_made", "_paused", "_received", "_view", "_waiters", "lost")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        made: Callable[[asyncio.Transport], None],
        received: Callable[[memoryview], None],
        ended: Callable[[Exception | None], None],
    ) -> None:
        self._loop = loop
        self._made = made
        self._received = received
        self._ended = ended
        self._view = memoryview(bytearray(READ_CHUNK))
        self._paused = False
        self._waiters: list[asyncio.Future[None]] = []
        self.lost: asyncio.Future[None] = loop.create_future()
        """Done once the transport is gone (``connection_lost``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made(cast(asyncio.Transport, transport))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        with self._view[:nbytes] as data:
            self._received(data)

    def eof_received(self) -> bool:
        self._ended(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self._wake(ConnectionResetError("Connection lost"))
        self._ended(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake(None)

    def _wake(self, error: Exception | None) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    async def drain(self) -> None:
        """Return when the transport takes writes again; raise ``ConnectionResetError`` once it is gone."""
        if self.lost.done():
            raise ConnectionResetError("Connection lost")
        if not self._paused:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter
