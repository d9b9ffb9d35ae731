"""Write the Grafana dashboard (``python scripts/gen_dashboard.py``).

One source, two copies: ``deploy/grafana/tubemq-gateway.json`` (import it in Grafana: its ``__inputs`` make
the import ask for a Prometheus data source) and the Helm chart's ``dashboards/tubemq-gateway.json`` (shipped
as a ConfigMap for the Grafana sidecar, which does not read ``__inputs``: its ``datasource`` variable starts
on the default Prometheus data source; Helm can only read files inside the chart).
``tests/test_dashboard.py`` fails when either copy is stale.

Every query selects ``$job`` (the scrape job of the gateway pods), ``$namespace`` and ``$pod``, and uses
Grafana's ``$__rate_interval``. The gRPC panels read the go-grpc-prometheus families (``grpc_server_*``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMPORT_COPY = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"
CHART_COPY = ROOT / "deploy" / "helm" / "tubemq-gateway" / "dashboards" / "tubemq-gateway.json"
OUTPUTS = (IMPORT_COPY, CHART_COPY)
UID = "tubemq-gateway"
DS_INPUT = "DS_PROMETHEUS"
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
    each (label ``worker``, README "Worker processes"), so they are folded into the replica first
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


def rows() -> list[Row]:
    publish_errors = rate("publish_errors_total", "topic")
    publish_attempts = f"({rate('published_messages_total', 'topic')} + {publish_errors})"
    server_errors = rate("http_requests_total", match='code=~"5.."')
    http_5xx = f"({server_errors} or vector(0))"
    rpc_failed = rate("rpc_requests_total", "method", 'outcome!="ok"')
    grpc_server_failed = rate(
        "grpc_server_handled_total", match=f'grpc_code=~"{GRPC_SERVER_ERRORS}"', prefix=""
    )
    grpc_failed = f"({grpc_server_failed} or vector(0))"
    grpc_handled = rate("grpc_server_handled_total", prefix="")
    return [
        Row(
            "Overview",
            [
                Panel(
                    "Ready replicas",
                    "Gateway pods whose every worker process reports ready (master session, usable "
                    "broker, not draining).",
                    [(replicas("ready"), "ready")],
                    kind="stat",
                    width=4,
                    height=4,
                    extra={"thresholds": [("red", None), ("green", 1)]},
                ),
                Panel(
                    "Publish rate",
                    "Messages stored by TubeMQ brokers per second.",
                    [(rate("published_messages_total"), "messages/s")],
                    unit="ops",
                    kind="stat",
                    width=4,
                    height=4,
                ),
                Panel(
                    "Poll rate",
                    "Messages handed to consumers per second.",
                    [(rate("polled_messages_total"), "messages/s")],
                    unit="ops",
                    kind="stat",
                    width=4,
                    height=4,
                ),
                Panel(
                    "Shielded brokers",
                    "Brokers that some gateway pod stopped sending to after failures (see Brokers).",
                    [
                        (
                            f"count (max by (broker_id) ({PREFIX}broker_shielded{{{SEL}}}) > 0) or vector(0)",
                            "shielded",
                        )
                    ],
                    kind="stat",
                    width=4,
                    height=4,
                    extra={"thresholds": [("green", None), ("orange", 1)]},
                ),
                Panel(
                    "Master sessions up",
                    "Pods in which every worker's producer holds a registered master session.",
                    [(replicas("master_session_up", match='role="producer"'), "up")],
                    kind="stat",
                    width=4,
                    height=4,
                    extra={"thresholds": [("red", None), ("green", 1)]},
                ),
                Panel(
                    "Consumer instances",
                    "Consumer instances held by the gateway pods.",
                    [(gauge("consumer_instances"), "instances")],
                    kind="stat",
                    width=4,
                    height=4,
                ),
            ],
        ),
        Row(
            "Publish",
            [
                Panel(
                    "Published messages by topic",
                    "Messages stored per second, by topic.",
                    [(rate("published_messages_total", "topic"), "{{topic}}")],
                    unit="ops",
                ),
                Panel(
                    "Published bytes by topic",
                    "Message bytes (body and attributes) stored per second, by topic.",
                    [(rate("published_bytes_total", "topic"), "{{topic}}")],
                    unit="Bps",
                ),
                Panel(
                    "Publish error ratio by topic",
                    "Failed send attempts over all send attempts, by topic.",
                    [(f"{publish_errors} / {publish_attempts}", "{{topic}}")],
                    unit="percentunit",
                ),
                Panel(
                    "Publish errors by reason",
                    "Failed send attempts per second: rejected (error code), unavailable (503), transport.",
                    [(rate("publish_errors_total", "topic, reason"), "{{topic}} {{reason}}")],
                    unit="ops",
                ),
                Panel(
                    "Send latency",
                    "Time of one send attempt to a broker.",
                    [
                        (quantile(0.5, "publish_send_duration_seconds"), "p50"),
                        (quantile(0.99, "publish_send_duration_seconds"), "p99"),
                    ],
                    unit="s",
                ),
                Panel(
                    "Publish request latency",
                    "HTTP publish requests, end to end (p99).",
                    [
                        (
                            quantile(0.99, "http_request_duration_seconds", match=f'route="{PUBLISH_ROUTE}"'),
                            "p99",
                        )
                    ],
                    unit="s",
                ),
            ],
        ),
        Row(
            "Consume",
            [
                Panel(
                    "Polled messages by group and topic",
                    "Messages handed to consumers per second.",
                    [(rate("polled_messages_total", "group, topic"), "{{group}} {{topic}}")],
                    unit="ops",
                ),
                Panel(
                    "Polled bytes by group and topic",
                    "Message bytes handed to consumers per second.",
                    [(rate("polled_bytes_total", "group, topic"), "{{group}} {{topic}}")],
                    unit="Bps",
                ),
                Panel(
                    "Consumer lag",
                    "Messages stored but not yet consumed, by group and topic, from TubeMQ's own offsets "
                    "(stays while nobody consumes; every pod that served the group reports it: max); where "
                    "the web API cannot be read, the gateway consumers' own figure.",
                    [(GROUP_LAG, "{{group}} {{topic}}")],
                ),
                Panel(
                    "Lag per partition",
                    "Messages not yet consumed per partition (brokerId:partitionId), from TubeMQ's offsets.",
                    [
                        (
                            gauge("group_partition_lag_messages", agg="max", by="group, topic, partition"),
                            "{{group}} {{topic}} {{partition}}",
                        )
                    ],
                ),
                Panel(
                    "Groups with lag and no consumer",
                    "Groups holding unconsumed messages while the TubeMQ master lists no consumer in them "
                    "(alert TubeMQGatewayGroupLagNoConsumer).",
                    [(LAG_WITHOUT_CONSUMER, "{{group}} {{topic}}")],
                ),
                Panel(
                    "Commits and redeliveries",
                    "Offset commits per second by result, and batches handed back for redelivery.",
                    [
                        (
                            rate("commits_total", "group, result"),
                            "{{group}} commit {{result}}",
                        ),
                        (rate("redeliveries_total", "group"), "{{group}} redelivered"),
                    ],
                    unit="ops",
                ),
                Panel(
                    "Fetch outcomes",
                    "Broker reads per second by outcome (ok, empty, not_found, ...).",
                    [(rate("fetches_total", "outcome"), "{{outcome}}")],
                    unit="ops",
                ),
                Panel(
                    "Consumer instances and partitions",
                    "Consumer instances by group, and the partitions they hold.",
                    [
                        (gauge("consumer_instances", by="group"), "{{group}} instances"),
                        (gauge("consumer_partitions", by="group"), "{{group}} partitions"),
                    ],
                ),
                Panel(
                    "Poll request duration",
                    "HTTP long polls, end to end (long-lived histogram); a poll without messages lasts its "
                    "timeout_ms, so this shows how long consumers wait, not how slow the gateway is.",
                    [
                        (
                            quantile(q, "http_long_request_duration_seconds", match=f'route="{POLL_ROUTE}"'),
                            name,
                        )
                        for q, name in ((0.5, "p50"), (0.99, "p99"))
                    ],
                    unit="s",
                    width=24,
                ),
            ],
        ),
        Row(
            "HTTP and gRPC",
            [
                Panel(
                    "Requests by route",
                    "HTTP requests per second by route template and status code (499: the client left "
                    "before the answer).",
                    [(rate("http_requests_total", "route, code"), "{{route}} {{code}}")],
                    unit="reqps",
                ),
                Panel(
                    "Request latency p99 by route",
                    "99th percentile of HTTP request time; long polls and event streams are timed apart "
                    "(see Long-lived requests).",
                    [(quantile(0.99, "http_request_duration_seconds", "route"), "{{route}}")],
                    unit="s",
                ),
                Panel(
                    "HTTP 5xx ratio",
                    "Server errors over all requests.",
                    [(f"{http_5xx} / {rate('http_requests_total')}", "5xx")],
                    unit="percentunit",
                ),
                Panel(
                    "gRPC calls by method and code",
                    "gRPC calls per second by method and status code (Canceled: the client cancelled).",
                    [
                        (
                            rate("grpc_server_handled_total", "grpc_method, grpc_code", prefix=""),
                            "{{grpc_method}} {{grpc_code}}",
                        )
                    ],
                    unit="reqps",
                ),
                Panel(
                    "gRPC latency p99 by method",
                    "99th percentile of unary gRPC call time (streams and long polls: see Long-lived "
                    "requests).",
                    [
                        (
                            quantile(0.99, "grpc_server_handling_seconds", "grpc_method", prefix=""),
                            "{{grpc_method}}",
                        )
                    ],
                    unit="s",
                ),
                Panel(
                    "gRPC server error ratio",
                    f"Calls ending {GRPC_SERVER_ERRORS.replace('|', ', ')} over all calls; a client's cancel "
                    "and its invalid requests do not count.",
                    [(f"{grpc_failed} / {grpc_handled}", "errors")],
                    unit="percentunit",
                ),
                Panel(
                    "Long-lived requests",
                    "Median time of long polls, Server-Sent Events streams and gRPC streams, by route or "
                    "method: how long clients keep them open.",
                    [
                        (
                            quantile(0.5, "http_long_request_duration_seconds", "route"),
                            "{{route}}",
                        ),
                        (
                            quantile(0.5, "grpc_long_call_duration_seconds", "grpc_method"),
                            "gRPC {{grpc_method}}",
                        ),
                    ],
                    unit="s",
                ),
                Panel(
                    "gRPC messages by method",
                    "Messages received from and sent to clients per second (a stream's messages, or a unary "
                    "call's request and answer).",
                    [
                        (
                            rate("grpc_server_msg_received_total", "grpc_method", prefix=""),
                            "{{grpc_method}} received",
                        ),
                        (
                            rate("grpc_server_msg_sent_total", "grpc_method", prefix=""),
                            "{{grpc_method}} sent",
                        ),
                    ],
                    unit="ops",
                ),
                Panel(
                    "Requests in flight",
                    "HTTP requests being served (long polls and streams included), and gRPC calls started "
                    "but not finished.",
                    [
                        (gauge("http_requests_in_flight"), "HTTP"),
                        (
                            f"sum (grpc_server_started_total{{{SEL}}})"
                            f" - sum (grpc_server_handled_total{{{SEL}}})",
                            "gRPC",
                        ),
                    ],
                ),
            ],
        ),
        Row(
            "TubeMQ links",
            [
                Panel(
                    "RPCs by method and outcome",
                    "TubeMQ requests per second.",
                    [
                        (
                            rate("rpc_requests_total", "method, outcome"),
                            "{{method}} {{outcome}}",
                        )
                    ],
                    unit="reqps",
                ),
                Panel(
                    "RPC latency p99 by method",
                    "99th percentile of TubeMQ request time.",
                    [(quantile(0.99, "rpc_duration_seconds", "method"), "{{method}}")],
                    unit="s",
                ),
                Panel(
                    "RPC error ratio",
                    "TubeMQ requests that did not end ok, over all requests, by method.",
                    [
                        (
                            f"{rpc_failed} / {rate('rpc_requests_total', 'method')}",
                            "{{method}}",
                        )
                    ],
                    unit="percentunit",
                ),
                Panel(
                    "Broker links",
                    "Open TCP links per TubeMQ node (summed over the pods).",
                    [(gauge("pool_open_links", by="node"), "{{node}}")],
                ),
                Panel(
                    "In-flight requests",
                    "TubeMQ requests awaiting an answer, per pod.",
                    [(gauge("pool_in_flight_requests", by="pod"), "{{pod}}")],
                ),
                Panel(
                    "Connect failures and idle reclaims",
                    "Failed link opens per second by node, and idle links closed by the pool.",
                    [
                        (
                            rate("pool_connect_failures_total", "node"),
                            "{{node}} connect failures",
                        ),
                        (rate("pool_idle_reclaims_total"), "idle reclaims"),
                    ],
                    unit="ops",
                ),
                Panel(
                    "Broker shield events",
                    "Brokers shielded per second, by reason.",
                    [(rate("broker_shield_events_total", "reason"), "{{reason}}")],
                    unit="ops",
                ),
                Panel(
                    "Label values over the caps",
                    "Topics, groups, (group, topic) pairs and nodes counted under __overflow__ per second: "
                    "raise the metrics.max_* settings if this is not zero (docs/runbooks.md).",
                    [(f"({rate('label_overflow_total', 'label')} or vector(0))", "{{label}}")],
                    unit="ops",
                ),
            ],
        ),
        brokers_row(),
    ]


def brokers_row() -> Row:
    """Which broker is bad: shield state and error ratios per broker id (and per node address for every
    TubeMQ request, masters included)."""
    fetch_failed = 'outcome=~"unavailable|error|transport"'

    def by_broker(metric: str, failed: str, by: str = "broker_id") -> str:
        return f"{rate(metric, by, failed)} / {rate(metric, by)}"

    return Row(
        "Brokers",
        [
            Panel(
                "Shielded brokers by broker",
                "Pods shielding each broker (0: none; the producer stopped sending to it after failures "
                "or 503 answers and sends a trial message now and then).",
                [
                    (
                        f"sum by (broker_id) (max without ({WORKER}) ({PREFIX}broker_shielded{{{SEL}}}))",
                        "broker {{broker_id}}",
                    )
                ],
                width=6,
            ),
            Panel(
                "Publish errors by broker",
                "Failed send attempts (rejected, unavailable, transport) over all send attempts, by broker.",
                [(by_broker("broker_sends_total", 'outcome!="ok"'), "broker {{broker_id}}")],
                unit="percentunit",
                width=6,
            ),
            Panel(
                "Fetch errors by broker",
                "Reads the broker failed (unavailable, error, transport) over all reads, by broker.",
                [(by_broker("broker_fetches_total", fetch_failed), "broker {{broker_id}}")],
                unit="percentunit",
                width=6,
            ),
            Panel(
                "Request errors by node",
                "TubeMQ requests that did not end ok (cancelled ones aside) over all requests, by master or "
                "broker address.",
                [(by_broker("node_requests_total", 'outcome!~"ok|cancelled"', "node"), "{{node}}")],
                unit="percentunit",
                width=6,
            ),
        ],
    )


def _panel_json(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    steps = [
        {"color": color, "value": value} for color, value in panel.extra.get("thresholds", [("green", None)])
    ]
    out: dict[str, Any] = {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.targets)
        ],
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
    }
    if panel.kind == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "area",
        }
    else:
        out["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 1}
        out["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
    return out


def _query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    """A multi-value variable over ``label_values(...)``; "All" matches any value, an absent label too."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "hide": 0,
        "sort": 1,
    }


def _variables(for_import: bool) -> list[dict[str, Any]]:
    datasource: dict[str, Any] = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }
    if for_import:  # Grafana's import replaces ${DS_PROMETHEUS} with the data source the user picks
        ref = "${" + DS_INPUT + "}"
        datasource["current"] = {"selected": True, "text": ref, "value": ref}
    info = f"{PREFIX}build_info"
    return [
        datasource,
        _query_variable("job", "Job", f"label_values({info}, job)"),
        _query_variable("namespace", "Namespace", f'label_values({info}{{job=~"$job"}}, namespace)'),
        _query_variable("pod", "Pod", f'label_values({info}{{job=~"$job",namespace=~"$namespace"}}, pod)'),
    ]


def _requires(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = sorted({p["type"] for p in panels if p["type"] != "row"})
    names = {"stat": "Stat", "timeseries": "Time series"}
    return [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": kind, "name": names.get(kind, kind), "version": ""} for kind in kinds),
    ]


def dashboard(for_import: bool = True) -> dict[str, Any]:
    """The dashboard; ``for_import`` adds ``__inputs`` (the copy users import by hand)."""
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row in rows():
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        pid, y, x, row_height = pid + 1, y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, pid, x, y))
            pid, x, row_height = pid + 1, x + panel.width, max(row_height, panel.height)
        y += row_height
    head: dict[str, Any] = {}
    if for_import:
        head["__inputs"] = [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "the Prometheus that scrapes the gateway pods",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ]
        head["__requires"] = _requires(panels)
    return {
        **head,
        "uid": UID,
        "title": "TubeMQ gateway",
        "description": "Publish and poll rates, latencies, errors, broker links, shielded brokers, lag",
        "tags": ["tubemq", "gateway"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": _variables(for_import)},
        "annotations": {"list": []},
        "panels": panels,
    }


def render(path: Path = IMPORT_COPY) -> str:
    """The text of the copy at ``path`` (one of :data:`OUTPUTS`)."""
    document = dashboard(for_import=path == IMPORT_COPY)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    for path in OUTPUTS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(path), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
