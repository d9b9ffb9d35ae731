"""The Grafana dashboard: generated copies are fresh, and the layout is sound."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from tests.support.dashboard_load import Target, publish_and_poll, until_every_panel_has_data
from tests.support.deploy_tools import ALERTS, NAMESPACE, ROOT, prometheus_tool
from tests.support.prometheus_support import JOB, query, running_prometheus
from tests.support.script_support import load_script
from tests.support.serving import free_port, uvicorn_serving

DASHBOARD = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"


def _generator() -> ModuleType:
    return load_script("gen_dashboard")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_both_copies_are_fresh() -> None:
    generator = _generator()
    for path in generator.OUTPUTS:
        stale = f"{path} is stale: run python scripts/gen_dashboard.py"
        assert path.read_text(encoding="utf-8") == generator.render(path), stale


def test_import_asks_for_a_datasource_and_the_sidecar_copy_needs_none() -> None:
    """Grafana's import fills ``__inputs`` (it asks for a Prometheus); the sidecar does not read them, so
    the chart's copy has none and its datasource variable starts on the default Prometheus."""
    generator = _generator()
    imported = json.loads(generator.IMPORT_COPY.read_text(encoding="utf-8"))
    (source,) = imported["__inputs"]
    assert source["type"] == "datasource" and source["pluginId"] == "prometheus"
    ref = "${" + source["name"] + "}"
    (variable,) = [v for v in imported["templating"]["list"] if v["type"] == "datasource"]
    assert variable["current"]["value"] == ref and variable["query"] == "prometheus"
    assert {"type": "datasource", "id": "prometheus"}.items() <= imported["__requires"][1].items()
    panel_kinds = {p["type"] for p in panels(imported)}
    assert panel_kinds <= {r["id"] for r in imported["__requires"] if r["type"] == "panel"}
    chart = json.loads(generator.CHART_COPY.read_text(encoding="utf-8"))
    assert "__inputs" not in chart and "${DS_" not in generator.CHART_COPY.read_text(encoding="utf-8")
    assert chart["panels"] == imported["panels"], "both copies show the same panels"


def test_layout_ids_and_datasources(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        cells = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not cells & occupied, f"panel {panel['title']!r} overlaps another"
        occupied |= cells
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert set(variables) == {"datasource", "job", "namespace", "pod"}
    for name in ("namespace", "pod"):  # "All" also matches series without the label (a plain scrape)
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
        assert f"{name})" in variables[name]["definition"] and 'job=~"$job"' in variables[name]["definition"]
    selection = ('job=~"$job"', 'namespace=~"$namespace"', 'pod=~"$pod"')
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and panel["description"]
        for target in panel["targets"]:
            # Every metric selector of every query selects the job, namespace and pod variables.
            selectors = re.findall(r"\b(?:tubemq_gateway|grpc_server)_\w+\{([^}]*)\}", target["expr"])
            assert selectors, f"{panel['title']}: no metric in {target['expr']}"
            for selector in selectors:
                for needed in selection:
                    assert needed in selector, f"{panel['title']}: {needed} missing in {target['expr']}"
            assert target["datasource"] == panel["datasource"]


def test_covers_what_operators_asked_for(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in panels(dashboard) for t in p["targets"])
    assert "grpc_server_handled_total" in exprs and "grpc_server_handling_seconds_bucket" in exprs
    assert "status" not in exprs, "HTTP codes are labelled `code`"
    for metric in (
        "http_long_request_duration_seconds_bucket",
        "grpc_long_call_duration_seconds_bucket",
        "published_messages_total",
        "polled_messages_total",
        "publish_send_duration_seconds_bucket",
        "http_request_duration_seconds_bucket",
        "publish_errors_total",
        "pool_open_links",
        "broker_shielded",
        "broker_sends_total",
        "broker_fetches_total",
        "node_requests_total",
        "consumer_lag_messages",
        "consumer_instances",
        "consumer_prefetch_bytes",
        "consumer_prefetch_cap_bytes",
    ):
        assert f"tubemq_gateway_{metric}" in exprs, metric
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Publish", "Consume", "HTTP and gRPC", "TubeMQ links", "Brokers"]


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target."""
    return [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]


# --- a real Prometheus scraping a real gateway under a little publish/poll load ---------------------------


@asynccontextmanager
async def _gateway() -> AsyncIterator[Target]:
    """The gateway on the embedded cluster: its runtime, the app under uvicorn and the gRPC server, on
    loopback ports (as ``tubemq-gateway serve`` hosts them)."""
    port = free_port()
    settings = Settings(
        masters="",
        http_host="127.0.0.1",
        http_port=port,
        embedded={"topics": "demo:2,orders:3"},
        consumers={"heartbeat_interval": 0.2, "empty_fetch_wait": 0.05},
        tubemq={"group_lag_interval": 0.5},
    )
    runtime = Runtime(settings)
    await runtime.start()
    grpc_server = GrpcServer(runtime, grace=0.5)
    app = create_app(runtime=runtime, owns_runtime=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    try:
        await grpc_server.start()
        async with uvicorn_serving(server):
            yield Target(f"127.0.0.1:{port}", grpc_server.address)
    finally:
        await grpc_server.stop(0)
        await runtime.stop()


@pytest.mark.slow  # several seconds: a real Prometheus needs a few scrapes of a gateway under load
async def test_every_panel_returns_data_from_a_real_prometheus(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    prometheus_tool("prometheus")  # skip before starting anything when it is missing
    stop = asyncio.Event()
    async with _gateway() as target:
        load = asyncio.create_task(publish_and_poll(target, stop))
        try:
            async with running_prometheus(tmp_path, [target.http]) as prom:
                await until_every_panel_has_data(prom, queries(dashboard), load)
                match = {"match[]": "tubemq_gateway_build_info"}
                jobs = (await prom.get("/api/v1/label/job/values", params=match)).json()["data"]
                assert JOB in jobs, "the dashboard's job variable finds the gateway"
                await _alerts_evaluate_quietly(prom)
        finally:
            stop.set()
            polled = await load
    assert polled > 0


async def _alerts_evaluate_quietly(prom: httpx.AsyncClient) -> None:
    """The chart's alert rules load, evaluate without error on real data, and none fires on a healthy
    gateway (the rule file is the one promtool checks in test_helm)."""
    deadline = time.monotonic() + 10
    while True:
        groups = (await prom.get("/api/v1/rules", params={"type": "alert"})).json()["data"]["groups"]
        alerts = {r["name"]: r for g in groups for r in g["rules"]}
        if alerts and all(
            r.get("lastEvaluation", "").startswith("2") and r["health"] != "unknown" for r in alerts.values()
        ):
            break
        assert time.monotonic() < deadline, f"rules not evaluated: {alerts}"
        await asyncio.sleep(0.3)
    assert set(alerts) == ALERTS
    # the idle group (dashboard_load.publish_and_poll) holds lag with no consumer: its alert is pending
    assert alerts["TubeMQGatewayGroupLagNoConsumer"]["state"] == "pending", alerts
    for name, rule in alerts.items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))
        if name != "TubeMQGatewayGroupLagNoConsumer":
            assert rule["state"] == "inactive", (name, rule["alerts"])
    # The expressions select this gateway: with its labels, the ready replicas sum is 1, not empty.
    ready = await query(prom, f'sum(tubemq_gateway_ready{{namespace="{NAMESPACE}",job="{JOB}"}})')
    assert ready and float(ready[0]["value"][1]) == 1


def test_every_queried_metric_exists(dashboard: dict[str, Any]) -> None:
    """Without Prometheus: each metric a panel reads is one the gateway exports (names, not data)."""
    from prometheus_client import CollectorRegistry

    from gateway.observability.metrics import GatewayMetrics

    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    exported = {f.name for f in metrics.registry.collect()}
    exported |= {f"{name}_total" for name in exported} | {f"{name}_bucket" for name in exported}
    for title, expr in queries(dashboard):
        names = set(re.findall(r"\b((?:tubemq_gateway|grpc_server)_\w+)\{", expr))
        assert names, f"{title}: no gateway metric in {expr}"
        assert names <= exported, f"{title}: unknown {sorted(names - exported)}"
