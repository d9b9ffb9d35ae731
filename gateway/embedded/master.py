"""The embedded TubeMQ master: answers producer and consumer master calls as the real ``TMaster`` does.

    master = EmbeddedMaster([broker1, broker2], port=0)
    await master.start()          # master.address is now host:port
    ...
    await master.stop()

Brokers are read in-process (``BrokerView``: id, address, topics, serving or not). Producers (methods 1-3) get
the broker list, checksum and per-topic partition info; server-balanced consumers (4-6) get partitions through
rebalance events computed by a background balancer (first round after ``balance_delay`` seconds, then every
``balance_period`` seconds); client-balanced consumers (20-22) get broker lists and partition metadata.
A ``standby`` master validates the fields of each call and then answers with the RPC exception
``StandbyException`` (§7.7). Broker-to-master calls (methods 7-9) are not served: embedded brokers are known
in-process, so such a call gets an RPC ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl as _ssl
import time
from collections.abc import Callable, Sequence

from google.protobuf.message import Message

from gateway.embedded.auth import ServerAuth, refusal
from gateway.embedded.balancer import Balancer
from gateway.embedded.consumer_groups import ConsumerRegistry
from gateway.embedded.listen import StartServer, tcp_server
from gateway.embedded.master_common import (
    DEFAULT_MAX_MSG_SIZE,
    STANDBY_EXCEPTION,
    BrokerDirectory,
    BrokerView,
    MasterState,
    NotMaster,
    wall_ms,
)
from gateway.embedded.master_consumers import ConsumerCalls
from gateway.embedded.master_producers import ProducerCalls, ProducerRegistry
from gateway.embedded.server import CallContext, RemoteFault, RpcServer
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR
from gateway.tubemq.wire.pb import MasterService_pb2 as pb
from gateway.tubemq.wire.rpc import METHODS

__all__ = ["BrokerView", "EmbeddedMaster"]

log = logging.getLogger(__name__)

_UNSUPPORTED = "java.lang.UnsupportedOperationException"


class EmbeddedMaster:
    """A TubeMQ-compatible master on ``host:port`` (0 picks a free port) over in-process brokers.

    Timing (seconds): ``producer_timeout`` / ``consumer_timeout`` of silence before a client is released;
    ``balance_delay`` before the first balance round and ``balance_period`` between rounds;
    ``meta_refresh_period`` before a client-balanced consumer's partition metadata is pushed again.
    ``max_msg_size`` (bytes) is handed to producers. ``rng`` drives the balancer's random placement.
    ``auth`` turns on client authentication (``embedded.auth``: 415 answers as the real master gives).
    """

    def __init__(
        self,
        brokers: Sequence[BrokerView],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        standby: bool = False,
        producer_timeout: float = 30.0,
        consumer_timeout: float = 30.0,
        balance_delay: float = 0.0,
        balance_period: float = 1.0,
        meta_refresh_period: float = 180.0,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        ssl: _ssl.SSLContext | None = None,
        auth: ServerAuth | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        clock_ms: Callable[[], int] = wall_ms,
        start_server: StartServer = tcp_server,
    ) -> None:
        if balance_period <= 0:
            raise ValueError(f"balance_period must be > 0 seconds, got {balance_period}")
        self._state = MasterState(
            BrokerDirectory(brokers, clock_ms), standby=standby, max_msg_size=max_msg_size, clock_ms=clock_ms
        )
        self._state.address = NodeAddress(host, port)
        self._auth = auth
        self._server = RpcServer(self.handle, host, port, ssl=ssl, name="master", start_server=start_server)
        self.producers = ProducerRegistry(producer_timeout, clock)
        self.consumers = ConsumerRegistry(consumer_timeout, clock)
        self.balancer = Balancer(self.consumers, self._state.directory.subscribable, rng=rng)
        self._producer_calls = ProducerCalls(self._state, self.producers)
        self._consumer_calls = ConsumerCalls(
            self._state, self.consumers, meta_refresh_period=meta_refresh_period, clock_ms=clock_ms
        )
        self._balance_delay = balance_delay
        self._balance_period = balance_period
        self._balance_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        role = "standby" if self.standby else "active"
        running = "running" if self._balance_task is not None else "stopped"
        return (
            f"<EmbeddedMaster {self.address} {role} {running} producers={len(self.producers.producers)} "
            f"groups={len(self.consumers.groups)} rounds={self.balancer.rounds}>"
        )

    @property
    def address(self) -> NodeAddress:
        return self._state.address

    @property
    def standby(self) -> bool:
        return self._state.standby

    @standby.setter
    def standby(self, value: bool) -> None:
        self._state.standby = value

    @property
    def brokers(self) -> list[BrokerView]:
        return self._state.directory.brokers

    @property
    def broker_checksum(self) -> int:
        return self._state.directory.checksum()

    @property
    def visit_token(self) -> int:
        return self._state.visit_token

    async def start(self) -> None:
        await self._server.start()
        self._state.address = self._server.address
        self._balance_task = asyncio.get_running_loop().create_task(self._balance_loop())

    async def stop(self) -> None:
        task, self._balance_task = self._balance_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._server.stop()

    async def __aenter__(self) -> EmbeddedMaster:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def balance_now(self) -> int:
        """Run one balance round at once (expiring silent consumers first); returns its rebalanceId."""
        for node in self.consumers.expire():
            log.info(
                "embedded master dropped a silent consumer",
                extra={"master": str(self.address), "consumer_id": node},
            )
        rebalance_id = self.balancer.run_round()
        self._consumer_calls.refresh_client_balance_groups()
        return rebalance_id

    async def _balance_loop(self) -> None:
        await asyncio.sleep(self._balance_delay)
        while True:
            try:
                self.balance_now()
            except Exception:
                log.exception("master %s: balance round failed", self.address)
            await asyncio.sleep(self._balance_period)

    async def handle(self, method: int, request: Message, ctx: CallContext) -> Message:
        """The RPC handler: one master call in, its response out (or ``RemoteFault``)."""
        if self._auth is not None:
            refused = self._auth.check_master_call(method, request)
            if refused is not None:
                return refusal(METHODS[method].response_type(), refused)
        try:
            return self._dispatch(method, request, ctx.tls)
        except NotMaster as exc:
            raise RemoteFault(STATUS_ERROR, STANDBY_EXCEPTION, str(exc)) from None

    def _dispatch(self, method: int, request: Message, tls: bool) -> Message:
        producers, consumers = self._producer_calls, self._consumer_calls
        if isinstance(request, pb.RegisterRequestP2M):
            return producers.register(request, tls)
        if isinstance(request, pb.HeartRequestP2M):
            return producers.heartbeat(request, tls)
        if isinstance(request, pb.CloseRequestP2M):
            return producers.close(request)
        if isinstance(request, pb.RegisterRequestC2M):
            return consumers.register(request, tls)
        if isinstance(request, pb.HeartRequestC2M):
            return consumers.heartbeat(request)
        if isinstance(request, pb.CloseRequestC2M):
            return consumers.close(request)
        if isinstance(request, pb.RegisterRequestC2MV2):
            return consumers.register_v2(request, tls)
        if isinstance(request, pb.HeartRequestC2MV2):
            return consumers.heartbeat_v2(request, tls)
        if isinstance(request, pb.GetPartMetaRequestC2M):
            return consumers.part_meta(request, tls)
        raise RemoteFault(
            STATUS_ERROR,
            _UNSUPPORTED,
            f"method {method} is not served by the embedded master (its brokers are known in-process)",
        )
