"""The chart's alert rules: unit tests with ``promtool test rules`` (each alert fires on the series that
should raise it, with its labels and annotations, and stays quiet on healthy ones), and a runbook section in
docs/runbooks.md behind every ``runbook_url``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_tools import (
    ALERTS,
    NAMESPACE,
    RELEASE,
    ROOT,
    alert_rules_file,
    one,
    prometheus_tool,
    render,
)

RUNBOOKS = ROOT / "docs" / "runbooks.md"
PUBLISH = "/v1/topics/{topic}/messages"
SERVICE = "tubemq.gateway.v1.GatewayService"
JOB = f"{RELEASE}-tubemq-gateway"
SEL = f'namespace="{NAMESPACE}",job="{JOB}"'
MIB = 1 << 20


@pytest.fixture(scope="module")
def rules() -> dict[str, dict[str, Any]]:
    manifests = render({"metrics": {"prometheusRule": {"enabled": True}}})
    rule = one(manifests, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {"series": f'{metric}{{{SEL},pod="gw-0"{extra}}}', "values": values}


def _expect(rules: dict[str, dict[str, Any]], alert: str, summary: str, **labels: str) -> dict[str, Any]:
    annotations = {**rules[alert]["annotations"], "summary": summary}
    return {
        "exp_labels": {"severity": rules[alert]["labels"]["severity"], **labels},
        "exp_annotations": annotations,
    }


def _http(values: str, code: str) -> dict[str, str]:
    """Publishes over HTTP answered ``code``."""
    return _series("tubemq_gateway_http_requests_total", values, route=PUBLISH, method="POST", code=code)


def _grpc(values: str, code: str, method: str = "Publish", kind: str = "unary") -> dict[str, str]:
    """gRPC calls of the gateway's service ending ``code`` (Go's spelling)."""
    labels = {"grpc_type": kind, "grpc_method": method, "grpc_service": SERVICE, "grpc_code": code}
    return _series("grpc_server_handled_total", values, **labels)


def _quiet(alert: str, at: str) -> dict[str, Any]:
    """An evaluation at ``at`` that finds ``alert`` not firing (inactive or pending)."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


def _firing(
    rules: dict[str, dict[str, Any]], alert: str, at: str, summary: str, **labels: str
) -> dict[str, Any]:
    """An evaluation at ``at`` that finds ``alert`` firing once, with ``summary`` and ``labels``."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": [_expect(rules, alert, summary, **labels)]}


def _pending_then_firing(rules: dict[str, dict[str, Any]], alert: str, summary: str) -> list[dict[str, Any]]:
    """Evaluations of an alert on a 5-minute rate with a 10-minute ``for``: pending at 8 m, firing at 20 m."""
    return [_quiet(alert, "8m"), _firing(rules, alert, "20m", summary)]


def _unit_tests(rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One promtool test per alert: a failure that must fire it, and a healthy twin that must not."""
    ready_summary = f"No tubemq-gateway replica in {NAMESPACE} is ready"
    billing_lags = _firing(
        rules,
        "TubeMQGatewayConsumerLag",
        "20m",
        "Group billing lags 200000 messages on orders",
        group="billing",
        topic="orders",
    )
    return [
        {  # every replica unready
            "interval": "1m",
            "input_series": [_series("tubemq_gateway_ready", "0x10")],
            "alert_rule_test": [
                _quiet("TubeMQGatewayNoReadyReplicas", "1m"),  # pending
                _firing(rules, "TubeMQGatewayNoReadyReplicas", "5m", ready_summary),
            ],
        },
        {  # no replica scraped at all: no series
            "interval": "1m",
            "input_series": [_series("up", "1x10")],
            "alert_rule_test": [
                _firing(rules, "TubeMQGatewayNoReadyReplicas", "5m", ready_summary),
            ],
        },
        {  # 10 % of the send attempts fail (the threshold is 5 %)
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_ready", "1x30"),
                _series("tubemq_gateway_published_messages_total", "0+90x30", topic="orders"),
                _series("tubemq_gateway_publish_errors_total", "0+10x30", topic="orders", reason="transport"),
            ],
            "alert_rule_test": [
                *_pending_then_firing(rules, "TubeMQGatewayPublishErrors", "10% of publish attempts fail"),
                _quiet("TubeMQGatewayNoReadyReplicas", "20m"),
            ],
        },
        {  # 2 % fail: below the threshold
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_published_messages_total", "0+98x30", topic="orders"),
                _series("tubemq_gateway_publish_errors_total", "0+2x30", topic="orders", reason="rejected"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayPublishErrors", "25m"),
            ],
        },
        {  # broker 2 shielded for good by both workers of gw-0 and by gw-1; broker 3 briefly; broker 1 never
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_broker_shielded", "1x30", broker_id="2", worker="0"),
                _series("tubemq_gateway_broker_shielded", "1x30", broker_id="2", worker="1"),
                {
                    "series": f'tubemq_gateway_broker_shielded{{{SEL},pod="gw-1",broker_id="2"}}',
                    "values": "1x30",
                },
                _series("tubemq_gateway_broker_shielded", "1 1 1 0x27", broker_id="3", worker="0"),
                _series("tubemq_gateway_broker_shielded", "0x30", broker_id="1", worker="0"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayBrokersShielded", "5m"),
                _firing(
                    rules,
                    "TubeMQGatewayBrokersShielded",
                    "15m",
                    "TubeMQ broker 2 is shielded by 2 gateway pod(s)",  # pods, not workers
                    broker_id="2",
                ),
            ],
        },
        {  # one group lags 200000 on a topic, summed over two pods; another keeps up
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_consumer_lag_messages", "150000x30", group="billing", topic="orders"),
                {
                    "series": f'tubemq_gateway_consumer_lag_messages{{{SEL},pod="gw-1",group="billing",'
                    'topic="orders"}',
                    "values": "50000x30",
                },
                _series("tubemq_gateway_consumer_lag_messages", "10x30", group="audit", topic="orders"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayConsumerLag", "10m"),
                billing_lags,
            ],
        },
        {  # TubeMQ's offsets: two pods report the same 200000 (max, not their sum); the lag stays with no
            # consumer, and a group with lag and nobody consuming raises its own alert (one that is read,
            # or that is up to date, does not)
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_group_lag_messages", "200000x30", group="billing", topic="orders"),
                {
                    "series": f'tubemq_gateway_group_lag_messages{{{SEL},pod="gw-1",group="billing",'
                    'topic="orders"}',
                    "values": "200000x30",
                },
                _series("tubemq_gateway_group_consumers", "0x30", group="billing"),
                _series("tubemq_gateway_group_lag_messages", "500x30", group="busy", topic="orders"),
                _series("tubemq_gateway_group_consumers", "2x30", group="busy"),
                _series("tubemq_gateway_group_lag_messages", "0x30", group="done", topic="orders"),
                _series("tubemq_gateway_group_consumers", "0x30", group="done"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayGroupLagNoConsumer", "5m"),
                _firing(
                    rules,
                    "TubeMQGatewayGroupLagNoConsumer",
                    "20m",
                    "Group billing has 200000 unconsumed messages on orders and no consumer",
                    group="billing",
                    topic="orders",
                ),
                billing_lags,
            ],
        },
        {  # 10 % of the HTTP requests answered 5xx, and gRPC Internal errors: server errors
            "interval": "1m",
            "input_series": [
                _http("0+90x30", "200"),
                _http("0+10x30", "503"),
                _grpc("0+50x30", "OK", "Publish", "unary"),
                _grpc("0+10x30", "Internal", "Publish", "unary"),
            ],
            "alert_rule_test": [
                *_pending_then_firing(
                    rules, "TubeMQGatewayServerErrors", "12.5% of requests end in a server error"
                ),
            ],
        },
        {  # many cancelled streams, 4xx answers and 499s: the clients' doing, not server errors
            "interval": "1m",
            "input_series": [
                _http("0+50x30", "400"),
                _http("0+50x30", "499"),
                _grpc("0+50x30", "Canceled", "Subscribe", "server_stream"),
                _grpc("0+50x30", "InvalidArgument", "Publish", "unary"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayServerErrors", "25m"),
            ],
        },
        {  # a push endpoint failing a fifth of its deliveries over two pods; another one healthy
            "interval": "1m",
            "input_series": [
                _series(
                    "tubemq_gateway_push_deliveries_total", "0+40x30", subscription="hooks", outcome="acked"
                ),
                _series(
                    "tubemq_gateway_push_deliveries_total",
                    "0+10x30",
                    subscription="hooks",
                    outcome="rejected",
                ),
                {
                    "series": f'tubemq_gateway_push_deliveries_total{{{SEL},pod="gw-1",subscription="hooks",'
                    'outcome="acked"}',
                    "values": "0+40x30",
                },
                _series(
                    "tubemq_gateway_push_deliveries_total", "0+95x30", subscription="fine", outcome="acked"
                ),
                _series(
                    "tubemq_gateway_push_deliveries_total", "0+5x30", subscription="fine", outcome="timeout"
                ),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayPushFailing", "8m"),
                _firing(
                    rules,
                    "TubeMQGatewayPushFailing",
                    "20m",
                    "Push subscription hooks: 11.11% of deliveries fail",
                    subscription="hooks",
                ),
            ],
        },
        {  # a running push subscription's group lags; a paused one's backlog and a small one do not count
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_group_lag_messages", "50000x30", group="push-a", topic="orders"),
                _series("tubemq_gateway_push_subscription_up", "1x30", group="push-a", subscription="a"),
                _series("tubemq_gateway_group_lag_messages", "50000x30", group="push-b", topic="orders"),
                _series("tubemq_gateway_push_subscription_up", "0x30", group="push-b", subscription="b"),
                _series("tubemq_gateway_group_lag_messages", "10x30", group="push-c", topic="orders"),
                _series("tubemq_gateway_push_subscription_up", "1x30", group="push-c", subscription="c"),
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayPushBacklog", "10m"),
                _firing(
                    rules,
                    "TubeMQGatewayPushBacklog",
                    "20m",
                    "Push subscription a has 50000 undelivered messages on orders",
                    group="push-a",
                    topic="orders",
                    subscription="a",
                ),
            ],
        },
        {  # worker 0 of gw-0 holds 240 of its 256 MiB fetched ahead for good, worker 1 a tenth; worker 0 of
            # gw-1 is full only for 5 minutes; gw-2 (one worker, no label) fetches nothing ahead (cap 0)
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_consumer_prefetch_bytes", f"{240 * MIB}x30", worker="0"),
                _series("tubemq_gateway_consumer_prefetch_cap_bytes", f"{256 * MIB}x30", worker="0"),
                _series("tubemq_gateway_consumer_prefetch_bytes", f"{25 * MIB}x30", worker="1"),
                _series("tubemq_gateway_consumer_prefetch_cap_bytes", f"{256 * MIB}x30", worker="1"),
                {
                    "series": f'tubemq_gateway_consumer_prefetch_bytes{{{SEL},pod="gw-1",worker="0"}}',
                    "values": f"{256 * MIB}x5 0x25",
                },
                {
                    "series": f'tubemq_gateway_consumer_prefetch_cap_bytes{{{SEL},pod="gw-1",worker="0"}}',
                    "values": f"{256 * MIB}x30",
                },
                {"series": f'tubemq_gateway_consumer_prefetch_bytes{{{SEL},pod="gw-2"}}', "values": "0x30"},
                {
                    "series": f'tubemq_gateway_consumer_prefetch_cap_bytes{{{SEL},pod="gw-2"}}',
                    "values": "0x30",
                },
            ],
            "alert_rule_test": [
                _quiet("TubeMQGatewayPrefetchBudgetFull", "10m"),
                _firing(
                    rules,
                    "TubeMQGatewayPrefetchBudgetFull",
                    "20m",
                    "A worker of gw-0 holds 93.75% of its fetch-ahead budget",
                    pod="gw-0",
                    worker="0",
                ),
            ],
        },
        {  # topics past the cap counted under __overflow__
            "interval": "1m",
            "input_series": [
                _series("tubemq_gateway_label_overflow_total", "0+3x30", label="topic"),
                _series("tubemq_gateway_label_overflow_total", "0x30", label="group"),
            ],
            "alert_rule_test": [
                _firing(
                    rules,
                    "TubeMQGatewayMetricLabelsOverflow",
                    "20m",
                    "Label topic has more values than the metrics cap",
                    label="topic",
                ),
            ],
        },
    ]


def _promtool_test(
    rules_file: Path, tests: list[dict[str, Any]], directory: Path
) -> subprocess.CompletedProcess[str]:
    spec = {"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": tests}
    path = directory / "alerts_test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    promtool = prometheus_tool("promtool")
    return subprocess.run(
        [promtool, "test", "rules", path.name], capture_output=True, text=True, timeout=120, cwd=directory
    )


def test_every_alert_fires_when_it_should_and_only_then(
    rules: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    assert set(rules) == ALERTS
    manifests = render({"metrics": {"prometheusRule": {"enabled": True}}})
    rules_file = alert_rules_file(manifests, tmp_path)
    checked = subprocess.run(
        [prometheus_tool("promtool"), "check", "rules", str(rules_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = _unit_tests(rules)
    fired = {t["alertname"] for test in tests for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert fired == ALERTS, "every alert has a test that makes it fire"
    done = _promtool_test(rules_file, tests, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

    # The tests are real: expecting silence where an alert fires fails promtool.
    wrong = _unit_tests(rules)
    wrong[0]["alert_rule_test"][1]["exp_alerts"] = []
    assert _promtool_test(rules_file, wrong, tmp_path).returncode != 0


def test_every_alert_links_its_runbook_section(rules: dict[str, dict[str, Any]]) -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL))
    assert set(sections) == ALERTS, "one runbook section per alert, no stale ones"
    for name, rule in rules.items():
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbooks.md#{name.lower()}", url  # GitHub's anchor of the "## name" heading
        for part in ("**What it means.**", "**What to check.**", "**What to do.**"):
            assert part in sections[name], f"{name}: {part} missing"
    base = "https://git.example/ops/tubemq-gateway/blob/main/docs/runbooks.md"
    published = render({"metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": base}}})
    rule = one(published, "PrometheusRule")
    urls = {r["alert"]: r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert urls == {name: f"{base}#{name.lower()}" for name in ALERTS}
