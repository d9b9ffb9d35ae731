"""Turn the core's events into metrics: one handler per event type, dispatched by exact class.

State kept here (which links are open, which brokers are shielded, which consumers and partitions are live,
each partition's lag) is what a gauge needs to be set from events; it is keyed by client id and partition
key internally, and only ever exposed summed per bounded label (group, topic, node, broker id).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.observability.grpc_events import GrpcCallFinished, GrpcCallStarted, GrpcStreamMessages
from gateway.observability.histograms import add, observe_many
from gateway.observability.idempotency_events import IdempotencyChecked
from gateway.observability.lag_events import GroupLagGone, GroupLagRead
from gateway.observability.metrics_brokers import PUBLISH_ERROR_REASONS, BrokerMetrics
from gateway.observability.metrics_grpc import GrpcMetrics
from gateway.observability.metrics_lag import GroupLagMetrics
from gateway.observability.metrics_push import PushMetrics
from gateway.observability.push_events import PushDelivered, PushSubscriptionState
from gateway.observability.redelivery_events import RedeliveryCounted
from gateway.tubemq.consumer import (
    INDEX_ENTRY_SIZE,
    ConsumerClosed,
    ConsumerHeartbeatFailed,
    ConsumerRegistered,
    FetchOutcome,
    OffsetCommitted,
    PartitionRegistered,
    PartitionRegisterFailed,
    PartitionReleased,
    RebalanceEvent,
)
from gateway.tubemq.events import EventBus, Subscription
from gateway.tubemq.net import (
    CloseReason,
    ConnectionOpened,
    ConnectionTerminated,
    MasterSwitched,
    Outcome,
    PoolConnectFailed,
    PoolLinkOpened,
    PoolLinkReclaimed,
    RequestCompleted,
    ShieldReason,
)
from gateway.tubemq.producer import (
    BrokerShielded,
    BrokerUnshielded,
    ProducerHeartbeatFailed,
    ProducerRegistered,
    RegisterFailed,
    SendCompleted,
)
from gateway.tubemq.wire import METHODS, Method

if TYPE_CHECKING:
    from gateway.observability.metrics_families import MetricFamilies

__all__ = ["EventMetrics"]

_STORE_PARTITION_BASE = 10000


def _store_of(partition_key: str) -> tuple[str, int]:
    """(broker id, store index) of ``brokerId:topic:partitionId``; TubeMQ numbers a store's partitions
    ``store * 10000 + index``."""
    parts = partition_key.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        return partition_key, -1
    return parts[0], int(parts[2]) // _STORE_PARTITION_BASE


def method_name(method: int) -> str:
    """The Java name of a TubeMQ method (bounded: the method table), ``unknown`` otherwise."""
    spec = METHODS.get(method)
    if spec is not None:
        return spec.name
    try:
        return Method(method).name.lower()
    except ValueError:
        return "unknown"


class EventMetrics:
    """The event subscriber that feeds :class:`~gateway.observability.metrics.GatewayMetrics`."""

    def __init__(self, metrics: MetricFamilies) -> None:
        self.m = metrics
        self._links: dict[str, int] = defaultdict(int)
        self._shielded: set[int] = set()
        # Consumer state, keyed internally by client id and partition key; exposed only as per-label sums.
        self._consumers: dict[str, str] = {}  # client id -> group label
        self._instances: Counter[str] = Counter()  # group label -> consumers
        self._partitions: dict[tuple[str, str], tuple[str, str]] = {}  # (client id, key) -> (group, topic)
        self._held: Counter[str] = Counter()  # group label -> partitions held
        # Lag per store: (group, topic, broker id, store index) -> {(client id, key): entries behind}.
        self._store_lags: dict[tuple[str, str, str, int], dict[tuple[str, str], int]] = {}
        self._lag_sum: Counter[tuple[str, str]] = Counter()  # (group, topic) -> sum of the stores' maxima
        self._topics_seen: set[str] = set()
        self._pairs_seen: set[tuple[str, str]] = set()
        self._methods_seen: set[str] = set()
        # Label children of the per-message metrics, looked up once per label set (a ``labels()`` call
        # costs a few microseconds; these run for every message sent). Bounded: methods and outcomes
        # are enums, topics pass through the topic label cap first.
        self._request_children: dict[tuple[int, Outcome], tuple[Any, Any]] = {}
        self._sent_children: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._subscription: Subscription | None = None
        self._grpc = GrpcMetrics(metrics)
        self._brokers = BrokerMetrics(metrics)
        self._lag = GroupLagMetrics(metrics)
        self._push = PushMetrics(metrics)
        self._handlers: dict[type, Callable[[Any], None]] = {
            RequestCompleted: self._request,
            ConnectionOpened: self._opened,
            ConnectionTerminated: self._terminated,
            PoolLinkOpened: self._link_opened,
            PoolLinkReclaimed: self._reclaimed,
            PoolConnectFailed: self._connect_failed,
            SendCompleted: self._sent,
            BrokerShielded: self._shield,
            BrokerUnshielded: self._unshield,
            ProducerRegistered: self._producer_registered,
            RegisterFailed: self._producer_register_failed,
            ProducerHeartbeatFailed: self._producer_heartbeat_failed,
            MasterSwitched: self._master_switched,
            ConsumerRegistered: self._consumer_registered,
            ConsumerClosed: self._consumer_closed,
            ConsumerHeartbeatFailed: self._consumer_heartbeat_failed,
            PartitionRegistered: self._partition_registered,
            PartitionRegisterFailed: self._partition_register_failed,
            PartitionReleased: self._partition_released,
            FetchOutcome: self._fetched,
            OffsetCommitted: self._committed,
            RebalanceEvent: self._rebalanced,
            RedeliveryCounted: self._redelivery,
            IdempotencyChecked: self._idempotency,
            GroupLagRead: self._lag.read,
            GroupLagGone: self._lag.gone,
            PushDelivered: self._push.delivered,
            PushSubscriptionState: self._push.state,
            GrpcCallStarted: self._grpc.started,
            GrpcCallFinished: self._grpc.finished,
            GrpcStreamMessages: self._grpc.messages,
        }
        for reason in ShieldReason:
            metrics.shield_events.labels(reason=reason.value)

    def subscribe(self, bus: EventBus) -> Subscription:
        self._subscription = bus.subscribe(self, *self._handlers)
        return self._subscription

    def __call__(self, event: object) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def __repr__(self) -> str:
        return (
            f"<EventMetrics links={sum(self._links.values())} shielded={sorted(self._shielded)} "
            f"consumers={len(self._consumers)} partitions={len(self._partitions)}>"
        )

    # --- label helpers: first sight of a value zero-initialises the series that ratios divide --------

    def _topic(self, topic: str) -> str:
        label = self.m.topics(topic)
        if label not in self._topics_seen:
            self._topics_seen.add(label)
            self.m.published_messages.labels(topic=label)
            self.m.published_bytes.labels(topic=label)
            for reason in PUBLISH_ERROR_REASONS:
                self.m.publish_errors.labels(topic=label, reason=reason)
        return label

    def _pair(self, group: str, topic: str) -> tuple[str, str]:
        pair = self.m.pairs(self.m.groups(group), self.m.topics(topic))
        if pair not in self._pairs_seen:
            self._pairs_seen.add(pair)
            g, t = pair
            self.m.polled_messages.labels(group=g, topic=t)
            self.m.polled_bytes.labels(group=g, topic=t)
            self.m.redeliveries.labels(group=g, topic=t)
            for result in ("ok", "error"):
                self.m.commits.labels(group=g, topic=t, result=result)
            for family in (
                self.m.nacks,
                self.m.deadlines_expired,
                self.m.retries_published,
                self.m.dead_letters,
                self.m.retry_copies_set_aside,
            ):
                family.labels(group=g)
        return pair

    # --- TubeMQ requests and links -------------------------------------------------------------------

    def _request(self, e: RequestCompleted) -> None:
        children = self._request_children.get((e.method, e.outcome))
        if children is None:
            children = self._request_children[(e.method, e.outcome)] = self._request_labels(e)
        add(children[0], e.count)
        observe_many(children[1], e.seconds, e.count)  # a batch's requests share one duration
        self._brokers.request(e)

    def _request_labels(self, e: RequestCompleted) -> tuple[Any, Any]:
        method = method_name(e.method)
        if method not in self._methods_seen:
            self._methods_seen.add(method)
            for outcome in Outcome:
                self.m.rpc_requests.labels(method=method, outcome=outcome.value)
        return (
            self.m.rpc_requests.labels(method=method, outcome=e.outcome.value),
            self.m.rpc_duration.labels(method=method),
        )

    def _opened(self, e: ConnectionOpened) -> None:
        node = self.m.nodes(str(e.address))
        self._links[node] += 1
        self.m.open_links.labels(node=node).set(self._links[node])

    def _terminated(self, e: ConnectionTerminated) -> None:
        node = self.m.nodes(str(e.address))
        self.m.link_closes.labels(reason=e.reason.name.lower()).inc()
        # A link that never opened (connect failure) was never counted.
        if e.reason is not CloseReason.CONNECT_FAILED and self._links.get(node, 0) > 0:
            self._links[node] -= 1
            self.m.open_links.labels(node=node).set(self._links[node])

    def _link_opened(self, e: PoolLinkOpened) -> None:
        self.m.connect_failures.labels(node=self.m.nodes(str(e.address)))

    def _reclaimed(self, e: PoolLinkReclaimed) -> None:
        self.m.idle_reclaims.inc()

    def _connect_failed(self, e: PoolConnectFailed) -> None:
        self.m.connect_failures.labels(node=self.m.nodes(str(e.address))).inc()

    # --- producer ------------------------------------------------------------------------------------

    def _sent(self, e: SendCompleted) -> None:
        topic = self._topic(e.topic)
        children = self._sent_children.get((topic, e.outcome))
        if children is None:
            children = self._sent_children[(topic, e.outcome)] = self._sent_labels(topic, e.outcome)
        observe_many(children[0], e.seconds, e.count)  # a batch round's sends share one duration
        add(children[1], e.count)
        if e.outcome == "ok":
            add(children[2], e.bytes)
        self._brokers.sent(e)

    def _sent_labels(self, topic: str, outcome: str) -> tuple[Any, ...]:
        """(send duration, published messages, published bytes) for ``ok``, else (duration, errors)."""
        duration = self.m.send_duration.labels(outcome=outcome)
        if outcome == "ok":
            return (
                duration,
                self.m.published_messages.labels(topic=topic),
                self.m.published_bytes.labels(topic=topic),
            )
        reason = outcome if outcome in PUBLISH_ERROR_REASONS else "transport"
        return (duration, self.m.publish_errors.labels(topic=topic, reason=reason))

    def _shield(self, e: BrokerShielded) -> None:
        self._shielded.add(e.broker_id)
        self.m.shield_events.labels(reason=e.reason).inc()
        self._brokers.shielded(e.broker_id, True)
        self.m.shielded_brokers.set(len(self._shielded))

    def _unshield(self, e: BrokerUnshielded) -> None:
        self._shielded.discard(e.broker_id)
        self._brokers.shielded(e.broker_id, False)
        self.m.shielded_brokers.set(len(self._shielded))

    def _producer_registered(self, e: ProducerRegistered) -> None:
        self.m.master_registrations.labels(role="producer", outcome="ok").inc()
        self.m.master_session_up.labels(role="producer").set(1)

    def _producer_register_failed(self, e: RegisterFailed) -> None:
        self.m.master_registrations.labels(role="producer", outcome="error").inc()
        self.m.master_session_up.labels(role="producer").set(0)

    def _producer_heartbeat_failed(self, e: ProducerHeartbeatFailed) -> None:
        self.m.master_heartbeat_failures.labels(role="producer", target="master").inc()
        if e.reregister:
            self.m.master_session_up.labels(role="producer").set(0)

    def _master_switched(self, e: MasterSwitched) -> None:
        self.m.master_switches.inc()

    # --- consumer ------------------------------------------------------------------------------------

    def _count_instance(self, group: str, delta: int) -> None:
        self._instances[group] += delta
        self.m.consumer_instances.labels(group=group).set(self._instances[group])

    def _hold(self, key: tuple[str, str], pair: tuple[str, str] | None) -> None:
        """Make ``key`` held under ``pair`` (None: released), keeping the partition and lag sums right."""
        old = self._partitions.pop(key, None)
        if old is not None:
            self._held[old[0]] -= 1
            self.m.consumer_partitions.labels(group=old[0]).set(self._held[old[0]])
            self._set_lag(key, old, None)
        if pair is not None:
            self._partitions[key] = pair
            self._held[pair[0]] += 1
            self.m.consumer_partitions.labels(group=pair[0]).set(self._held[pair[0]])

    def _set_lag(self, key: tuple[str, str], pair: tuple[str, str], lag: int | None) -> None:
        """Replace ``key``'s lag (None: forget it) and update its group/topic sum.

        Partitions of one store share its index, so each partition's figure counts the unread entries of
        the whole store behind its own read position. A store counts once, with its slowest partition's
        figure: an upper bound of the group's unread messages there, exact when its partitions keep pace.
        """
        store = (*pair, *_store_of(key[1]))
        lags = self._store_lags.setdefault(store, {})
        before = max(lags.values(), default=0)
        if lag is None:
            lags.pop(key, None)
        else:
            lags[key] = lag
        after = max(lags.values(), default=0)
        if not lags:
            del self._store_lags[store]
        self._lag_sum[pair] += after - before
        self.m.consumer_lag.labels(group=pair[0], topic=pair[1]).set(self._lag_sum[pair])

    def _consumer_registered(self, e: ConsumerRegistered) -> None:
        group = self.m.groups(e.group)
        self.m.master_registrations.labels(role="consumer", outcome="ok").inc()
        if e.client_id not in self._consumers:
            self._consumers[e.client_id] = group
            self._count_instance(group, 1)

    def _consumer_closed(self, e: ConsumerClosed) -> None:
        group = self._consumers.pop(e.client_id, None)
        if group is None:
            return
        self._count_instance(group, -1)
        for key in [k for k in self._partitions if k[0] == e.client_id]:
            self._hold(key, None)

    def _consumer_heartbeat_failed(self, e: ConsumerHeartbeatFailed) -> None:
        target = "master" if e.target == "master" else "broker"
        self.m.master_heartbeat_failures.labels(role="consumer", target=target).inc()

    def _partition_registered(self, e: PartitionRegistered) -> None:
        topic = e.partition_key.split(":")[1] if e.partition_key.count(":") == 2 else ""
        pair = self._pair(e.group, topic)
        key = (e.client_id, e.partition_key)
        self._hold(key, pair)
        if 0 <= e.curr_offset <= e.max_offset:
            self._set_lag(key, pair, (e.max_offset - e.curr_offset) // INDEX_ENTRY_SIZE)

    def _partition_register_failed(self, e: PartitionRegisterFailed) -> None:
        self.m.partition_register_failures.labels(group=self.m.groups(e.group)).inc()

    def _partition_released(self, e: PartitionReleased) -> None:
        key = (e.client_id, e.partition_key)
        pair = self._partitions.get(key)
        if pair is None:
            return
        if e.consumed is False:
            self.m.redeliveries.labels(group=pair[0], topic=pair[1]).inc()
        self._hold(key, None)

    def _fetched(self, e: FetchOutcome) -> None:
        group, topic = self._pair(e.group, e.topic)
        self.m.fetches.labels(group=group, topic=topic, outcome=e.outcome).inc()
        self.m.fetch_duration.labels(outcome=e.outcome).observe(e.duration)
        self._brokers.fetched(_store_of(e.partition_key)[0], e.outcome)
        if e.messages:
            self.m.polled_messages.labels(group=group, topic=topic).inc(e.messages)
            self.m.polled_bytes.labels(group=group, topic=topic).inc(e.bytes)
        key = (e.client_id, e.partition_key)
        pair = self._partitions.get(key)
        if e.lag_messages >= 0 and pair is not None:
            self._set_lag(key, pair, e.lag_messages)

    def _committed(self, e: OffsetCommitted) -> None:
        group, topic = self._pair(e.group, e.topic)
        if not e.consumed:
            self.m.redeliveries.labels(group=group, topic=topic).inc()
            return
        result = "ok" if e.errcode == 200 else "error"
        self.m.commits.labels(group=group, topic=topic, result=result).inc()

    def _redelivery(self, e: RedeliveryCounted) -> None:
        group = self.m.groups(e.group)
        for family, count in (
            (self.m.nacks, e.nacked),
            (self.m.deadlines_expired, e.expired),
            (self.m.retries_published, e.retried),
            (self.m.dead_letters, e.dead_lettered),
            (self.m.retry_copies_set_aside, e.set_aside),
        ):
            family.labels(group=group).inc(count)  # a 0 still creates the series, for rates and ratios

    def _idempotency(self, e: IdempotencyChecked) -> None:
        self.m.idempotency_checks.labels(step=e.step, outcome=e.outcome).inc()
        self.m.idempotency_store_duration.labels(step=e.step).observe(e.seconds)

    def _rebalanced(self, e: RebalanceEvent) -> None:
        if e.done:
            self.m.rebalances.labels(group=self.m.groups(e.group), event=e.event_type.lower()).inc()
