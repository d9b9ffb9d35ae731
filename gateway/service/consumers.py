"""Consumer instances for remote clients: create, poll, commit, delete, and expiry of idle instances.

Framework-free; the REST adapter (``gateway/api/routes_consumers.py``) and the gRPC one
(``gateway/grpc/consuming.py``) parse requests and call one method here. Every instance is a member of its
TubeMQ consumer group (a core :class:`Consumer`) living in this replica; its id names the replica
(:mod:`gateway.service.instance_id`) so that another replica can forward requests to it.
:meth:`ConsumerService.locate` tells the adapter which replica owns an id. A replica of several worker
processes (``serve --workers N``) runs one service per worker; its ids also name the owning worker, and
``locate`` tells a sibling worker's instance apart from another replica's (:class:`Owner`).

Errors (``gateway.service.errors``): a malformed id or an id of another group -> NotFound; an id this replica
issued but no longer knows (deleted, expired, or the replica restarted) -> Gone, telling the client to create
a new instance; bad parameters -> InvalidInput naming the field (a body field by its JSON name, a call
parameter by this service's parameter name, which each adapter renames to its own); too many instances or no
master -> Unavailable; a topic the caller may not consume in the group -> PermissionDenied.

Ownership: an instance belongs to the principal that created it (``current_principal()`` at create). For
any other principal it does not exist: NotFound, the same answer as for an id that was never issued (also
after the instance closed), so ids cannot be probed across principals.

An instance not used for ``lease`` seconds (no request in flight, none started) is closed: its partitions go
back to the group and whatever it delivered without a commit is redelivered.

The service is composed of collaborators, one job each, sharing one
:class:`~gateway.service.consumer_types.Registry` of this process's instances: an
:class:`~gateway.service.instance_lookup.InstanceLookup` (ids to owners and local instances),
:class:`~gateway.service.instance_operations.InstanceOperations` (commit, nack, deadlines, seek, describe,
stream) and :class:`~gateway.service.instance_leases.Leases` (closing instances, the lease reaper);
:mod:`.instance_config` checks a new instance's settings. This module runs the life cycle, create, poll
and delete, and answers for its collaborators.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from gateway.observability import tracing
from gateway.service.access import ALLOW_ALL, AccessPolicy, check_consuming
from gateway.service.admission import Admission
from gateway.service.consume_limits import DEFAULT_PREFETCH_BYTES, DEFAULT_WORKER_PREFETCH_BYTES, PollLimits
from gateway.service.consumer_types import InstanceInfo, InstanceState, Owner, Registry
from gateway.service.core_errors import OUTAGE_RETRY_AFTER, Doing, service_error
from gateway.service.delivered import CommitResult, DeadlineResult, NackResult
from gateway.service.delivery import Delivery
from gateway.service.errors import InvalidInput, Unavailable
from gateway.service.instance import ConsumerInstance
from gateway.service.instance_config import instance_config
from gateway.service.instance_id import (
    new_instance_id,
    normalize_base_url,
    redact,
)
from gateway.service.instance_leases import Leases
from gateway.service.instance_lookup import InstanceLookup
from gateway.service.instance_operations import InstanceOperations
from gateway.service.instance_spec import InstanceSpec
from gateway.service.names import validate_group
from gateway.service.outages import PartitionOutages
from gateway.service.peers import PeerPolicy
from gateway.service.prefetch import FetchAhead
from gateway.service.prefetch_budget import PrefetchBudget
from gateway.service.principal import current_principal
from gateway.service.quotas import Quotas
from gateway.service.redelivery import RedeliveryPolicy, Republisher
from gateway.service.redelivery_checks import check_redelivery, create_in_tubemq, ensure_redelivery_topics
from gateway.service.retry_admission import RetryAdmission
from gateway.service.retry_signature import OPEN_MODE_SECRET, RetrySigner
from gateway.service.seek import SeekOrder, SeekResult
from gateway.service.seek_admission import SeekAdmission
from gateway.service.stream_cursor import StreamCursor
from gateway.tubemq import errors as core
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer import (
    Consumer,
    ConsumerConfig,
    PartitionReleased,
)
from gateway.tubemq.events import EventBus, Subscription
from gateway.tubemq.net import CloseOnce, ConnectionPool, cancel_and_wait

__all__ = [
    "ConsumerService",
    "InstanceInfo",
    "InstanceSpec",
    "InstanceState",
    "Owner",
    "SeekOrder",
    "SeekResult",
]

log = logging.getLogger("gateway.service.consumers")


class ConsumerService:
    """Owns this replica's consumer instances. ``consumer_config`` is the template of every instance's core
    consumer (heartbeat and wait intervals); its start position and bound settings are set per instance.

    Times are seconds: ``lease`` (idle time before an instance is closed), ``commit_timeout`` (a delivered
    batch not committed by then is rolled back), ``assignment_wait`` (how long a new instance's first poll
    waits for partitions), ``reap_interval`` (how often leases and commit timeouts are checked; default
    lease / 4, at most 5 s).

    ``worker`` and ``workers``: this service's worker index and the replica's worker process count when the
    replica runs several (None: one process); ids then name the worker, and an id of a sibling worker is
    located as such.
    """

    def __init__(
        self,
        masters: Sequence[NodeAddress],
        pool: ConnectionPool,
        *,
        advertised_url: str,
        events: EventBus | None = None,
        consumer_config: ConsumerConfig | None = None,
        lease: float = 300.0,
        max_instances: int = 1000,
        commit_timeout: float = 60.0,
        assignment_wait: float = 10.0,
        limits: PollLimits | None = None,
        id_secret: bytes = b"",
        peers: PeerPolicy | None = None,
        reap_interval: float | None = None,
        access: AccessPolicy = ALLOW_ALL,
        clock: Callable[[], float] = time.monotonic,
        quotas: Quotas | None = None,
        worker: int | None = None,
        workers: int = 1,
        republisher: Republisher | None = None,
        max_ack_deadline: float = 600.0,
        max_nack_delay: float = 600.0,
        max_seek_searches: int = 2,
        topic_advice: Callable[[str], str] = create_in_tubemq,
        retry_signer: RetrySigner | None = None,
        max_retries_outstanding: int = 1000,
        admission: Admission | None = None,
        max_inflight_publish_bytes: Callable[[], int] = lambda: 0,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        prefetch_worker_bytes: int = DEFAULT_WORKER_PREFETCH_BYTES,
    ) -> None:
        if worker is not None and not 0 <= worker < workers:
            raise ValueError(f"worker {worker} is not one of the {workers} workers")
        if lease <= 0 or commit_timeout <= 0 or assignment_wait < 0:
            raise ValueError("lease and commit_timeout must be > 0 and assignment_wait >= 0 seconds")
        self._masters = list(masters)
        self._pool = pool
        self.advertised_url = normalize_base_url(advertised_url)
        self._events = events if events is not None else EventBus()
        base = consumer_config or ConsumerConfig()
        # The instance rolls uncommitted batches back itself (and learns of it); the core's own confirm
        # timeout is only a backstop behind it.
        # A batch is held at most: its messages' delivery, an extended deadline, a retried message's delay.
        backstop = 2 * commit_timeout + max_ack_deadline + max_nack_delay + 5
        self._consumer_config = replace(base, confirm_timeout=max(base.confirm_timeout, backstop))
        self._republisher = republisher
        #: how a missing retry or dead-letter topic is created where this gateway runs
        self._topic_advice = topic_advice
        # Retry copies: signed and checked (the runtime's signer comes from the settings:
        # ``retry_secrets``), due within max_nack_delay, a bounded number outstanding per instance.
        self._retry_bounds = RedeliveryPolicy(
            signer=retry_signer or RetrySigner([OPEN_MODE_SECRET.encode()]),
            max_delay=max_nack_delay,
            max_outstanding=max_retries_outstanding,
        )
        self.max_ack_deadline = max_ack_deadline
        self.max_nack_delay = max_nack_delay
        self.max_instances = max_instances
        self.commit_timeout = commit_timeout
        self.assignment_wait = assignment_wait
        #: the longest a seek takes on its owner: a time search (at most 2 RPC timeouts), the batches out
        #: returned, then a broker registration
        self.seek_wait = 4 * self._consumer_config.rpc_timeout
        #: the longest a delete takes on its owner: the auto-commit, the partly committed batches given back
        #: and registered again at their committed heads, then leaving the group (a broker call each)
        self.leave_wait = 4 * self._consumer_config.rpc_timeout
        self.limits = limits or PollLimits()
        #: what each instance, and all of this worker's, may hold fetched ahead of their clients' polls
        self.prefetch_bytes = prefetch_bytes
        self._prefetch_budget = PrefetchBudget(prefetch_worker_bytes)
        self._secret = id_secret
        self.peers = peers if peers is not None else PeerPolicy.build(self.advertised_url)
        self._access = access
        self._clock = clock
        self._quotas = quotas
        #: set by the runtime: tells an outage from an idle topic for an instance without partitions
        self.outages: PartitionOutages | None = None
        self.worker = worker
        self.workers = workers
        #: this replica's gRPC port, named in the ids of its instances (set once the gRPC server is bound;
        #: None: gRPC calls for them cannot be relayed here from another replica)
        self.grpc_port: int | None = None
        self._registry = registry = Registry()
        self._lookup = lookup = InstanceLookup(
            registry,
            advertised_url=self.advertised_url,
            secret=id_secret,
            peers=self.peers,
            worker=worker,
            workers=workers,
        )
        self._operations = InstanceOperations(
            lookup,
            retry_admission=RetryAdmission(quotas, admission, max_inflight_publish_bytes),
            seeks=SeekAdmission(max_seek_searches, self.seek_wait),
            pool=pool,
            rpc_timeout=self._consumer_config.rpc_timeout,
            max_ack_deadline=max_ack_deadline,
            max_nack_delay=max_nack_delay,
        )
        self._leases = Leases(
            registry,
            lease=lease,
            reap_interval=reap_interval if reap_interval is not None else min(max(lease / 4, 0.05), 5.0),
            clock=clock,
            quotas=quotas,
        )
        self._reaper: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self._closing = False
        self._draining = False
        self._closer = CloseOnce(self._close_steps, name="consumer-service-close")

    def __repr__(self) -> str:
        return (
            f"<ConsumerService {self.advertised_url} instances={len(self._registry.instances)}"
            f"/{self.max_instances} lease={self.lease:g}s>"
        )

    @property
    def lease(self) -> float:
        """Seconds an instance may stay idle before it is closed."""
        return self._leases.lease

    @lease.setter
    def lease(self, seconds: float) -> None:
        self._leases.lease = seconds

    @property
    def instance_count(self) -> int:
        return len(self._registry.instances)

    @property
    def prefetch_budget(self) -> PrefetchBudget:
        """What this worker's instances hold fetched and not delivered, and its cap (for the metrics)."""
        return self._prefetch_budget

    @property
    def draining(self) -> bool:
        """Whether the gateway is stopping (:meth:`begin_drain`): polls answer at once, new instances are
        refused."""
        return self._draining

    def held(self) -> list[ConsumerInstance]:
        """The live instances this process holds (any owner): for overviews that filter them by caller."""
        return [i for i in self._registry.instances.values() if not i.closed]

    def now(self) -> float:
        """The service clock's time (what an instance's ``last_used`` is measured on)."""
        return self._clock()

    # --- life cycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the lease reaper and listen for partitions the core consumers give up."""
        self._subscription = self._events.subscribe(self._leases.on_released, PartitionReleased)
        self._reaper = asyncio.create_task(self._leases.reap_loop(), name="consumer-instance-reaper")

    async def close(self) -> None:
        """Close every instance (auto-commit instances commit what they delivered). Safe to call twice and
        safe to cancel: the steps run to their end in a task of their own
        (:mod:`gateway.tubemq.net.teardown`)."""
        self._closing = True
        await self._closer()

    async def _close_steps(self) -> None:
        await cancel_and_wait([self._reaper])
        registry = self._registry
        # Instances whose close was cancelled half-way (a reaper round, a client's deadline) are finished too.
        close = self._leases.close
        instances = [*registry.instances.values(), *registry.closing.values()]
        await asyncio.gather(
            *(close(i, "closed because the gateway stopped", commit=i.auto_commit) for i in instances)
        )
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None

    def begin_drain(self) -> None:
        """The gateway is stopping: open polls answer now with what they have, later ones at once."""
        self._draining = True
        for instance in self._registry.instances.values():
            instance.begin_drain()

    # --- use cases ----------------------------------------------------------------------------------

    async def create(self, group: str, spec: InstanceSpec, *, trusted: bool = False) -> InstanceInfo:
        """Join ``group`` with a new instance; returns once the master accepted it. ``trusted``: the
        operator defined it (a push subscription), so no access rule is checked."""
        validate_group(group)  # before anything is created: the name goes into URLs and headers
        if self._closing:
            raise Unavailable(
                "the gateway is stopping; create the instance on another replica", retry_after=1.0
            )
        registry = self._registry
        if len(registry.instances) + registry.creating >= self.max_instances:
            raise Unavailable(
                f"this gateway holds its maximum of {self.max_instances} consumer instances; delete "
                "unused ones or retry later",
                retry_after=5.0,
            )
        config, max_bytes = instance_config(self._consumer_config, self.limits, spec)
        policy = check_redelivery(
            group, spec, self._republisher is not None, self.max_ack_deadline, self._retry_bounds
        )
        if self._access.enforcing and not trusted:
            check_consuming(
                self._access,
                current_principal(),
                group,
                spec.topics,
                policy.retry_topic,
                policy.dead_letter_topic,
            )
        if self._republisher is not None:
            await ensure_redelivery_topics(self._republisher, policy, self._topic_advice)
        # The caller's own cap (RateLimited), after the request was found valid; an idle instance frees its
        # place at the latest when its lease ends.
        quota_key = self._quotas.claim_instance(min(self.lease, 60.0)) if self._quotas else None
        try:
            instance_id, consumer = await self._join(group, spec, config, max_bytes, policy)
        except BaseException:
            if self._quotas is not None:
                self._quotas.release_instance(quota_key)
            raise
        if quota_key is not None:
            registry.quota_keys[instance_id] = quota_key
        log.info("consumer instance created", extra={"group": group, "instance": redact(instance_id)})
        return InstanceInfo(instance_id, group, self.advertised_url, consumer.client_id, spec.auto_commit)

    async def _join(
        self,
        group: str,
        spec: InstanceSpec,
        config: ConsumerConfig,
        max_bytes: int | None,
        policy: RedeliveryPolicy,
    ) -> tuple[str, Consumer]:
        """Start a core consumer for a new instance and register it once the master accepted it."""
        registry = self._registry
        topics: dict[str, Collection[str] | None] = dict(spec.topics)
        retry_topic = policy.retry_topic
        if retry_topic is not None:
            # This group's retries only (their stream id is the group: the broker filters), from the oldest
            # one the group has not consumed, whatever the start position: none may be skipped.
            topics[retry_topic] = [group]
            config = replace(config, earliest_topics=frozenset({retry_topic}))
        try:
            consumer = Consumer(
                self._masters, group, topics, pool=self._pool, config=config, events=self._events
            )
        except ValueError as exc:
            text = str(exc)
            field = "group" if "group" in text else "filters" if "filter item" in text else "topics"
            raise InvalidInput(text, field=field) from None
        instance_id = new_instance_id(group, self.advertised_url, self._secret, self.worker, self.grpc_port)
        instance = ConsumerInstance(
            instance_id,
            group,
            consumer,
            auto_commit=spec.auto_commit,
            max_bytes=max_bytes,
            commit_timeout=self.commit_timeout,
            assignment_wait=self.assignment_wait,
            owner=current_principal().identity,
            clock=self._clock,
            policy=policy,
            republisher=self._republisher,
            ack_deadline=spec.ack_deadline,
            events=self._events,
            ahead=FetchAhead(self.prefetch_bytes, self._prefetch_budget),
        )
        registry.creating += 1
        registry.by_client[consumer.client_id] = instance
        try:
            await consumer.start()
        except BaseException as exc:
            registry.by_client.pop(consumer.client_id, None)
            with contextlib.suppress(Exception):
                await consumer.close()
            if isinstance(exc, core.TubeMQError):
                raise service_error(exc, Doing.JOIN, group=group) from exc
            raise
        finally:
            registry.creating -= 1
        instance.touch()
        registry.instances[instance_id] = instance
        if self._draining:
            instance.begin_drain()
        if self._closing:
            # close() took its snapshot of the instances while this one was joining its group.
            await self._leases.close(instance, "closed because the gateway stopped")
            raise Unavailable(
                "the gateway is stopping; create the instance on another replica", retry_after=1.0
            )
        return instance_id, consumer

    async def poll(
        self,
        group: str,
        instance_id: str,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a long-poll bound passed on
    ) -> Delivery:
        """Long-poll for messages; see :meth:`ConsumerInstance.poll`. Missing limits take the defaults."""
        instance = self.instance(group, instance_id)
        step = self.limits.step(max_messages, max_bytes, instance.max_bytes)
        wait = self.limits.wait(timeout)
        count, size = step.max_messages, step.max_bytes
        async with self.using(instance):
            if not tracing.enabled():
                delivered = await instance.poll(count, size, wait)
            else:
                attributes = {
                    "messaging.system": "tubemq",
                    "messaging.operation.type": "receive",
                    "messaging.consumer.group.name": group,
                }
                with tracing.span(f"poll {group}", "consumer", attributes) as span:
                    delivered = await instance.poll(count, size, wait)
                    span.set_attribute("messaging.batch.message_count", len(delivered))
        if not delivered:
            outage = await self.outage(instance)
            if outage is not None:
                raise outage
        return delivered

    async def outage(self, instance: ConsumerInstance) -> Unavailable | None:
        """For an instance that lost its partitions and found nothing: the Unavailable error to tell its
        client when its topics' partitions are away (gateway.service.outages), so that it retries instead of
        taking the quiet for an idle topic; None otherwise. A poll raises it; a stream sends it as an event
        (REST) or ends with it (gRPC)."""
        if (
            self.outages is None
            or not self._leases.gave_up_partitions(instance)
            or instance.consumer.assignment()
        ):
            return None
        away = await self.outages.away(instance.consumer.topics)
        if not away:
            return None
        where = ", ".join(f"{t!r} (brokers {list(b)})" for t, b in sorted(away.items()))
        return Unavailable(
            f"no partition of topic {where} can be consumed now: its brokers are offline (stopped or "
            "restarting); the instance keeps its place in the group: poll again after the retry delay (an "
            "open stream resumes by itself)",
            retry_after=OUTAGE_RETRY_AFTER,
        )

    async def delete(self, group: str, instance_id: str) -> None:
        """Leave the group. An auto-commit instance commits what it delivered; anything uncommitted is
        redelivered to the group."""
        instance = self.instance(group, instance_id)
        await self._leases.close(instance, "deleted", commit=instance.auto_commit)

    # --- answered by the collaborators ---------------------------------------------------------------

    def locate(self, group: str, instance_id: str) -> Owner | None:
        """Who owns the instance when this service does not (:meth:`InstanceLookup.locate`)."""
        return self._lookup.locate(group, instance_id)

    def base_url(self, group: str, instance_id: str, public_base: str | None = None) -> str:
        """The instance's URL (:meth:`InstanceLookup.base_url`)."""
        return self._lookup.base_url(group, instance_id, public_base)

    def instance(self, group: str, instance_id: str) -> ConsumerInstance:
        """The local instance of the principal calling (:meth:`InstanceLookup.instance`)."""
        return self._lookup.instance(group, instance_id)

    async def commit(
        self, group: str, instance_id: str, tokens: Sequence[str] | None, *, consumed: bool = True
    ) -> CommitResult:
        """Commit or roll back tokens (:meth:`InstanceOperations.commit`)."""
        return await self._operations.commit(group, instance_id, tokens, consumed=consumed)

    async def nack(
        self, group: str, instance_id: str, tokens: Sequence[str], *, delay: float = 0.0
    ) -> NackResult:
        """Give single messages back (:meth:`InstanceOperations.nack`)."""
        return await self._operations.nack(group, instance_id, tokens, delay=delay)

    def extend_deadlines(
        self, group: str, instance_id: str, tokens: Sequence[str], *, seconds: float
    ) -> DeadlineResult:
        """Move the deadline of delivered messages (:meth:`InstanceOperations.extend_deadlines`)."""
        return self._operations.extend_deadlines(group, instance_id, tokens, seconds=seconds)

    async def seek(self, group: str, instance_id: str, order: SeekOrder) -> list[SeekResult]:
        """Move the group's read position (:meth:`InstanceOperations.seek`)."""
        return await self._operations.seek(group, instance_id, order)

    def open_stream(self, group: str, instance_id: str, resume_after: str | None) -> StreamCursor:
        """A push cursor (:meth:`InstanceOperations.open_stream`); wrap its use in :meth:`using`."""
        return self._operations.open_stream(group, instance_id, resume_after)

    def describe(self, group: str, instance_id: str) -> InstanceState:
        """What the instance holds right now (:meth:`InstanceOperations.describe`)."""
        return self._operations.describe(group, instance_id)

    def using(self, instance: ConsumerInstance) -> contextlib.AbstractAsyncContextManager[ConsumerInstance]:
        """Mark a request in flight, renewing the lease when it ends (:meth:`InstanceOperations.using`)."""
        return self._operations.using(instance)

    async def reap(self) -> None:
        """Close idle instances and roll back overdue batches (:meth:`Leases.reap`)."""
        await self._leases.reap()
