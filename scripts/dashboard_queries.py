"""PromQL building blocks of the Grafana dashboard (``scripts/gen_dashboard.py``) and its panel and row
shapes. Every query selects ``$job`` (the scrape job of the gateway pods), ``$namespace`` and ``$pod``, and
uses Grafana's ``$__rate_interval``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job",namespace=~"$namespace",pod=~"$pod"'
RI = "$__rate_interval"
PREFIX = "tubemq_gateway_"
#: the label telling a replica's worker processes apart (gateway/observability/worker_merge.py)
WORKER = "worker"
PUBLISH_ROUTE = "/v1/topics/{topic}/messages"
POLL_ROUTE = "/v1/consumers/{group}/instances/{instance_id}/messages"
#: gRPC codes that mean the server failed (as HTTP 5xx do); Canceled (the client went away) and the
#: client's own mistakes (InvalidArgument, NotFound...) are not among them.
GRPC_SERVER_ERRORS = "Unknown|DeadlineExceeded|Internal|Unavailable|DataLoss"


def rate(metric: str, by: str = "", match: str = "", prefix: str = PREFIX) -> str:
    """``sum [by (...)] (rate(tubemq_gateway_<metric>{job, namespace, pod, match}[$__rate_interval]))``."""
    labels = f"{SEL},{match}" if match else SEL
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({prefix}{metric}{{{labels}}}[{RI}]))"


def quantile(q: float, histogram: str, by: str = "", match: str = "", prefix: str = PREFIX) -> str:
    extra = f", {by}" if by else ""
    labels = f"{SEL},{match}" if match else SEL
    return f"histogram_quantile({q}, sum by (le{extra}) (rate({prefix}{histogram}_bucket{{{labels}}}[{RI}])))"


def gauge(metric: str, agg: str = "sum", by: str = "", match: str = "") -> str:
    labels = f"{SEL},{match}" if match else SEL
    grouping = f" by ({by})" if by else ""
    return f"{agg}{grouping} ({PREFIX}{metric}{{{labels}}})"


def replicas(metric: str, per_replica: str = "min", match: str = "") -> str:
    """How many replicas (pods) report ``metric`` 1: each replica's worker processes export one series
    each (label ``worker``, docs/operations.md "Worker processes"), so they are folded into the replica first
    (``min``: every worker reports 1; ``max``: one does), then the replicas are summed. Without workers
    there is no ``worker`` label and the fold changes nothing."""
    labels = f"{SEL},{match}" if match else SEL
    return f"sum ({per_replica} without ({WORKER}) ({PREFIX}{metric}{{{labels}}}))"


@dataclass
class Panel:
    title: str
    description: str
    targets: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 8
    height: int = 8
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    title: str
    panels: list[Panel]


#: a group's lag from TubeMQ's offsets, else (no web API) the sum over the gateway's consumers' partitions
GROUP_LAG = (
    f"{gauge('group_lag_messages', agg='max', by='group, topic')} "
    f"or {gauge('consumer_lag_messages', by='group, topic')}"
)
#: groups with unconsumed messages that no consumer reads (the alert TubeMQGatewayGroupLagNoConsumer)
LAG_WITHOUT_CONSUMER = (
    f"{gauge('group_lag_messages', agg='max', by='group, topic')} > 0 "
    f"and on (group) {gauge('group_consumers', agg='max', by='group')} == 0"
)
