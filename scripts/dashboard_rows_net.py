"""The dashboard's rows on the gateway's peers: HTTP and gRPC clients, TubeMQ links and brokers
(``scripts/gen_dashboard.py``)."""

from __future__ import annotations

from dashboard_queries import (
    GRPC_SERVER_ERRORS,
    PREFIX,
    SEL,
    WORKER,
    Panel,
    Row,
    gauge,
    quantile,
    rate,
)


def http_grpc_row() -> Row:
    """The HTTP and gRPC row."""
    server_errors = rate("http_requests_total", match='code=~"5.."')
    http_5xx = f"({server_errors} or vector(0))"
    grpc_server_failed = rate(
        "grpc_server_handled_total", match=f'grpc_code=~"{GRPC_SERVER_ERRORS}"', prefix=""
    )
    grpc_failed = f"({grpc_server_failed} or vector(0))"
    grpc_handled = rate("grpc_server_handled_total", prefix="")
    return Row(
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
                "99th percentile of unary gRPC call time (streams and long polls: see Long-lived requests).",
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
    )


def links_row() -> Row:
    """The TubeMQ links row."""
    rpc_failed = rate("rpc_requests_total", "method", 'outcome!="ok"')
    return Row(
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
    )


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
