"""A TCP proxy for resilience tests: forwards bytes to a target and misbehaves on demand.

``cut()`` resets every current link (both sides), ``stall()`` holds all bytes in both directions until
``resume()``, ``swallow()`` silently drops every byte of the current links from now on (a black-holed
path: the links stay open, new links flow), ``corrupt_next()`` scrambles the next chunk sent towards the
client, and ``refuse`` makes new links close right after they are accepted. Runs on the test's own event loop.

Also home of ``EchoHandler``, the small RpcServer handler the connection, pool and server tests share.
"""

from __future__ import annotations

import asyncio
import contextlib

from google.protobuf.message import Message

from gateway.embedded.server import CallContext, RemoteFault
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR
from gateway.tubemq.wire.pb.MasterService_pb2 import HeartRequestP2M, HeartResponseM2P


class _Pair:
    """One proxied link: the accepted client side, the upstream side and the two pumps between them."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.pumps: list[asyncio.Task[None]] = []
        self.swallow = False

    def abort(self) -> None:
        self.client.transport.abort()
        self.upstream.transport.abort()
        for pump in self.pumps:
            if pump is not asyncio.current_task():
                pump.cancel()


class FaultProxy:
    def __init__(self, target: NodeAddress, host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.port = 0
        self.refuse = False
        self.links_accepted = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[_Pair] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._corrupt_down = 0

    def __repr__(self) -> str:
        state = "stalled" if not self._flowing.is_set() else "flowing"
        return f"<FaultProxy :{self.port} -> {self.target} {state} links={len(self._pairs)}>"

    @property
    def address(self) -> NodeAddress:
        return NodeAddress(self.host, self.port)

    @property
    def links(self) -> int:
        return len(self._pairs)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._tasks:
            await asyncio.wait(self._tasks)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def cut(self) -> None:
        """Reset every current link, as a network failure would."""
        for pair in list(self._pairs):
            pair.abort()
        self._pairs.clear()

    def stall(self) -> None:
        """Hold all bytes in both directions (the links stay open)."""
        self._flowing.clear()

    def swallow(self) -> None:
        """Drop every byte of the current links from now on, in both directions; new links flow."""
        for pair in self._pairs:
            pair.swallow = True

    def resume(self) -> None:
        self._flowing.set()

    def corrupt_next(self, chunks: int = 1) -> None:
        """Scramble the next ``chunks`` chunks forwarded towards the client."""
        self._corrupt_down += chunks

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            self.links_accepted += 1
            if self.refuse:
                writer.transport.abort()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
            except OSError:
                writer.transport.abort()
                return
            pair = _Pair(writer, up_writer)
            self._pairs.add(pair)
            loop = asyncio.get_running_loop()
            pair.pumps = [
                loop.create_task(self._pump(reader, up_writer, pair, downstream=False)),
                loop.create_task(self._pump(up_reader, writer, pair, downstream=True)),
            ]
            await asyncio.wait(pair.pumps)
            self._pairs.discard(pair)
            pair.abort()
        finally:
            self._tasks.discard(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, pair: _Pair, *, downstream: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while True:
                data = await source.read(65536)
                if not data:
                    break
                await self._flowing.wait()
                if pair.swallow:
                    continue
                if downstream and self._corrupt_down > 0:
                    self._corrupt_down -= 1
                    data = bytes(b ^ 0x5A for b in data)
                sink.write(data)
                await sink.drain()
        # One side ended: end the other pump too, so the proxied link closes as a whole.
        pair.abort()


# --- a small RpcServer handler shared by the connection, pool and server tests ------------------------


class EchoHandler:
    """Answers the producer heartbeat (method 2) with a HeartResponseM2P echoing ``clientId``.

    ``topicList`` entries steer it: ``delay:<seconds>`` sleeps first, ``fault:<name>`` raises a
    ``RemoteFault`` (ERROR) with that Java class name, ``crash`` raises a plain exception.
    ``calls`` counts handled requests; ``contexts`` keeps the last call's context.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.last_context: CallContext | None = None

    async def __call__(self, method: int, request: Message, ctx: CallContext) -> Message:
        self.calls += 1
        self.last_context = ctx
        assert isinstance(request, HeartRequestP2M)
        for item in request.topicList:
            kind, _, arg = item.partition(":")
            if kind == "delay":
                await asyncio.sleep(float(arg))
            elif kind == "fault":
                raise RemoteFault(STATUS_ERROR, arg, f"fault {arg} requested")
            elif kind == "crash":
                raise RuntimeError("handler crashed on purpose")
        return HeartResponseM2P(
            success=True, errCode=200, errMsg="OK!", brokerCheckSum=-1, topicInfos=[request.clientId]
        )


def heartbeat(client_id: str, *steer: str) -> HeartRequestP2M:
    """A producer heartbeat request; ``steer`` items go into topicList (see EchoHandler)."""
    return HeartRequestP2M(clientId=client_id, brokerCheckSum=-1, hostName="127.0.0.1", topicList=steer)
