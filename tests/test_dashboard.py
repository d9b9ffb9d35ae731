"""The Grafana dashboard: generated copies are fresh, and the layout is sound."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from types import ModuleType
from typing import Any

import pytest
from deploy_tools import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_dashboard", ROOT / "scripts" / "gen_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_both_copies_are_fresh() -> None:
    generator = _generator()
    expected = generator.render()
    for path in generator.OUTPUTS:
        stale = f"{path} is stale: run python scripts/gen_dashboard.py"
        assert path.read_text(encoding="utf-8") == expected, stale


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
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "job"}
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and panel["description"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], f"{panel['title']}: every query selects the job"
            assert target["datasource"] == panel["datasource"]


def test_covers_what_operators_asked_for(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in panels(dashboard) for t in p["targets"])
    for metric in (
        "published_messages_total",
        "polled_messages_total",
        "publish_send_duration_seconds_bucket",
        "http_request_duration_seconds_bucket",
        "publish_errors_total",
        "pool_open_links",
        "shielded_brokers",
        "consumer_lag_messages",
        "consumer_instances",
    ):
        assert f"tubemq_gateway_{metric}" in exprs, metric
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Publish", "Consume", "HTTP", "TubeMQ links"]


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target."""
    return [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(tubemq_gateway_[a-z_]+?)(?:_bucket)?\{", expr))
