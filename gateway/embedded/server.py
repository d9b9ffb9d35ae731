"""An asyncio RPC server speaking TubeMQ's frame + RPC codec, answering like the Java server (§1.5).

The embedded master and broker each run one :class:`RpcServer` with their own handler::

    async def handler(method: int, request: Message, ctx: CallContext) -> Message

The server has already parsed ``RequestBody.request`` into the method's request class (``rpc.METHODS``).
The handler returns the method's response message (a SUCCESS answer; application failures travel as
``errCode`` inside it) or raises :class:`RemoteFault` for an RPC exception answer.

Answers follow the Java server (``NettyRpcServer``, ``RpcProtocol``, ``NettyRequestContext``):

* an unparsable envelope, a missing required field, an unknown method id or one of the declared but
  unimplemented methods 11, 12, 14, 19 get a FATAL answer, written even when the request carries no
  timeout;
* a method the request's service type does not offer gets an ERROR ``java.lang.Exception``;
* a handler raising anything but ``RemoteFault`` gets an ERROR
  ``java.lang.reflect.InvocationTargetException`` with an empty message (and is logged);
* while stopping, every request first gets an ERROR ``ServiceStoppingException`` and is then still
  processed, so a second answer may follow; clients ignore answers for serials no longer pending;
* an ERROR or SUCCESS answer is dropped when the request's own timeout (``RequestBody.timeout``) has
  passed by the time it is written, so a request with a timeout of 0 or none is never answered.

Requests on one link run concurrently; answers go out as they finish. Bytes that are not TubeMQ
framing close that client's link.

Bounds per link, so that one client cannot take the node's memory: reading stops while the link's unsent
answers exceed ``max_unsent_bytes`` (a client that pipelines requests without reading the answers) or
``max_calls`` requests are running, and resumes when they drained (TCP then pushes back on the client); a
frame left unfinished for ``frame_timeout`` seconds of reading closes the link.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl as _ssl
import time
from collections.abc import Callable

from google.protobuf.message import Message

from gateway.embedded.calls import CallContext, Handler, RemoteFault, service_offers
from gateway.embedded.listen import Listening, StartServer, tcp_server
from gateway.embedded.server_link import AcceptedLink
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR, ProtocolError
from gateway.tubemq.wire.frame import DEFAULT_MAX_FRAME_BYTES, Frame
from gateway.tubemq.wire.methods import METHODS
from gateway.tubemq.wire.rpc_server import (
    RpcDecodeError,
    RpcRequest,
    check_service,
    decode_request,
    encode_exception,
    encode_response,
    java_class_name,
    parse_request,
)

__all__ = [
    "STOPPING_EXCEPTION",
    "CallContext",
    "Handler",
    "RemoteFault",
    "RpcServer",
    "service_offers",
]

log = logging.getLogger(__name__)

STOPPING_EXCEPTION = "org.apache.inlong.tubemq.corerpc.exception.ServiceStoppingException"
_INVOCATION_EXCEPTION = "java.lang.reflect.InvocationTargetException"
_READ_CHUNK = 256 * 1024
_WRITE_HIGH_WATER = 4 * 1024 * 1024
_STREAM_LIMIT = 4 * 1024 * 1024
DEFAULT_MAX_UNSENT_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CALLS = 1024
DEFAULT_FRAME_TIMEOUT = 30.0


class RpcServer:
    """Listens on ``host:port`` (0 picks a free port, read ``port`` after ``start``), TLS if ``ssl``, through
    ``start_server`` (a TCP socket by default; see :mod:`gateway.embedded.listen`)."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl: _ssl.SSLContext | None = None,
        name: str = "rpc",
        clock: Callable[[], float] = time.monotonic,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_unsent_bytes: int = DEFAULT_MAX_UNSENT_BYTES,
        max_calls: int = DEFAULT_MAX_CALLS,
        frame_timeout: float = DEFAULT_FRAME_TIMEOUT,
        start_server: StartServer = tcp_server,
    ) -> None:
        if max_unsent_bytes < 1 or max_calls < 1 or frame_timeout <= 0:
            raise ValueError(
                f"max_unsent_bytes ({max_unsent_bytes}) and max_calls ({max_calls}) must be >= 1 and "
                f"frame_timeout ({frame_timeout}) > 0"
            )
        self._max_unsent = max_unsent_bytes
        self._max_calls = max_calls
        self._frame_timeout = frame_timeout
        self._sweeper: asyncio.Task[None] | None = None
        self.read_pauses = 0
        """Times a link stopped being read because of unsent answers or running calls."""
        self.frame_timeouts = 0
        """Links closed because a frame stayed unfinished for frame_timeout seconds."""
        self._handler = handler
        self.host = host
        self.port = port
        self.name = name
        self._ssl = ssl
        self._clock = clock
        self._max_frame_bytes = max_frame_bytes
        self._start_server = start_server
        self._server: Listening | None = None
        self._links: set[AcceptedLink] = set()
        self._stopping = False
        self.requests_received = 0
        self.links_accepted = 0

    def __repr__(self) -> str:
        if self._server is None:
            state = "stopped" if self._stopping else "not started"
        else:
            state = "stopping" if self._stopping else "serving"
        tls = " tls" if self._ssl is not None else ""
        return (
            f"<RpcServer {self.name} {self.host}:{self.port}{tls} {state} connections={len(self._links)} "
            f"requests={self.requests_received}>"
        )

    @property
    def address(self) -> NodeAddress:
        return NodeAddress(self.host, self.port)

    @property
    def connections(self) -> int:
        """Client links currently open."""
        return len(self._links)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def mark_stopping(self, stopping: bool = True) -> None:
        """Answer every request with ServiceStoppingException first, like a Java node shutting down."""
        self._stopping = stopping

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{self!r} is already started")
        self._stopping = False
        self._server, self.port = await self._start_server(
            self._serve, self.host, self.port, ssl=self._ssl, limit=_STREAM_LIMIT
        )
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self._sweep(), name=f"{self.name}-frame-sweeper")
        log.debug("%r listening", self)

    async def stop(self) -> None:
        """Stop listening and close every client link at once (in-flight calls are abandoned)."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
        await self.drop_connections()
        if server is not None:
            await server.wait_closed()

    async def drop_connections(self) -> None:
        """Close every client link but keep listening."""
        links = list(self._links)
        for link in links:
            link.close()
        tasks = {t for link in links for t in (link.task, *link.calls) if t is not None}
        tasks.discard(asyncio.current_task())
        if tasks:
            await asyncio.wait(tasks)

    async def __aenter__(self) -> RpcServer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    # --- one client link -----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = NodeAddress(str(peername[0]), int(peername[1])) if peername else NodeAddress("?", 0)
        link = AcceptedLink(writer, peer, self._max_frame_bytes)
        if self._server is None:  # accepted while stop() was running
            writer.transport.abort()
            return
        self._links.add(link)
        self.links_accepted += 1
        transport = writer.transport
        transport.set_write_buffer_limits(high=self._max_unsent)
        try:
            while not link.closed:
                if transport.get_write_buffer_size() > self._max_unsent or not link.room.is_set():
                    await self._pause(link)
                    continue
                data = await reader.read(_READ_CHUNK)
                if not data:
                    break
                for frame in link.decoder.feed(data):
                    self._on_frame(link, frame)
                if link.decoder.at_frame_boundary:
                    link.partial_since = None
                elif link.partial_since is None:
                    link.partial_since = self._clock()
        except ProtocolError as exc:
            fields = {"server": self.name, "peer": str(peer)}
            log.info("closing a link that sent bad frames: %s", exc, extra=fields)
        except OSError as exc:
            log.debug("link failed: %s", exc, extra={"server": self.name, "peer": str(peer)})
        except asyncio.CancelledError:
            pass
        finally:
            self._links.discard(link)
            link.close()

    async def _pause(self, link: AcceptedLink) -> None:
        """Stop reading until the unsent answers drained and a call slot is free."""
        self.read_pauses += 1
        try:
            await link.writer.drain()  # returns once the buffer is below its low-water mark
        except OSError:
            link.close()
            return
        await link.room.wait()
        if link.partial_since is not None:
            link.partial_since = self._clock()  # the time we did not read is not the client's

    async def _sweep(self) -> None:
        """Close links holding a frame unfinished for longer than frame_timeout."""
        interval = min(self._frame_timeout / 2, 1.0)
        while True:
            await asyncio.sleep(interval)
            now = self._clock()
            for link in list(self._links):
                since = link.partial_since
                if since is not None and now - since > self._frame_timeout:
                    self.frame_timeouts += 1
                    log.info(
                        "closing a link whose frame stayed unfinished",
                        extra={"server": self.name, "peer": str(link.peer), "seconds": round(now - since, 1)},
                    )
                    link.close()

    def _on_frame(self, link: AcceptedLink, frame: Frame) -> None:
        self.requests_received += 1
        received = self._clock()
        try:
            request = decode_request(frame)
            message = parse_request(request)
        except RpcDecodeError as exc:
            # FATAL answers go out even for requests without a timeout, as in Java.
            link.send(exc.answer())
            return
        call = asyncio.get_running_loop().create_task(self._call(link, request, message, received))
        calls = link.calls
        calls.add(call)
        call.add_done_callback(functools.partial(self._call_done, link))
        if len(calls) >= self._max_calls:
            link.room.clear()

    def _call_done(self, link: AcceptedLink, call: asyncio.Task[None]) -> None:
        link.calls.discard(call)
        if len(link.calls) < self._max_calls:
            link.room.set()

    async def _call(self, link: AcceptedLink, request: RpcRequest, message: Message, received: float) -> None:
        version = request.protocol_ver
        ctx = CallContext(
            peer=link.peer,
            serial=request.serial,
            service=request.service_type,
            protocol_version=version,
            timeout=request.timeout_ms / 1000.0,
            received_at=received,
            tls=self._ssl is not None,
        )
        serial = request.serial
        if self._stopping:
            name = java_class_name(STOPPING_EXCEPTION, version)
            self._answer(link, ctx, encode_exception(serial, STATUS_ERROR, name, "service is stopping..."))
        try:
            check_service(request)
        except RpcDecodeError as exc:
            self._answer(link, ctx, exc.answer())
            return
        try:
            response = await self._handler(request.method, message, ctx)
            data = self._encode(request, response)
        except RemoteFault as fault:
            name = java_class_name(fault.exception_name, version)
            data = encode_exception(serial, fault.status, name, fault.message)
        except Exception:
            log.exception(
                "handler failed",
                extra={"server": self.name, "method": request.method, "peer": str(link.peer)},
            )
            data = encode_exception(serial, STATUS_ERROR, _INVOCATION_EXCEPTION, "")
        self._answer(link, ctx, data)
        if link.writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER and not link.closed:
            try:
                await link.writer.drain()
            except OSError:
                link.close()

    @staticmethod
    def _encode(request: RpcRequest, response: Message) -> bytes:
        expected = METHODS[request.method].response_type
        if type(response) is not expected:
            raise TypeError(
                f"handler answered method {request.method} with {type(response).__name__}, "
                f"expected {expected.__name__}"
            )
        return encode_response(request.serial, request.method, response)

    def _answer(self, link: AcceptedLink, ctx: CallContext, data: bytes) -> None:
        # Java drops an answer once the request's own timeout has passed (>=), so timeout 0 never answers.
        if self._clock() - ctx.received_at >= ctx.timeout:
            log.debug(
                "dropping an answer: the request timed out",
                extra={"server": self.name, "serial": ctx.serial, "peer": str(ctx.peer)},
            )
            return
        link.send(data)
