"""Connections to TubeMQ nodes, shared by everyone holding the same pool and keyed by node address.

The shape follows httpcore's pool: every decision (which link serves a request, when to open one,
when a node fails fast, which links are reclaimed) is made by a synchronous method that never awaits,
so it runs atomically on the event loop; sockets are opened and closed only after it returns.
Connections merely answer questions (``in_flight``, ``is_idle``, ``is_closed``).

* ``connections_per_node`` links per node (default 1, TubeMQ multiplexes); a request takes the least
  loaded one, and a further link is opened in the background while every link is busy.
* Links open lazily (``connect_timeout`` seconds); concurrent requests share one attempt. After a failed
  attempt the node fails fast with ``ConnectError`` until the backoff delay has passed.
* A link with nothing in flight and no traffic for ``idle_timeout`` seconds is closed by a sweeper
  running every ``min(idle_timeout / 4, 20)`` seconds (the C++ client's 3-minute rule, §7.8).
* A broken link is dropped and replaced on next use; the pool never resends a request itself.

One pool per process is the norm: the runtime builds it and passes it around.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
import time
from collections.abc import Callable, Iterable, Sequence

from google.protobuf.message import Message

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import ClientClosed, ConnectError, RequestTimeout
from gateway.tubemq.events import Event, EventBus
from gateway.tubemq.net.backoff import Backoff, ExponentialBackoff
from gateway.tubemq.net.connection import AnswersDecoder, Connection
from gateway.tubemq.net.link import CloseReason, Connector
from gateway.tubemq.net.pool_state import (
    NodeLinks,
    Plan,
    PoolConnectFailed,
    PoolLinkOpened,
    PoolLinkReclaimed,
    PoolStats,
    pool_stats,
)
from gateway.tubemq.wire.auth import Credentials

__all__ = ["ConnectionPool"]


class ConnectionPool:
    """Links to TubeMQ nodes keyed by ``NodeAddress``. Times are seconds.

    ``ssl`` makes every link TLS (masters and brokers alike: a TubeMQ cluster serves TLS on separate
    ports, and a master reached over TLS lists its brokers' TLS ports); ``server_hostname`` is the name
    their certificates must carry when the context checks host names (default: each node's host).
    ``credentials`` is the identity the clients on this pool present to masters and brokers (the pool
    only carries it: ``MasterClient`` and the broker request builders use it). Java's session factory
    holds its TLS and authentication settings the same way, for every producer and consumer it makes.
    ``backoff.compute(failures)`` gives the fail-fast period after ``failures`` consecutive connect
    failures; ``clock`` returns monotonic seconds (injectable for tests). ``connector`` opens each link's
    stream (default: a TCP socket; :class:`~gateway.tubemq.net.memory.MemoryNetwork` keeps it in memory).
    """

    def __init__(
        self,
        *,
        connections_per_node: int = 1,
        idle_timeout: float = 180.0,
        connect_timeout: float = 3.0,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        credentials: Credentials | None = None,
        events: EventBus | None = None,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        connector: Connector | None = None,
    ) -> None:
        if connections_per_node < 1:
            raise ValueError(f"connections_per_node must be >= 1, got {connections_per_node}")
        if idle_timeout <= 0 or connect_timeout <= 0:
            raise ValueError(
                "idle_timeout and connect_timeout must be > 0 seconds, "
                f"got {idle_timeout} and {connect_timeout}"
            )
        self.connections_per_node = connections_per_node
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.sweep_interval = min(idle_timeout / 4, 20.0)
        self._ssl = ssl
        self._server_hostname = server_hostname
        self.credentials = credentials
        self._events = events
        self._backoff: Backoff = backoff or ExponentialBackoff(base=0.1, cap=10.0)
        self._clock = clock
        self._connector = connector
        self._nodes: dict[NodeAddress, NodeLinks] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._idle_reclaims = 0
        self._connect_failures = 0
        self._retired_unknown_answers = 0

    @property
    def tls(self) -> bool:
        """Whether links use TLS (so master answers list brokers' TLS ports, blank meaning 8124)."""
        return self._ssl is not None

    def __repr__(self) -> str:
        links = sum(len(n.links) for n in self._nodes.values())
        in_flight = sum(c.in_flight for n in self._nodes.values() for c in n.links)
        state = " closed" if self._closed else ""
        return (
            f"<ConnectionPool{state} nodes={len(self._nodes)} links={links} in_flight={in_flight} "
            f"per_node={self.connections_per_node} idle_timeout={self.idle_timeout:g}s>"
        )

    # --- public API ----------------------------------------------------------------------------------

    async def request(
        self,
        address: NodeAddress,
        method: int,
        request: Message | bytes,
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
    ) -> Message:
        """Send one request to ``address`` over a pooled link; ``timeout`` (seconds) covers connecting too.

        Raises what ``Connection.request`` raises, plus ``ConnectError`` (including fail-fast during the
        backoff period) and ``ClientClosed`` once the pool is closed.
        """
        answer = await self.request_decoded(address, method, request, timeout, service)
        assert isinstance(answer, Message)
        return answer

    async def request_decoded(
        self,
        address: NodeAddress,
        method: int,
        request: Message | bytes,
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
        decode: AnswersDecoder | None = None,
    ) -> object:
        """``request`` with its answer read by ``decode`` when given (``Connection.request_decoded``)."""
        plan = self._assign(address, self._clock())
        link = plan.link
        if link is None:  # to connect first (or to fail fast)
            link, timeout = await self._link_within(address, method, timeout, plan)
        return await link.request_decoded(method, request, timeout, service, decode)

    async def request_many(
        self,
        address: NodeAddress,
        method: int,
        requests: Sequence[Message | bytes],
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
        decode: AnswersDecoder | None = None,
    ) -> list[object]:
        """``request`` for several requests to one node, written together over one pooled link: returns each
        one's response (or what ``decode`` read of it) or error in order (``Connection.request_many``).
        Raises, for the whole batch, what keeps it from being sent: ``ConnectError``, ``RequestTimeout``
        while connecting, ``ClientClosed``.
        """
        link, remaining = await self._link_within(address, method, timeout)
        return await link.request_many(method, requests, remaining, service, decode)

    def preconnect(self, addresses: Iterable[NodeAddress]) -> None:
        """Start opening links to ``addresses`` in the background (nodes in backoff are skipped)."""
        self._check_open()
        self._ensure_sweeper()
        now = self._clock()
        for address in addresses:
            node = self._node(address)
            self._prune(node)
            if not node.links and node.connecting is None and now >= node.retry_at:
                self._start_connect(node)

    def stats(self) -> PoolStats:
        totals = (self._idle_reclaims, self._connect_failures, self._retired_unknown_answers)
        return pool_stats(self._nodes.values(), *totals)

    def links(self, address: NodeAddress) -> list[Connection]:
        """The open links to ``address`` (for inspection; do not close them)."""
        node = self._nodes.get(address)
        return [c for c in node.links if not c.is_closed] if node is not None else []

    async def close(self) -> None:
        """Close every link; pending requests fail with ConnectionClosed, later ones with ClientClosed."""
        if self._closed:
            return
        self._closed = True
        waits: list[asyncio.Task[None] | asyncio.Task[Connection]] = []
        if self._sweeper is not None:
            self._sweeper.cancel()
            waits.append(self._sweeper)
        links: list[Connection] = []
        for node in self._nodes.values():
            if node.connecting is not None:
                node.connecting.cancel()
                waits.append(node.connecting)
            links.extend(node.links)
        self._nodes.clear()
        for link in links:
            link.begin_close(CloseReason.LOCAL)
        await asyncio.gather(*(link.wait_closed() for link in links))
        if waits:
            await asyncio.wait(waits)

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # --- decisions (synchronous: never await in here) -------------------------------------------------

    def _node(self, address: NodeAddress) -> NodeLinks:
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = NodeLinks(address)
        return node

    def _prune(self, node: NodeLinks) -> None:
        """Forget links that closed on their own (peer gone, garbage, IOException answer)."""
        for link in node.links:  # a plain loop: this runs on every request
            if link.is_closed:
                break
        else:
            return
        for link in node.links:
            if link.is_closed:
                self._retired_unknown_answers += link.unknown_answers
        node.links = [c for c in node.links if not c.is_closed]

    def _assign(self, address: NodeAddress, now: float) -> Plan:
        self._check_open()
        self._ensure_sweeper()
        node = self._node(address)
        self._prune(node)
        if node.links:
            best = node.links[0] if len(node.links) == 1 else min(node.links, key=_load)
            if (
                best.in_flight
                and node.connecting is None
                and len(node.links) < self.connections_per_node
                and now >= node.retry_at
            ):
                self._start_connect(node)
            return Plan(link=best)
        if node.connecting is not None:
            return Plan(connect=node.connecting)
        if now < node.retry_at:
            return Plan(
                error=ConnectError(
                    f"cannot connect to {address}: {node.failures} failed attempt(s), last: "
                    f"{node.last_error}; next attempt in {node.retry_at - now:.2f}s"
                )
            )
        return Plan(connect=self._start_connect(node))

    def _collect_idle(self, now: float) -> list[Connection]:
        """Begin closing idle links, forget closed ones and empty nodes; return links to wait for."""
        reclaimed: list[Connection] = []
        for address, node in list(self._nodes.items()):
            self._prune(node)
            keep: list[Connection] = []
            for link in node.links:
                if link.is_idle(now, self.idle_timeout):
                    idle_for = now - max(link.idle_since or now, link.last_activity)
                    self._retired_unknown_answers += link.unknown_answers
                    link.begin_close(CloseReason.IDLE)
                    reclaimed.append(link)
                    self._idle_reclaims += 1
                    self._emit(PoolLinkReclaimed(address, idle_for))
                else:
                    keep.append(link)
            node.links = keep
            # A node that failed is remembered a while longer, so its backoff keeps growing.
            if not keep and node.connecting is None and now >= node.retry_at + self.idle_timeout:
                del self._nodes[address]
        return reclaimed

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the connection pool is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(f"{self!r} is bound to another event loop; use one pool per loop")

    # --- I/O -----------------------------------------------------------------------------------------

    async def _link_within(
        self,
        address: NodeAddress,
        method: int,
        timeout: float,  # noqa: ASYNC109 - what remains of it goes on the wire
        plan: Plan | None = None,
    ) -> tuple[Connection, float]:
        """A link to ``address`` and the seconds of ``timeout`` left once it is there (``plan``: the
        decision ``_assign`` just made for it, when the caller asked already)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        link = await self._acquire(address, timeout, plan)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RequestTimeout(f"no time left to send method {method} to {address} after connecting")
        return link, remaining

    async def _acquire(self, address: NodeAddress, within: float, plan: Plan | None = None) -> Connection:
        if plan is None:
            plan = self._assign(address, self._clock())
        if plan.link is not None:
            return plan.link
        if plan.error is not None:
            raise plan.error
        attempt = plan.connect
        assert attempt is not None
        try:
            async with asyncio.timeout(within):
                # Shielded: one waiter giving up must not abort the attempt the others share.
                return await asyncio.shield(attempt)
        except TimeoutError:
            raise RequestTimeout(f"still connecting to {address} after {within:g}s") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if attempt.cancelled() and task is not None and not task.cancelling():
                # close() cancelled the shared attempt; this waiter itself was not cancelled.
                raise ClientClosed("the connection pool was closed while connecting") from None
            raise

    def _start_connect(self, node: NodeLinks) -> asyncio.Task[Connection]:
        task = asyncio.get_running_loop().create_task(self._open(node), name=f"tubemq-connect-{node.address}")
        node.connecting = task
        # Background attempts may have no waiter; their failure is recorded on the node instead.
        task.add_done_callback(_consume_outcome)
        return task

    async def _open(self, node: NodeLinks) -> Connection:
        link = Connection(
            node.address,
            ssl=self._ssl,
            server_hostname=self._server_hostname,
            events=self._events,
            clock=self._clock,
            connector=self._connector,
        )
        try:
            await link.connect(self.connect_timeout)
        except ConnectError as exc:
            self._connect_failed(node, exc)
            raise
        finally:
            node.connecting = None
        if self._closed:
            await link.close()
            raise ClientClosed("the connection pool is closed")
        node.failures = 0
        node.retry_at = 0.0
        self._nodes.setdefault(node.address, node).links.append(link)
        self._emit(PoolLinkOpened(node.address, len(node.links)))
        return link

    def _connect_failed(self, node: NodeLinks, exc: ConnectError) -> None:
        node.failures += 1
        self._connect_failures += 1
        delay = self._backoff.compute(node.failures)
        node.retry_at = self._clock() + delay
        cause = exc.__cause__
        if isinstance(cause, TimeoutError):
            node.last_error = f"timed out after {self.connect_timeout:g}s"
        elif cause is not None:
            node.last_error = f"{type(cause).__name__}: {cause}"
        else:
            node.last_error = str(exc)
        self._emit(PoolConnectFailed(node.address, node.failures, delay, node.last_error))

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="tubemq-pool-sweeper")

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval)
            reclaimed = self._collect_idle(self._clock())
            if reclaimed:
                await asyncio.gather(*(link.wait_closed() for link in reclaimed))

    def _emit(self, event: Event) -> None:
        if self._events is not None:
            self._events.emit(event)


def _load(link: Connection) -> int:
    return link.in_flight


def _consume_outcome(task: asyncio.Task[Connection]) -> None:
    if not task.cancelled():
        task.exception()
