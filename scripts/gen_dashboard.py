"""Write the Grafana dashboard (``python scripts/gen_dashboard.py``).

One source, two copies: ``deploy/grafana/tubemq-gateway.json`` (import it in Grafana) and the Helm chart's
``dashboards/tubemq-gateway.json`` (shipped as a ConfigMap for the Grafana sidecar; Helm can only read files
inside the chart). ``tests/test_dashboard.py`` fails when either copy is stale.

Queries use ``$job`` (the scrape job of the gateway pods) and Grafana's ``$__rate_interval``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = (
    ROOT / "deploy" / "grafana" / "tubemq-gateway.json",
    ROOT / "deploy" / "helm" / "tubemq-gateway" / "dashboards" / "tubemq-gateway.json",
)
UID = "tubemq-gateway"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job"'
RI = "$__rate_interval"
PREFIX = "tubemq_gateway_"
PUBLISH_ROUTE = "/v1/topics/{topic}/messages"
POLL_ROUTE = "/v1/consumers/{group}/instances/{instance_id}/messages"


def rate(metric: str, by: str = "", match: str = "") -> str:
    """``sum [by (...)] (rate(tubemq_gateway_<metric>{job, match}[$__rate_interval]))``."""
    labels = f"{SEL},{match}" if match else SEL
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({PREFIX}{metric}{{{labels}}}[{RI}]))"


def quantile(q: float, histogram: str, by: str = "") -> str:
    extra = f", {by}" if by else ""
    return f"histogram_quantile({q}, sum by (le{extra}) (rate({PREFIX}{histogram}_bucket{{{SEL}}}[{RI}])))"


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


def rows() -> list[Row]:
    publish_errors = rate("publish_errors_total", "topic")
    publish_attempts = f"({rate('published_messages_total', 'topic')} + {publish_errors})"
    server_errors = rate("http_requests_total", match='status=~"5.."')
    http_5xx = f"({server_errors} or vector(0))"
    rpc_failed = rate("rpc_requests_total", "method", 'outcome!="ok"')
    grpc_not_ok = rate("grpc_requests_total", match='code!="OK"')
    grpc_failed = f"({grpc_not_ok} or vector(0))"
    return [
        Row(
            "Overview",
            [
                Panel(
                    "Ready replicas",
                    "Gateway pods that report ready (master session, usable broker, not draining).",
                    [(f"sum(tubemq_gateway_ready{{{SEL}}})", "ready")],
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
                    "Brokers the gateway stopped sending to after failures (highest over the pods).",
                    [(f"max(tubemq_gateway_shielded_brokers{{{SEL}}})", "shielded")],
                    kind="stat",
                    width=4,
                    height=4,
                    extra={"thresholds": [("green", None), ("orange", 1)]},
                ),
                Panel(
                    "Master sessions up",
                    "Pods whose producer holds a registered master session.",
                    [(f'sum(tubemq_gateway_master_session_up{{{SEL},role="producer"}})', "up")],
                    kind="stat",
                    width=4,
                    height=4,
                    extra={"thresholds": [("red", None), ("green", 1)]},
                ),
                Panel(
                    "Consumer instances",
                    "Consumer instances held by the gateway pods.",
                    [(f"sum(tubemq_gateway_consumer_instances{{{SEL}}})", "instances")],
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
                            "histogram_quantile(0.99, sum by (le) (rate("
                            f'tubemq_gateway_http_request_duration_seconds_bucket{{{SEL},route="{PUBLISH_ROUTE}"}}'
                            f"[{RI}])))",
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
                    "Messages stored but not yet read, by group and topic (sum over the partitions held).",
                    [
                        (
                            f"sum by (group, topic) (tubemq_gateway_consumer_lag_messages{{{SEL}}})",
                            "{{group}} {{topic}}",
                        )
                    ],
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
                        (
                            f"sum by (group) (tubemq_gateway_consumer_instances{{{SEL}}})",
                            "{{group}} instances",
                        ),
                        (
                            f"sum by (group) (tubemq_gateway_consumer_partitions{{{SEL}}})",
                            "{{group}} partitions",
                        ),
                    ],
                ),
                Panel(
                    "Poll request latency",
                    "HTTP polls, end to end; a long poll without messages lasts its timeout_ms.",
                    [
                        (
                            f"histogram_quantile({q}, sum by (le) (rate("
                            f'tubemq_gateway_http_request_duration_seconds_bucket{{{SEL},route="{POLL_ROUTE}"}}'
                            f"[{RI}])))",
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
                    "HTTP requests per second by route template and status.",
                    [(rate("http_requests_total", "route, status"), "{{route}} {{status}}")],
                    unit="reqps",
                ),
                Panel(
                    "Request latency p99 by route",
                    "99th percentile of HTTP request time.",
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
                    "gRPC calls per second by method and status code.",
                    [(rate("grpc_requests_total", "method, code"), "{{method}} {{code}}")],
                    unit="reqps",
                ),
                Panel(
                    "gRPC latency p99 by method",
                    "99th percentile of gRPC call time (a stream counts its whole life).",
                    [(quantile(0.99, "grpc_request_duration_seconds", "method"), "{{method}}")],
                    unit="s",
                ),
                Panel(
                    "gRPC error ratio",
                    "Calls not ending OK over all calls.",
                    [(f"{grpc_failed} / {rate('grpc_requests_total')}", "errors")],
                    unit="percentunit",
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
                    [(f"sum by (node) (tubemq_gateway_pool_open_links{{{SEL}}})", "{{node}}")],
                ),
                Panel(
                    "In-flight requests",
                    "TubeMQ requests awaiting an answer, per pod.",
                    [(f"tubemq_gateway_pool_in_flight_requests{{{SEL}}}", "{{instance}}")],
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
                    "Shielded brokers",
                    "Brokers shielded by each pod's producer.",
                    [(f"tubemq_gateway_shielded_brokers{{{SEL}}}", "{{instance}}")],
                    width=12,
                ),
                Panel(
                    "Broker shield events",
                    "Brokers shielded per second, by reason.",
                    [(rate("broker_shield_events_total", "reason"), "{{reason}}")],
                    unit="ops",
                    width=12,
                ),
            ],
        ),
    ]


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


def dashboard() -> dict[str, Any]:
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
    return {
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
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "Job",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": "label_values(tubemq_gateway_build_info, job)", "refId": "job"},
                    "definition": "label_values(tubemq_gateway_build_info, job)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".+",
                    "current": {},
                    "hide": 0,
                    "sort": 1,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    for path in OUTPUTS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
