"""Push consumption over one connection of a consumer instance (REST Server-Sent Events, a gRPC stream)."""

from __future__ import annotations

from gateway.service.delivery import Delivery
from gateway.service.errors import Unavailable
from gateway.service.instance import ConsumerInstance
from gateway.service.instance_id import redact

__all__ = ["StreamCursor"]


class StreamCursor:
    """Push consumption over one connection of an instance (REST Server-Sent Events, a gRPC server stream).

    The cursor is the last token sent on this connection. Each step first sends what is pending (delivered,
    not committed) above the cursor, so a client resuming after an event id gets again everything it may
    have missed, then polls for new messages. Opening a cursor supersedes the instance's previous one: a
    client that reconnects while the old connection still looks alive takes over, and messages the old
    connection delivered meanwhile reach the new one as pending.
    """

    def __init__(self, instance: ConsumerInstance, after: int) -> None:
        instance.stream_generation += 1
        self.instance = instance
        self.after = after
        self._generation = instance.stream_generation

    def __repr__(self) -> str:
        state = "superseded" if self.superseded else "current"
        return f"<StreamCursor {redact(self.instance.instance_id)} after={self.after} {state}>"

    @property
    def superseded(self) -> bool:
        return self.instance.stream_generation != self._generation

    async def next(self, max_messages: int, max_bytes: int, timeout: float) -> Delivery:  # noqa: ASYNC109
        """The next messages to send (possibly none after ``timeout`` seconds); raises Gone once the instance
        is closed."""
        ready = self.instance.pending_after(self.after)
        if not ready:
            try:
                await self.instance.poll(max_messages, max_bytes, timeout)
            except Unavailable:
                return Delivery(
                    []
                )  # the gateway is stopping: the stream's own loop sees it and ends the stream
            ready = self.instance.pending_after(self.after)
        if ready:
            self.after = ready.runs[-1].last
        return ready
