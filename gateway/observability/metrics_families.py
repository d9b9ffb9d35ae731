"""The metric families of the gateway (names, help texts, labels, buckets), created on one registry.

A base of :class:`~gateway.observability.metrics.GatewayMetrics` and the type its feeders
(``metrics_events``, ``metrics_brokers``, ``metrics_grpc``, ``metrics_lag``) are given, so none of them
imports the module that wires them (see that module for the naming and cardinality rules).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from gateway import __version__
from gateway.observability.metric_limits import (
    GRPC_BUCKETS,
    HTTP_BUCKETS,
    LONG_BUCKETS,
    MAX_NODES,
    MAX_PUSH_SUBSCRIPTIONS,
    PUSH_BUCKETS,
    RPC_BUCKETS,
    LabelCap,
    PairCap,
)
from gateway.tubemq.wire import SPEEDUPS

PREFIX: Final = "tubemq_gateway_"


class MetricFamilies:
    """Every metric family of the gateway on ``registry`` (a fresh one by default, so tests never share
    state); what feeds them is :class:`~gateway.observability.metrics.GatewayMetrics` and its helpers."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_topics: int = 200,
        max_groups: int = 200,
        max_group_topics: int = 500,
        process_metrics: bool = True,
    ) -> None:
        # One series per counter and histogram, not two: the *_created timestamps only add cardinality.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
            return Histogram(PREFIX + name, doc, labels, registry=r, buckets=buckets)

        self.build_info = gauge(
            "build_info",
            "Always 1; the gateway version and which per-message loops run (codec: compiled or pure).",
            ("version", "codec"),
        )
        self.build_info.labels(version=__version__, codec=SPEEDUPS).set(1)
        self.ready = gauge("ready", "1 when the gateway reports ready on /readyz, else 0.")
        self.draining = gauge("draining", "1 while the gateway shuts down gracefully.")
        self.label_overflow = counter(
            "label_overflow_total", "Label values mapped to __overflow__ past the cap.", ("label",)
        )
        self.topics = LabelCap("topic", max_topics, self.label_overflow)
        self.groups = LabelCap("group", max_groups, self.label_overflow)
        self.subscriptions = LabelCap("subscription", MAX_PUSH_SUBSCRIPTIONS, self.label_overflow)
        self.pairs = PairCap(max_group_topics, self.label_overflow)
        self.nodes = LabelCap("node", MAX_NODES, self.label_overflow)
        self.broker_ids = LabelCap("broker_id", MAX_NODES, self.label_overflow)

        # HTTP
        self.http_requests = counter(
            "http_requests_total",
            "HTTP requests by route template, method and status code (499: the client went away first).",
            ("route", "method", "code"),
        )
        self.http_duration = histogram(
            "http_request_duration_seconds",
            "HTTP request time, long polls and event streams excepted.",
            ("route", "method"),
            HTTP_BUCKETS,
        )
        self.http_long_duration = histogram(
            "http_long_request_duration_seconds",
            "Time of HTTP long polls and Server-Sent Events streams (as long as the client keeps them).",
            ("route", "method"),
            LONG_BUCKETS,
        )
        self.http_in_flight = gauge("http_requests_in_flight", "HTTP requests being served.")

        # gRPC: the names and labels of go-grpc-prometheus, which stock gRPC dashboards read.
        grpc_labels = ("grpc_type", "grpc_service", "grpc_method")
        self.grpc_started = Counter(
            "grpc_server_started_total", "RPCs started on the server.", grpc_labels, registry=r
        )
        self.grpc_handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code (Canceled: the client cancelled).",
            (*grpc_labels, "grpc_code"),
            registry=r,
        )
        self.grpc_msg_received = Counter(
            "grpc_server_msg_received_total",
            "RPC stream messages received on the server.",
            grpc_labels,
            registry=r,
        )
        self.grpc_msg_sent = Counter(
            "grpc_server_msg_sent_total", "gRPC stream messages sent by the server.", grpc_labels, registry=r
        )
        self.grpc_handling = Histogram(
            "grpc_server_handling_seconds",
            "Time of unary RPCs until the server answered; long polls and streams are in "
            "tubemq_gateway_grpc_long_call_duration_seconds.",
            grpc_labels,
            registry=r,
            buckets=GRPC_BUCKETS,
        )
        self.grpc_long_duration = histogram(
            "grpc_long_call_duration_seconds",
            "Time of gRPC streams (their whole life) and long polls.",
            grpc_labels,
            LONG_BUCKETS,
        )

        # Publishing
        self.published_messages = counter(
            "published_messages_total", "Messages stored by a broker.", ("topic",)
        )
        self.published_bytes = counter(
            "published_bytes_total", "Bytes (body and attributes) of the messages stored.", ("topic",)
        )
        self.publish_errors = counter(
            "publish_errors_total",
            "Failed send attempts: rejected (error code), unavailable (503), transport (no answer).",
            ("topic", "reason"),
        )
        self.send_duration = histogram(
            "publish_send_duration_seconds",
            "Time of one send attempt to a broker.",
            ("outcome",),
            RPC_BUCKETS,
        )

        # Consuming
        self.polled_messages = counter(
            "polled_messages_total", "Messages handed to consumers.", ("group", "topic")
        )
        self.polled_bytes = counter("polled_bytes_total", "Bytes of the messages polled.", ("group", "topic"))
        self.fetches = counter(
            "fetches_total", "Broker reads (GetMessage) by outcome.", ("group", "topic", "outcome")
        )
        self.fetch_duration = histogram(
            "fetch_duration_seconds", "Time of one broker read.", ("outcome",), RPC_BUCKETS
        )
        self.commits = counter(
            "commits_total",
            "Offset commits (consumed batches) by result: ok or error.",
            ("group", "topic", "result"),
        )
        self.redeliveries = counter(
            "redeliveries_total",
            "Batches handed back for redelivery (rolled back, or released unconsumed).",
            ("group", "topic"),
        )
        self.nacks = counter(
            "nacks_total", "Delivered messages clients gave back one by one (nack).", ("group",)
        )
        self.deadlines_expired = counter(
            "deadlines_expired_total",
            "Delivered messages whose deadline passed uncommitted (sent to the retry topic alone, or their "
            "batch rolled back).",
            ("group",),
        )
        self.retries_published = counter(
            "retries_published_total",
            "Copies of nacked or expired messages a broker stored in the retry topic.",
            ("group",),
        )
        self.dead_letters = counter(
            "dead_letters_total",
            "Messages a broker stored in the dead-letter topic at their last delivery attempt.",
            ("group",),
        )
        self.retry_copies_set_aside = counter(
            "retry_copies_set_aside_total",
            "Messages of a group's retry topic never delivered: not retry copies the gateway signed for the "
            "group (published there by another client, or signed with a secret no longer configured).",
            ("group",),
        )
        self.idempotency_checks = counter(
            "idempotency_checks_total",
            "Calls of the idempotency store by step (reserve, renew, record, release) and outcome (reserved, "
            "replayed, in_flight: 409, mismatch: 422, full, ok, lost, store_error).",
            ("step", "outcome"),
        )
        self.idempotency_store_duration = histogram(
            "idempotency_store_duration_seconds",
            "Time of one call of the idempotency store (its queue in this process included).",
            ("step",),
            RPC_BUCKETS,
        )
        self.consumer_lag = gauge(
            "consumer_lag_messages",
            "Messages not yet read by the group: per store, its slowest held partition's backlog "
            "(an upper bound), summed over the stores.",
            ("group", "topic"),
        )
        self.group_lag = gauge(
            "group_lag_messages",
            "Messages the group has not consumed, from TubeMQ's own offsets (stays while nobody consumes): "
            "per store its slowest partition, summed over the stores. Each process that served the group "
            "reports it: aggregate with max.",
            ("group", "topic"),
        )
        self.group_partition_lag = gauge(
            "group_partition_lag_messages",
            "Messages the group has not consumed per partition (brokerId:partitionId), from TubeMQ's "
            "offsets.",
            ("group", "topic", "partition"),
        )
        self.group_consumers = gauge(
            "group_consumers", "Consumers the TubeMQ master lists in the group (any client).", ("group",)
        )
        self.consumer_instances = gauge(
            "consumer_instances", "Consumers registered with the master.", ("group",)
        )
        self.consumer_partitions = gauge(
            "consumer_partitions", "Partitions held by the consumers.", ("group",)
        )
        self.consumer_prefetch_bytes = gauge(
            "consumer_prefetch_bytes",
            "Value bytes this worker's consumer instances hold fetched from brokers and not delivered yet "
            "(fetched ahead of their clients' polls, or left of a batch a poll did not take).",
        )
        self.consumer_prefetch_cap_bytes = gauge(
            "consumer_prefetch_cap_bytes",
            "The most value bytes this worker's consumer instances fetch ahead "
            "(consumers.prefetch_worker_bytes).",
        )
        self.rebalances = counter(
            "rebalances_total", "Rebalance events carried out, by type.", ("group", "event")
        )
        self.partition_register_failures = counter(
            "partition_register_failures_total", "Failed partition registrations at brokers.", ("group",)
        )

        # Push subscriptions (docs/push.md)
        self.push_deliveries = counter(
            "push_deliveries_total",
            "Deliveries of push subscriptions by outcome: acked (2xx), rejected (another status), timeout "
            "(past the ack deadline), connect (refused, reset, TLS failed), refused (an address push.allow "
            "does not hold), error.",
            ("subscription", "outcome"),
        )
        self.push_delivery_duration = histogram(
            "push_delivery_duration_seconds",
            "Time of one push delivery's request, connection included.",
            ("subscription",),
            PUSH_BUCKETS,
        )
        self.push_acked_attempts = counter(
            "push_acked_attempts_total",
            "The delivery attempt numbers of acknowledged push deliveries, summed: divided by the acked "
            "deliveries, the attempts a delivered message took on average.",
            ("subscription",),
        )
        self.push_settle_failures = counter(
            "push_settle_failures_total",
            "Push deliveries whose commit or nack failed (the message comes back when its deadline passes).",
            ("subscription",),
        )
        self.push_subscription_up = gauge(
            "push_subscription_up",
            "1 while this process runs the push subscription, 0 while it is paused; the group label joins it "
            "to the group's backlog (group_lag_messages).",
            ("subscription", "group"),
        )

        # TubeMQ requests and links
        self.rpc_requests = counter(
            "rpc_requests_total", "TubeMQ requests by method and outcome.", ("method", "outcome")
        )
        self.rpc_duration = histogram(
            "rpc_duration_seconds", "TubeMQ request time.", ("method",), RPC_BUCKETS
        )
        self.open_links = gauge("pool_open_links", "Open TCP links per TubeMQ node.", ("node",))
        self.in_flight = gauge("pool_in_flight_requests", "TubeMQ requests awaiting an answer.")
        self.idle_reclaims = counter("pool_idle_reclaims_total", "Links closed by the pool after idling.")
        self.connect_failures = counter("pool_connect_failures_total", "Failed link opens.", ("node",))
        self.link_closes = counter("pool_link_closes_total", "Links closed, by reason.", ("reason",))

        # Which TubeMQ node or broker fails: per node address (masters and brokers) and per broker id, both
        # capped (MAX_NODES), never multiplied by topic, group or method.
        self.node_requests = counter(
            "node_requests_total", "TubeMQ requests by node address and outcome.", ("node", "outcome")
        )
        self.broker_sends = counter(
            "broker_sends_total",
            "Send attempts by broker id and outcome: ok, rejected, unavailable, transport.",
            ("broker_id", "outcome"),
        )
        self.broker_fetches = counter(
            "broker_fetches_total",
            "Broker reads (GetMessage) by broker id and outcome.",
            ("broker_id", "outcome"),
        )

        # Brokers and master
        self.shielded_brokers = gauge("shielded_brokers", "Brokers the producer does not send to now.")
        self.broker_shielded = gauge("broker_shielded", "1 while the broker is shielded.", ("broker_id",))
        self.shield_events = counter(
            "broker_shield_events_total", "Brokers shielded, by reason.", ("reason",)
        )
        self.master_session_up = gauge(
            "master_session_up", "1 while the role's master session is registered.", ("role",)
        )
        self.master_registrations = counter(
            "master_registrations_total", "Registrations at the master by outcome.", ("role", "outcome")
        )
        self.master_heartbeat_failures = counter(
            "master_heartbeat_failures_total", "Failed heartbeats, by role and target.", ("role", "target")
        )
        self.master_switches = counter("master_switches_total", "Fail-overs to another master address.")
        self.master_session_up.labels(role="producer").set(0)
