"""One client link the embedded RPC server (``gateway/embedded/server.py``) accepted, with its own bounds."""

from __future__ import annotations

import asyncio

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.wire.frame_decoder import FrameDecoder

__all__ = ["AcceptedLink"]


class AcceptedLink:
    """One accepted client link: its writer, frame decoder and the handler tasks it started."""

    __slots__ = ("calls", "closed", "decoder", "outbox", "partial_since", "peer", "room", "task", "writer")

    def __init__(self, writer: asyncio.StreamWriter, peer: NodeAddress, max_frame_bytes: int) -> None:
        self.writer = writer
        self.peer = peer
        self.decoder = FrameDecoder(max_frame_bytes)
        self.calls: set[asyncio.Task[None]] = set()
        self.task = asyncio.current_task()
        self.closed = False
        self.outbox: list[bytes] = []
        #: monotonic time since when the decoder holds an unfinished frame (None: at a frame boundary)
        self.partial_since: float | None = None
        #: set while fewer than the server's max_calls requests of this link are running
        self.room = asyncio.Event()
        self.room.set()

    def send(self, data: bytes) -> None:
        if not self.closed:
            outbox = self.outbox
            outbox.append(data)
            if len(outbox) == 1:
                asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        # Answers finished during one loop iteration leave in a single write.
        outbox = self.outbox
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        outbox.clear()
        if not self.closed:
            self.writer.write(data)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.transport.abort()
        for call in self.calls:
            call.cancel()
        self.room.set()

    def __repr__(self) -> str:
        return f"<AcceptedLink {self.peer} calls={len(self.calls)}{' closed' if self.closed else ''}>"
