"""A whole TubeMQ-compatible cluster on loopback: N embedded brokers and a master (plus an optional standby).

    async with EmbeddedCluster(parse_topic_specs("demo:4,orders:8"), brokers=2) as cluster:
        client_config.master = ",".join(str(a) for a in cluster.master_addresses)

Brokers get ids 1..N and, with ``data_dir``, keep their data under ``data_dir/broker-<id>``. Tests can stop
and restart a broker (same port, same data) to watch clients react. With ``standby_master`` a second master
that only answers ``StandbyException`` is started and listed first in ``master_addresses``, so a client
following the address list has to fail over (§7.7).
"""

from __future__ import annotations

import random
import ssl as _ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gateway.embedded.auth import ServerAuth
from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.listen import StartServer, tcp_server
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.store import Retention
from gateway.embedded.topics import DEFAULT_MAX_MSG_SIZE, TopicSpec
from gateway.embedded.web import WebApi
from gateway.embedded.web_methods import broker_methods, master_methods
from gateway.tubemq.address import NodeAddress

__all__ = ["EmbeddedCluster"]


class EmbeddedCluster:
    """Brokers 1..``brokers`` each hosting every topic, and a master over them.

    Ports: ``master_port`` and ``broker_ports`` (one per broker); 0 picks free ports. Timing (seconds) and
    size knobs are passed on: ``producer_timeout`` and ``balance_delay`` / ``balance_period`` to the master,
    ``consumer_timeout`` to the master (heartbeat expiry) and to the brokers (registration expiry),
    ``max_msg_size`` (bytes) to both. ``ssl`` makes every node listen with TLS;
    ``auth`` makes the master and brokers authenticate clients (``embedded.auth``); ``fsync`` makes the
    brokers force every append and offsets write to disk (``embedded.fsync``); ``id_clock`` (monotonic
    nanoseconds) is every broker's clock for message ids, which rise and fall with it as on a real broker
    (:mod:`gateway.embedded.msgid`). ``start_server`` is where every node, RPC and web, listens: TCP by
    default, the client core's in-memory network for tests that need no socket
    (:mod:`gateway.embedded.listen`).
    """

    def __init__(
        self,
        topics: Sequence[TopicSpec],
        *,
        brokers: int = 1,
        data_dir: Path | None = None,
        host: str = "127.0.0.1",
        master_port: int = 0,
        broker_ports: Sequence[int] | None = None,
        standby_master: bool = False,
        producer_timeout: float = 30.0,
        consumer_timeout: float = 30.0,
        balance_delay: float = 0.0,
        balance_period: float = 1.0,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        ssl: _ssl.SSLContext | None = None,
        auth: ServerAuth | None = None,
        rng: random.Random | None = None,
        retention: Retention | None = None,
        retention_interval: float = 10.0,
        fsync: bool = False,
        id_clock: Callable[[], int] = time.monotonic_ns,
        start_server: StartServer = tcp_server,
    ) -> None:
        if not topics:
            raise ValueError("an embedded cluster needs at least one topic")
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        ports = list(broker_ports) if broker_ports is not None else [0] * brokers
        if len(ports) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} broker ports, got {len(ports)}")
        self.topics = list(topics)
        self.data_dir = data_dir
        self.brokers = [
            EmbeddedBroker(
                broker_id,
                self.topics,
                host=host,
                port=port,
                data_dir=data_dir / f"broker-{broker_id}" if data_dir is not None else None,
                max_msg_size=max_msg_size,
                consumer_timeout=consumer_timeout,
                ssl=ssl,
                auth=auth,
                retention=retention,
                retention_interval=retention_interval,
                fsync=fsync,
                id_clock=id_clock,
                start_server=start_server,
            )
            for broker_id, port in enumerate(ports, start=1)
        ]
        self.master = EmbeddedMaster(
            self.brokers,
            host=host,
            port=master_port,
            producer_timeout=producer_timeout,
            consumer_timeout=consumer_timeout,
            balance_delay=balance_delay,
            balance_period=balance_period,
            max_msg_size=max_msg_size,
            ssl=ssl,
            auth=auth,
            rng=rng,
            start_server=start_server,
        )
        self.standby: EmbeddedMaster | None = (
            EmbeddedMaster(
                self.brokers,
                host=host,
                standby=True,
                max_msg_size=max_msg_size,
                ssl=ssl,
                auth=auth,
                start_server=start_server,
            )
            if standby_master
            else None
        )
        # the web API (TubeMQ's admin HTTP API, read-only subset): the master's and one per broker
        self.broker_webs = {
            b.broker_id: WebApi(
                broker_methods(b), host, name=f"broker-{b.broker_id}", start_server=start_server
            )
            for b in self.brokers
        }
        self.master_web = WebApi(
            master_methods(lambda: self.master, self.brokers, lambda i: self.broker_webs[i].port),
            host,
            name="master",
            start_server=start_server,
        )
        self._started = False

    def __repr__(self) -> str:
        state = "running" if self._started else "stopped"
        serving = [b.broker_id for b in self.brokers if b.is_serving]
        return (
            f"<EmbeddedCluster {state} master={self.master_address if self._started else '-'} "
            f"brokers={len(self.brokers)} serving={serving} topics={[t.name for t in self.topics]}>"
        )

    @property
    def master_address(self) -> NodeAddress:
        """The active master's address (valid once started)."""
        return self.master.address

    @property
    def master_addresses(self) -> list[NodeAddress]:
        """Every master address, the standby first when there is one."""
        masters = [self.standby, self.master] if self.standby is not None else [self.master]
        return [m.address for m in masters if m is not None]

    @property
    def master_web_addresses(self) -> list[str]:
        """``host:port`` of the master's web API (valid once started)."""
        return [f"{self.master_web.host}:{self.master_web.port}"]

    def broker(self, broker_id: int) -> EmbeddedBroker:
        """Broker ``broker_id`` (1..N)."""
        if not 1 <= broker_id <= len(self.brokers):
            raise IndexError(f"no broker {broker_id}: the cluster has brokers 1..{len(self.brokers)}")
        return self.brokers[broker_id - 1]

    async def start(self) -> None:
        """Start the brokers, then the master(s); on failure whatever started is stopped again."""
        if self._started:
            raise RuntimeError(f"{self!r} is already started")
        self._started = True
        try:
            for broker in self.brokers:
                await broker.start()
            if self.standby is not None:
                await self.standby.start()
            await self.master.start()
            for web in (*self.broker_webs.values(), self.master_web):
                await web.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop the master(s), then the brokers; safe to call twice."""
        self._started = False
        for web in (self.master_web, *self.broker_webs.values()):
            await web.stop()
        for master in (self.master, self.standby):
            if master is not None:
                await master.stop()
        for broker in self.brokers:
            await broker.stop()

    async def stop_broker(self, broker_id: int) -> None:
        """Stop broker ``broker_id``: its partitions leave the master's answers and balancing."""
        await self.broker(broker_id).stop()

    async def start_broker(self, broker_id: int) -> None:
        """Restart broker ``broker_id`` on the port it had, with the data it had."""
        await self.broker(broker_id).start()

    async def __aenter__(self) -> EmbeddedCluster:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()
