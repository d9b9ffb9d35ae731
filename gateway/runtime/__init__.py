"""The process runtime: one pool, one producer, the embedded cluster when no master is configured.

Built once per process in the app's lifespan and shared by the REST and gRPC adapters. In a worker process
of ``serve --workers N`` (``worker`` set), the embedded cluster is the supervisor's, one for the replica.

The settings checks made before starting live in :mod:`.checks`, the parts built from the settings (the
embedded cluster, the callers' quotas) in :mod:`.builders`; this module re-exports their names, so
``from gateway.runtime import ...`` takes any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.observability import tracing
from gateway.runtime.builders import (
    build_quotas,
    embedded_cluster,
    embedded_topic_advice,
    embedded_topic_specs,
    embedded_upstream,
    replica_subjects,
)
from gateway.runtime.checks import (
    ConfigurationError,
    check_advertised_url,
    consumer_id_secret,
    peer_policy,
    retry_secrets,
)
from gateway.security.replica_subject import ReplicaSubjects
from gateway.security.setup import Security, build_security, check_override_names
from gateway.service.admission import Admission
from gateway.service.consume_limits import PollLimits
from gateway.service.consumers import ConsumerService
from gateway.service.errors import Unavailable
from gateway.service.group_lag import LagMonitor
from gateway.service.group_lag_reads import GroupLagReads
from gateway.service.group_offsets import GroupOffsetsReader
from gateway.service.idempotency import Idempotency
from gateway.service.idempotency_local import LocalKeys
from gateway.service.idempotency_redis import RedisKeys
from gateway.service.idempotency_store import KeyStore, StoredKeys
from gateway.service.outages import PartitionOutages
from gateway.service.peers import PeerPolicy
from gateway.service.publish import PublishService
from gateway.service.push import PushOptions, PushService
from gateway.service.push_admin import SubscriptionAdmin
from gateway.service.push_outbound import EndpointPolicy
from gateway.service.push_request import Renderer
from gateway.service.push_store import RedisSubscriptions
from gateway.service.push_token import PushTokens
from gateway.service.quotas import Quotas
from gateway.service.ranges import RangeService
from gateway.service.redelivery_checks import create_in_tubemq
from gateway.service.registrations import RegistrationLedger, release_predecessor
from gateway.service.retry_signature import RetrySigner
from gateway.service.shared_spending import EXCHANGE_INTERVAL
from gateway.tubemq.address import NodeAddress, parse_address_list
from gateway.tubemq.consumer import ConsumerConfig
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.events import EventBus
from gateway.tubemq.net import BreakerState, ConnectionPool
from gateway.tubemq.producer import Producer, ProducerConfig
from gateway.tubemq.wire import SPEEDUPS, SPEEDUPS_REASON
from gateway.upstream import refusal_settings, upstream_options
from gateway.workers.context import WorkerContext

__all__ = [
    "ConfigurationError",
    "Runtime",
    "build_quotas",
    "check_advertised_url",
    "consumer_id_secret",
    "embedded_cluster",
    "embedded_upstream",
    "peer_policy",
    "retry_secrets",
]

log = logging.getLogger("gateway.runtime")
_S = TypeVar("_S")


@dataclass
class Runtime:
    """Everything the adapters need; ``start`` and ``stop`` bracket the process lifetime."""

    settings: Settings
    events: EventBus = field(default_factory=EventBus)
    pool: ConnectionPool | None = None
    producer: Producer | None = None
    cluster: EmbeddedCluster | None = None
    publish: PublishService | None = None
    consumers: ConsumerService | None = None
    ranges: RangeService | None = None
    masters: list[NodeAddress] = field(default_factory=list)
    quotas: Quotas | None = None
    #: the served groups' lag from TubeMQ's offsets (None: no master web API to read)
    lag: LagMonitor | None = None
    #: single groups' readings for the lag endpoints, shared for a short while (None: no master web API)
    lag_reads: GroupLagReads | None = None
    draining: bool = False
    #: this process's place among the replica's worker processes (None: the replica is one process)
    worker: WorkerContext | None = None
    #: requests and calls in progress and publish bytes held, HTTP and gRPC together (one per process)
    admission: Admission = field(default_factory=Admission)
    #: authentication and access rules from ``settings.auth``; built with the runtime, so that settings
    #: that cannot work (``SecurityConfigError``) stop the process before it listens
    security: Security = field(init=False)
    #: signs and verifies the client certificate subjects relayed between replicas, once started (one per
    #: process: the nonces it has accepted are this process's)
    replica_subjects: ReplicaSubjects | None = None
    #: the idempotency keys of publishes, shared by the replica's workers (None: starting or stopping)
    idempotency: Idempotency | None = None
    #: the push subscriptions this process runs (None: before :meth:`start_push`, or stopping)
    push: PushService | None = None
    #: the push subscriptions API over :attr:`push` (None: before :meth:`start_push`, or stopping)
    push_admin: SubscriptionAdmin | None = None
    #: signs push subscriptions' JWTs (``push.token_key_file``; None: no key)
    push_tokens: PushTokens | None = None
    _tracing: bool = field(default=False, init=False, repr=False)
    #: a replica of one process: the private directory its idempotency store lives in
    _own_dir: Path | None = field(default=None, init=False, repr=False)
    _ledger: RegistrationLedger | None = field(default=None, init=False, repr=False)
    #: serve --workers N: the task sharing what callers spent of their publish rates with the siblings
    _sharing: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.security = build_security(self.settings.auth)
        check_override_names(self.settings.rate_limits.overrides)

    async def start(self) -> None:
        s = self.settings
        if s.tracing.enabled and not tracing.enabled():
            t = s.tracing
            tracing.configure(exporter=t.exporter, service_name=t.service_name, sample_ratio=t.sample_ratio)
            self._tracing = True
        log.info("per-message loops", extra={"codec": SPEEDUPS, "reason": SPEEDUPS_REASON})
        id_secret = consumer_id_secret(s)
        check_advertised_url(s)
        peers = peer_policy(s)
        self.replica_subjects = replica_subjects(s)
        if peers.enabled:
            log.info("forwarding consumer requests to replicas at", extra={"peers": peers.describe()})
        elif not s.consumers.lone_replica:  # one replica alone has no other to forward to
            log.warning(
                "consumers.forward_allow is empty: requests for another replica's consumer instance are "
                "answered 410; list the replicas' addresses there to forward them"
            )
        try:
            upstream = upstream_options(s.tubemq)
            if s.masters:
                self.masters = parse_address_list(s.masters, upstream.master_port)
            elif self.worker is not None and self.worker.embedded_masters:
                upstream = embedded_upstream(upstream)
                self.masters = parse_address_list(
                    ",".join(self.worker.embedded_masters), upstream.master_port
                )
            else:
                upstream = embedded_upstream(upstream)
                self.cluster = embedded_cluster(s, upstream)
                await self.cluster.start()
                self.masters = list(self.cluster.master_addresses)
                log.info(
                    "no TubeMQ master configured: started the embedded cluster",
                    extra={"master": str(self.masters[0]), "brokers": s.embedded.brokers},
                )
            self.pool = ConnectionPool(
                connections_per_node=s.pool.connections_per_node,
                idle_timeout=s.pool.idle_timeout,
                connect_timeout=s.pool.connect_timeout,
                ssl=upstream.ssl,
                server_hostname=upstream.server_hostname,
                credentials=upstream.credentials,
                events=self.events,
            )
            self.producer = Producer(
                self.masters,
                pool=self.pool,
                config=ProducerConfig(
                    heartbeat_interval=s.producer.heartbeat_interval,
                    rpc_timeout=s.producer.rpc_timeout,
                    send_timeout=s.producer.send_timeout,
                    max_send_attempts=s.producer.max_send_attempts,
                    failure_threshold=s.producer.failure_threshold,
                    failure_window=s.producer.failure_window,
                    failure_cooldown=s.producer.failure_cooldown,
                    unavailable_cooldown=s.producer.unavailable_cooldown,
                    max_shielded_share=s.producer.max_shielded_share,
                    master_failures_before_unready=s.producer.master_failures_before_unready,
                ),
                events=self.events,
            )
            try:
                await self.producer.start()
            except TubeMQError as exc:  # the first call to TubeMQ: where wrong tubemq.* settings show
                settings = refusal_settings(exc)
                if settings is not None:
                    exc.add_note(settings)
                raise
            self.quotas = build_quotas(s, self.worker)
            if self.worker is not None and self.quotas.limits_publish:
                self._sharing = asyncio.create_task(self.quotas.share_spending(EXCHANGE_INTERVAL))
            self.publish = PublishService(
                self.producer,
                max_batch_messages=s.limits.max_batch_messages,
                concurrency=s.limits.publish_concurrency,
                send_timeout=s.producer.send_timeout,
                quotas=self.quotas,
                access=self.security.policy,
            )
            self.idempotency = self._idempotency()
            if self.worker is not None:
                await self._take_over_registrations(self.worker, self.pool, self.producer)
            self.consumers = self._consumer_service(self.pool, id_secret, peers)
            self.consumers.outages = PartitionOutages(
                self.pool, self.masters, rpc_timeout=s.producer.rpc_timeout
            )
            await self.consumers.start()
            self.ranges = RangeService(self.pool, self.masters, access=self.security.policy)
            web = self._master_web()
            if web:
                reader = GroupOffsetsReader(web)
                self.lag = LagMonitor(reader, self.events, interval=s.tubemq.group_lag_interval)
                self.lag.start()
                self.lag_reads = GroupLagReads(
                    reader,
                    ttl=s.tubemq.group_lag_cache_seconds,
                    per_caller_rate=s.tubemq.group_lag_reads_per_second,
                )
        except BaseException:
            await self.stop()
            raise

    async def _take_over_registrations(
        self, worker: WorkerContext, pool: ConnectionPool, producer: Producer
    ) -> None:
        """Release the consumers a dead predecessor of this worker left registered, then keep the ledger
        this process's successor will read (gateway.service.registrations)."""
        path = worker.socket_dir / f"w{worker.index}.consumers.json"
        await release_predecessor(
            path, pool, self.masters, producer.broker_addresses(), visit_token=producer.visit_token
        )
        self._ledger = RegistrationLedger(path, self.events)

    def _idempotency(self) -> Idempotency:
        """The store of the idempotency keys: the Redis of ``idempotency.redis_url``, which every replica
        shares; else a SQLite database in the replica's private directory (the supervisor's with ``serve
        --workers N``, else one of this process), shared by its workers."""
        i = self.settings.idempotency
        store: KeyStore
        if i.redis_url:
            store = RedisKeys(
                i.redis_url,
                password=i.password(),
                prefix=i.redis_prefix,
                max_keys=i.max_keys_per_principal,
                max_principal_bytes=i.max_bytes_per_principal,
                max_bytes=i.max_store_bytes,
                timeout=i.store_timeout,
            )
        else:
            if self.worker is not None:
                directory = self.worker.socket_dir
            else:
                directory = self._own_dir = Path(tempfile.mkdtemp(prefix="tubemq-gateway-idempotency-"))
            store = LocalKeys(
                StoredKeys(
                    directory / "idempotency.sqlite3",
                    max_keys=i.max_keys_per_principal,
                    max_principal_bytes=i.max_bytes_per_principal,
                    max_bytes=i.max_store_bytes,
                    timeout=i.store_timeout,
                )
            )
        return Idempotency(store, self.events, window=i.window_seconds, lease=i.lease_seconds)

    def idempotent(self) -> Idempotency:
        """The idempotency keys; Unavailable while starting or stopping, and when several replicas serve
        (``consumers.replicas`` above 1) without a shared store (``idempotency.redis_url``): this replica's
        own store does not see the others' keys."""
        s = self.settings
        if s.consumers.replicas > 1 and not s.idempotency.redis_url:
            raise Unavailable(
                f"publishing with an Idempotency-Key needs a store all {s.consumers.replicas} replicas "
                "share, and this gateway keeps its keys per replica: set idempotency.redis_url, or publish "
                "without the key",
                retry_after=60.0,
            )
        return _serving(self.idempotency)

    def _consumer_service(self, pool: ConnectionPool, id_secret: bytes, peers: PeerPolicy) -> ConsumerService:
        c = self.settings.consumers
        return ConsumerService(
            self.masters,
            pool,
            advertised_url=self.settings.advertised_url(),
            events=self.events,
            consumer_config=ConsumerConfig(
                heartbeat_interval=c.heartbeat_interval,
                broker_heartbeat_interval=c.heartbeat_interval,
                not_found_wait=c.empty_fetch_wait,
                not_found_max_wait=c.empty_fetch_max_wait,
                rebalance_confirm_wait=c.rebalance_commit_wait,
            ),
            lease=c.lease,
            max_instances=c.max_instances,
            commit_timeout=c.commit_timeout,
            assignment_wait=c.assignment_wait,
            limits=PollLimits(
                max_messages=c.poll_max_messages,
                max_bytes=c.poll_max_bytes,
                timeout=c.poll_timeout,
                max_timeout=c.poll_max_timeout,
            ),
            id_secret=id_secret,
            peers=peers,
            quotas=self.quotas,
            access=self.security.policy,
            worker=None if self.worker is None else self.worker.index,
            workers=1 if self.worker is None else self.worker.count,
            republisher=self.producer,
            max_ack_deadline=c.max_ack_deadline,
            max_nack_delay=c.max_nack_delay,
            max_seek_searches=c.max_seek_searches,
            topic_advice=create_in_tubemq if self.settings.masters else embedded_topic_advice(self.settings),
            retry_signer=RetrySigner(retry_secrets(self.settings)),
            max_retries_outstanding=c.max_retries_outstanding,
            admission=self.admission,
            max_inflight_publish_bytes=lambda: self.settings.limits.max_inflight_publish_bytes,
            prefetch_bytes=c.prefetch_bytes,
            prefetch_worker_bytes=c.prefetch_worker_bytes,
        )

    def _master_web(self) -> list[str]:
        """``host:port`` of the masters' web API (the embedded one's, or each configured master host's
        ``tubemq.master_web_port``); empty: group offsets are not read."""
        if self.cluster is not None:
            return self.cluster.master_web_addresses
        if self.worker is not None and self.worker.embedded_master_web:
            return list(self.worker.embedded_master_web)
        port = self.settings.tubemq.master_web_port
        if not self.settings.masters or not port:
            return []
        return [f"{_bracketed(m.host)}:{port}" for m in self.masters]

    def begin_drain(self) -> None:
        """Graceful shutdown begins: readiness turns false, new consumer instances are refused, and open
        long polls are answered now (with what they have, else 503 + Retry-After) instead of being cut
        off when the grace period runs out."""
        self.draining = True
        if self.consumers is not None:
            self.consumers.begin_drain()

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Ready = not draining, at least one broker usable, and a master reachable - or, while no master
        answers (``master_failures_before_unready`` calls in a row), at least one published topic whose
        cached route still has a usable broker (sends work without a master; a fail-over must not turn
        every replica unready at once); and not while every published topic has been without partitions
        for as many heartbeats in a row (``routesLost``: a broker outage the master reports; ready again at
        the first heartbeat that lists partitions)."""
        producer = self.producer
        reachable = producer is not None and producer.master_reachable
        routes = producer.usable_routes() if producer is not None else 0
        checks: dict[str, object] = {
            "draining": self.draining,
            "auth": self.security.mode,
            "masterSession": reachable,
            "masterFailures": producer.master_failures if producer is not None else 0,
            "usableRoutes": routes,
            "usableBrokers": 0
            if producer is None
            else sum(1 for h in producer.broker_health() if h.state is not BreakerState.OPEN),
        }
        lost = producer is not None and producer.routes_lost
        checks["routesLost"] = lost
        ready = not self.draining and bool(checks["usableBrokers"]) and (reachable or routes > 0) and not lost
        return ready, checks

    def embedded_topics(self) -> list[str]:
        """The embedded cluster's topic names when the gateway runs on one (itself or its supervisor's),
        else none: a real master offers clients no list of topics."""
        if self.settings.masters:
            return []
        return [spec.name for spec in embedded_topic_specs(self.settings)]

    def publisher(self) -> PublishService:
        """The publish service; Unavailable while the runtime is starting or stopping."""
        return _serving(self.publish)

    def consumer_service(self) -> ConsumerService:
        """The consumer service; Unavailable while the runtime is starting or stopping."""
        return _serving(self.consumers)

    def range_service(self) -> RangeService:
        """The exact-range service; Unavailable while the runtime is starting or stopping."""
        return _serving(self.ranges)

    async def start_push(self, render: Renderer) -> None:
        """Start the push subscriptions (``push.*``) once the runtime runs; ``render`` is the REST adapter's
        JSON of one delivered message (a wrapped payload is the poll answer's message object). ValueError
        when the subscriptions file, the token key or ``push.allow`` is wrong."""
        p = self.settings.push
        if self.push is not None:
            return
        if p.token_key_file and self.push_tokens is None:
            issuer = p.token_issuer or self.settings.advertised_url()
            self.push_tokens = PushTokens(Path(p.token_key_file), issuer)
        options = PushOptions(
            subscriptions_file=Path(p.subscriptions_file) if p.subscriptions_file else None,
            reload_interval=p.reload_interval,
            max_subscriptions=p.max_subscriptions,
            max_answer_bytes=p.max_answer_bytes,
            poll_wait=p.poll_wait,
            error_backoff=p.error_backoff,
        )
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=p.ca_file) if p.ca_file else True
        policy = EndpointPolicy.parse(p.allow)
        push = PushService(
            self.consumer_service(),
            policy,
            render,
            options,
            events=self.events,
            verify=verify,
            tokens=self.push_tokens,
        )
        await push.start()
        self.push = push
        # the Redis the replicas share for idempotency keys holds the API's definitions too
        i = self.settings.idempotency
        store = None
        if i.redis_url:
            store = RedisSubscriptions(
                i.redis_url, password=i.password(), prefix=p.redis_prefix, timeout=i.store_timeout
            )
        admin = SubscriptionAdmin(
            push, self.security.policy, policy, store, subscriptions_file=p.subscriptions_file
        )
        await admin.start()
        self.push_admin = admin

    def subscriptions(self) -> SubscriptionAdmin:
        """The push subscriptions API; Unavailable while the runtime is starting or stopping."""
        return _serving(self.push_admin)

    async def stop(self) -> None:
        """Close in reverse order of start; safe to call on a partly started runtime."""
        if self.push_admin is not None:
            await self.push_admin.close()
            self.push_admin = None
        if self.push is not None:  # before the consumers: its runners leave their groups
            await self.push.close()
            self.push = None
        self.ranges = None  # holds no link of its own: its reads end with the pool below
        if self._sharing is not None:
            self._sharing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sharing
            self._sharing = None
        if self.lag_reads is not None:
            await self.lag_reads.close()
            self.lag_reads = None
        if self.lag is not None:
            await self.lag.stop()
            self.lag = None
        if self.consumers is not None:
            await self.consumers.close()
            self.consumers = None
        if self._ledger is not None:  # after the consumers' close: it records them closed
            self._ledger.close()
            self._ledger = None
        if self.producer is not None:
            await self.producer.close()
            self.producer = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.cluster is not None:
            await self.cluster.stop()
            self.cluster = None
        if self.idempotency is not None:
            await self.idempotency.close()
            self.idempotency = None
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
        await self.security.close()
        if self._tracing:
            self._tracing = False
            tracing.shutdown()


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _serving(service: _S | None) -> _S:
    if service is None:
        raise Unavailable("the gateway is starting or stopping; retry shortly", retry_after=1.0)
    return service
