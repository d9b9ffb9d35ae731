"""One asyncio TCP (optionally TLS) link to a TubeMQ node: open it, read frames, write frames, close it.

:class:`Link` owns the socket's life and nothing about requests: ``connect`` opens it (TCP keepalive on),
its protocol (:class:`~gateway.tubemq.net.link_protocol.LinkProtocol`) has the loop read into one reused
buffer and feeds it to a :class:`~gateway.tubemq.wire.frame_decoder.FrameDecoder`, handing every frame to
``_dispatch``, frames queued during one loop iteration leave in one write, and ``_terminate`` closes it
synchronously, for a reason (:class:`CloseReason`). What a frame means and which request it answers is
the business of the subclass, :class:`~gateway.tubemq.net.connection.Connection`, which fills in
``_dispatch`` and ``_fail_pending`` (the two hooks; the base only reads and closes).

Closing rules: end of stream, a socket error or garbage from the peer closes the link (a ``ProtocolError``
for garbage, kept as the cause); a local close flushes what is queued, a failure drops it at once.
Events (opened, terminated) go to an optional :class:`~gateway.tubemq.events.EventBus`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import socket
import ssl as _ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import ConnectError, ConnectionClosed, ProtocolError, TubeMQError
from gateway.tubemq.events import Event, EventBus
from gateway.tubemq.net.link_protocol import LinkProtocol
from gateway.tubemq.refusals import tls_hint
from gateway.tubemq.wire.frame import DEFAULT_MAX_FRAME_BYTES, Frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder

__all__ = [
    "KEEPALIVE_COUNT",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "CloseReason",
    "ConnectionOpened",
    "ConnectionState",
    "ConnectionTerminated",
    "Connector",
    "Link",
]

log = logging.getLogger(__name__)

#: TCP keepalive: first probe after this many idle seconds, then every INTERVAL, dead after COUNT unanswered
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_COUNT = 3


class Connector(Protocol):
    """How a link opens its stream: :meth:`asyncio.loop.create_connection`'s arguments and answer. The
    default is the loop's own (a TCP socket); :class:`~gateway.tubemq.net.memory.MemoryNetwork` opens one
    in memory instead."""

    async def __call__(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str,
        port: int,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]: ...


class ConnectionState(Enum):
    NEW = "new"
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"


class CloseReason(Enum):
    """Why a link closed; carried by ``ConnectionTerminated`` and shown in errors and ``repr``."""

    LOCAL = "closed locally"
    IDLE = "idle timeout"
    PEER_CLOSED = "peer closed the link"
    RESET = "socket error"
    PROTOCOL_ERROR = "peer sent unparsable bytes"
    REMOTE_IO_EXCEPTION = "peer answered with an IOException"
    NO_ANSWER = "request timed out with nothing read since it was sent"
    CONNECT_FAILED = "connect failed"
    INTERNAL_ERROR = "internal error"


@dataclass(frozen=True, slots=True)
class ConnectionOpened(Event):
    """A link finished its TCP (and TLS) handshake; ``seconds`` is the time it took."""

    address: NodeAddress
    tls: bool
    seconds: float


@dataclass(frozen=True, slots=True)
class ConnectionTerminated(Event):
    """A link closed; ``failed_requests`` pending requests were failed with ``ConnectionClosed``."""

    address: NodeAddress
    reason: CloseReason
    error: str | None
    failed_requests: int


class Link(abc.ABC):
    """The socket half of a connection: state, opening, reading, batched writes and closing.

    ``ssl`` turns on TLS; ``server_hostname`` is the name the certificate must carry (default: the
    address's host; the context decides whether it is checked). ``clock`` returns monotonic seconds
    (injectable for tests of idle logic); ``max_frame_bytes`` bounds one incoming frame. ``connector`` opens
    the stream (default: a TCP socket through the running loop).
    """

    def __init__(
        self,
        address: NodeAddress,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        events: EventBus | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connector: Connector | None = None,
    ) -> None:
        self.address = address
        self._connector = connector
        self._ssl = ssl
        self._server_hostname = server_hostname
        self._events = events
        self._clock = clock
        self._decoder = FrameDecoder(max_frame_bytes)
        self._state = ConnectionState.NEW
        self._close_reason: CloseReason | None = None
        self._close_error: BaseException | None = None
        self._protocol: LinkProtocol | None = None
        self._transport: asyncio.Transport | None = None
        self._outbox: list[bytes] = []
        now = clock()
        self.last_activity = now
        """Monotonic time of the last byte read or frame written."""
        self.last_read = now
        """Monotonic time of the last byte read (the connect time before the first)."""
        self.idle_since: float | None = now
        """Monotonic time the link last turned idle (nothing in flight); None while busy."""

    # --- the two hooks of the request layer ----------------------------------------------------------

    @abc.abstractmethod
    def _dispatch(self, frame: Frame) -> None:
        """Handle one frame read from the peer (called as reads complete it, in order)."""

    def _fail_pending(self) -> int:
        """Fail whatever waits for an answer, the link having closed; return how many were failed."""
        return 0

    # --- state questions -----------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def close_reason(self) -> CloseReason | None:
        return self._close_reason

    @property
    def is_closed(self) -> bool:
        return self._state is ConnectionState.CLOSED

    @property
    def is_open(self) -> bool:
        return self._state is ConnectionState.OPEN

    @property
    def socket(self) -> socket.socket | None:
        """The underlying socket while open (for inspection; never read or write it)."""
        transport = self._transport
        if transport is None or self._state is not ConnectionState.OPEN:
            return None
        sock: socket.socket | None = transport.get_extra_info("socket")
        return sock

    # --- opening -------------------------------------------------------------------------------------

    async def connect(self, timeout: float) -> None:  # noqa: ASYNC109
        """Open the TCP (and TLS) link within ``timeout`` seconds; raises ``ConnectError``."""
        if self._state is not ConnectionState.NEW:
            raise RuntimeError(f"connect() called on a {self._state.value} connection")
        self._state = ConnectionState.CONNECTING
        started = self._clock()
        loop = asyncio.get_running_loop()
        protocol = self._protocol = LinkProtocol(loop, self._made, self._received, self._ended)
        connector = self._connector or loop.create_connection
        try:
            async with asyncio.timeout(timeout):
                await connector(
                    lambda: protocol,
                    self.address.host,
                    self.address.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname if self._ssl is not None else None,
                )
            if self._state is ConnectionState.CLOSED:
                # The peer sent garbage or closed before the handshake's end was seen here.
                raise self._closed_error()
        except BaseException as exc:
            self._state = ConnectionState.CLOSED
            self._close_reason = CloseReason.CONNECT_FAILED
            self._close_error = exc
            if not isinstance(exc, Exception):
                raise
            why = f"timed out after {timeout:g}s" if isinstance(exc, TimeoutError) else _describe(exc)
            raise ConnectError(f"cannot connect to {self.address}: {why}") from exc
        transport = self._transport
        assert transport is not None  # set by connection_made
        _enable_keepalive(transport.get_extra_info("socket"))
        self._state = ConnectionState.OPEN
        now = self._clock()
        self.last_read = now
        self.last_activity = now
        self.idle_since = now
        if self._events is not None:
            self._events.emit(ConnectionOpened(self.address, self._ssl is not None, now - started))

    # --- writing -------------------------------------------------------------------------------------

    def _flush(self) -> None:
        # Frames queued during one loop iteration leave in a single write (one syscall, not one each).
        outbox = self._outbox
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        outbox.clear()
        if self._state is ConnectionState.OPEN and self._transport is not None:
            self._transport.write(data)

    async def _drain(self) -> None:
        """Wait for the socket buffer to drain; a broken socket closes the link."""
        try:
            protocol = self._protocol
            if protocol is None:
                raise ConnectionResetError("not connected")
            await protocol.drain()
        except OSError as exc:
            self._terminate(CloseReason.RESET, exc)
            raise self._closed_error() from exc

    # --- reading -------------------------------------------------------------------------------------

    def _made(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def _received(self, data: memoryview) -> None:
        """Bytes read from the socket (into the protocol's reused buffer): frames go to ``_dispatch``."""
        if self._state is ConnectionState.CLOSED:
            return
        self.last_activity = self.last_read = self._clock()
        dispatch = self._dispatch
        try:
            for frame in self._decoder.feed(data):
                dispatch(frame)
                if self.is_closed:
                    return
        except ProtocolError as exc:
            self._terminate(CloseReason.PROTOCOL_ERROR, exc)
        except OSError as exc:
            self._terminate(CloseReason.RESET, exc)
        except Exception as exc:
            # A bug must not leave requests hanging: fail them and say why.
            log.exception("connection reader failed: %r", self, extra={"address": str(self.address)})
            self._terminate(CloseReason.INTERNAL_ERROR, exc)

    def _ended(self, exc: Exception | None) -> None:
        """The peer closed its side (``exc`` None) or the socket failed: close the link."""
        if self._state is ConnectionState.CLOSED:
            return
        if isinstance(exc, OSError):
            self._terminate(CloseReason.RESET, exc)
        elif exc is not None:
            log.error(
                "connection reader failed: %r", self, exc_info=exc, extra={"address": str(self.address)}
            )
            self._terminate(CloseReason.INTERNAL_ERROR, exc)
        elif not self._decoder.at_frame_boundary:
            error = ProtocolError(f"{self.address} closed the link inside a frame")
            self._terminate(CloseReason.PROTOCOL_ERROR, error)
        else:
            self._terminate(CloseReason.PEER_CLOSED, None)

    # --- closing -------------------------------------------------------------------------------------

    def _closed_error(self) -> ConnectionClosed:
        reason = self._close_reason
        if self._state is ConnectionState.NEW or self._state is ConnectionState.CONNECTING:
            return ConnectionClosed(f"connection to {self.address} is not open yet")
        why = reason.value if reason is not None else "closed"
        detail = f": {_describe(self._close_error)}" if self._close_error is not None else ""
        error = ConnectionClosed(f"connection to {self.address} closed ({why}{detail})")
        error.__cause__ = self._close_error
        return error

    def _terminate(self, reason: CloseReason, error: BaseException | None) -> None:
        """Close the link now (synchronously) and fail every pending request with ConnectionClosed."""
        if self._state is ConnectionState.CLOSED:
            return
        self._state = ConnectionState.CLOSED
        self._close_reason = reason
        self._close_error = error
        failed = self._fail_pending()
        transport = self._transport
        if transport is not None:
            # A link that failed has nothing worth flushing; drop it at once.
            if reason is CloseReason.LOCAL or reason is CloseReason.IDLE:
                transport.close()
            else:
                transport.abort()
        if self._events is not None:
            message = _describe(error) if error is not None else None
            self._events.emit(ConnectionTerminated(self.address, reason, message, failed))

    def begin_close(self, reason: CloseReason = CloseReason.LOCAL) -> None:
        """Close without waiting: pending requests fail at once, the socket closes in the background."""
        self._terminate(reason, None)

    async def wait_closed(self) -> None:
        """Wait until the socket is released (at most a second after closing starts, then it is dropped)."""
        protocol, transport = self._protocol, self._transport
        if protocol is None or transport is None:
            return
        lost = protocol.lost
        if not lost.done():
            await asyncio.wait({lost}, timeout=1.0)
            if not lost.done():
                transport.abort()

    async def close(self, reason: CloseReason = CloseReason.LOCAL) -> None:
        """Close the link (pending requests fail with ConnectionClosed) and release the socket."""
        self._terminate(reason, None)
        await asyncio.shield(self.wait_closed())


def _enable_keepalive(sock: socket.socket | None) -> None:
    """SO_KEEPALIVE with the KEEPALIVE_* timings where the platform has the options."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (
            ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
            ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
            ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ):
            option = getattr(socket, name, None)
            if option is not None:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
    except OSError as exc:  # not a TCP socket (a test double) or an exotic platform: keep the link
        log.debug("TCP keepalive not enabled: %s", exc)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    if isinstance(exc, TubeMQError):
        return str(exc)
    text = str(exc)
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    hint = tls_hint(exc)
    return f"{described}; {hint}" if hint else described
