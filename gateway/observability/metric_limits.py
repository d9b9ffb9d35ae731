"""Bounds of the gateway's metrics: histogram buckets, which requests count as long-lived, the label caps
(topics, groups, (group, topic) pairs, nodes) and :func:`series_bound`, the worst-case number of series one
process exports with them."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

__all__ = [
    "GRPC_BUCKETS",
    "HTTP_BUCKETS",
    "HTTP_METHODS",
    "LONG_BUCKETS",
    "LONG_HTTP_ROUTES",
    "MAX_LAG_PARTITIONS",
    "MAX_NODES",
    "MAX_PUSH_SUBSCRIPTIONS",
    "OVERFLOW",
    "PUSH_BUCKETS",
    "RPC_BUCKETS",
    "LabelCap",
    "PairCap",
    "series_bound",
]

OVERFLOW: Final = "__overflow__"
#: HTTP requests other than long polls and streams (range reads of big batches may take seconds).
HTTP_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Unary gRPC calls other than long polls.
GRPC_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Long polls (up to their timeout, 30 s by default) and streams (minutes to hours).
LONG_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0)
#: One TubeMQ request or send attempt: loopback answers take well under a millisecond.
RPC_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HTTP_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
#: (method, route template) of the HTTP requests that last as long as the client lets them: the long poll
#: and the Server-Sent Events stream.
LONG_HTTP_ROUTES: Final = frozenset(
    {
        ("GET", "/v1/consumers/{group}/instances/{instance_id}/messages"),
        ("GET", "/v1/consumers/{group}/instances/{instance_id}/stream"),
    }
)
#: One push delivery: an HTTP request to an endpoint, up to its ack deadline.
PUSH_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Push subscription names kept as label values (later ones are counted under ``__overflow__``).
MAX_PUSH_SUBSCRIPTIONS: Final = 100
#: Distinct TubeMQ node addresses and broker ids kept as label values (a cluster has far fewer).
MAX_NODES: Final = 256
#: ``group_partition_lag_messages`` series at most (a group's partitions past it have only the per-topic
#: ``group_lag_messages``; ``label_overflow_total{label="partition"}`` counts the readings left out)
MAX_LAG_PARTITIONS: Final = 1024


class LabelCap:
    """Passes the first ``limit`` distinct values of a label through; later ones become ``__overflow__``."""

    def __init__(self, label: str, limit: int, overflow: Counter) -> None:
        if limit < 1:
            raise ValueError(f"the {label} label cap must be at least 1, not {limit}")
        self.label = label
        self.limit = limit
        self._seen: set[str] = set()
        self._overflow = overflow.labels(label=label)

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            self._overflow.inc()
            return OVERFLOW
        self._seen.add(value)
        return value

    def __repr__(self) -> str:
        return f"<LabelCap {self.label} {len(self._seen)}/{self.limit}>"


class PairCap:
    """Caps the (group, topic) pairs that get series of their own: past ``limit`` distinct pairs (of the
    already capped labels), new ones become ``(__overflow__, __overflow__)``. Without it the worst case is
    ``max_groups * max_topics`` pairs, each with about 16 series."""

    def __init__(self, limit: int, overflow: Counter) -> None:
        if limit < 1:
            raise ValueError(f"the group/topic pair cap must be at least 1, not {limit}")
        self.limit = limit
        self._seen: set[tuple[str, str]] = set()
        self._overflow = overflow.labels(label="group_topic")

    def __call__(self, group: str, topic: str) -> tuple[str, str]:
        pair = (group, topic)
        if pair in self._seen:
            return pair
        if len(self._seen) >= self.limit:
            self._overflow.inc()
            return OVERFLOW, OVERFLOW
        self._seen.add(pair)
        return pair

    def __repr__(self) -> str:
        return f"<PairCap {len(self._seen)}/{self.limit}>"


def series_bound(
    *, max_topics: int = 200, max_groups: int = 200, max_group_topics: int = 500, http_routes: int = 32
) -> int:
    """The most series the gateway's own families can reach on one replica (process and Python families
    excluded: a fixed few dozen). ``http_routes`` counts the app's route templates plus ``<unmatched>``
    (the default leaves room for a few more than the app has, and the cardinality test fails when the app
    outgrows it);
    HTTP codes are bounded by what the gateway answers (counted here as 24 distinct codes per route and
    method, far more than any route uses). tests/observability/test_metrics_cardinality.py hammers every label
    and checks the real count stays below this."""
    topics, groups, pairs = max_topics + 1, max_groups + 1, max_group_topics + 1  # + __overflow__
    fetch_outcomes, rebalance_events, rpc_methods, rpc_outcomes = 10, 8, 40, 6
    http_methods, http_codes, grpc_methods, grpc_codes = len(HTTP_METHODS) + 1, 24, 16, 17
    histogram = len(HTTP_BUCKETS) + 3  # buckets, +Inf, _sum, _count
    long_histogram = len(LONG_BUCKETS) + 3
    per_topic = 2 + 3  # published messages and bytes, publish errors by reason
    # polled messages and bytes, redeliveries, commits (ok, error), lag, fetches by outcome
    per_pair = 2 + 1 + 2 + 1 + fetch_outcomes
    # instances, partitions, register failures, rebalances; nacks, expired deadlines, retries, dead letters
    per_group = 3 + rebalance_events + 4
    per_node = 2 + rpc_outcomes  # open links, connect failures, requests by outcome
    # shielded, send attempts by outcome (ok and the publish error reasons), reads by outcome
    per_broker = 1 + 4 + fetch_outcomes
    http = http_routes * http_methods * (http_codes + histogram) + 2 * http_methods * long_histogram
    grpc = grpc_methods * (3 + grpc_codes + len(GRPC_BUCKETS) + 3 + long_histogram)  # started, msgs
    tubemq = rpc_methods * (rpc_outcomes + len(RPC_BUCKETS) + 3)
    fixed = 200  # send and fetch time by outcome, link closes, shield reasons, master sessions, gauges...
    nodes = (MAX_NODES + 1) * (per_node + per_broker)  # node addresses and broker ids, each + __overflow__
    # group lag from TubeMQ's offsets: per pair, per group (consumers), and the capped per-partition series
    lag = pairs + groups + MAX_LAG_PARTITIONS
    # push: deliveries by outcome, their time, acked attempts, settle failures, the state gauge
    push = (MAX_PUSH_SUBSCRIPTIONS + 1) * (6 + len(PUSH_BUCKETS) + 3 + 1 + 1 + 1)
    return (
        topics * per_topic
        + pairs * per_pair
        + groups * per_group
        + nodes
        + http
        + grpc
        + tubemq
        + fixed
        + lag
        + push
    )
