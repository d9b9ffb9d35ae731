"""Write the Grafana dashboard (``python scripts/gen_dashboard.py``).

One source, two copies: ``deploy/grafana/tubemq-gateway.json`` (import it in Grafana: its ``__inputs`` make
the import ask for a Prometheus data source) and the Helm chart's ``dashboards/tubemq-gateway.json`` (shipped
as a ConfigMap for the Grafana sidecar, which does not read ``__inputs``: its ``datasource`` variable starts
on the default Prometheus data source; Helm can only read files inside the chart).
``tests/observability/test_dashboard.py`` fails when either copy is stale.

The panels are defined in ``scripts/dashboard_rows.py`` and ``scripts/dashboard_rows_net.py`` on the
PromQL helpers of ``scripts/dashboard_queries.py``: every query selects ``$job`` (the scrape job of the
gateway pods), ``$namespace`` and ``$pod``, and uses Grafana's ``$__rate_interval``. The gRPC panels read
the go-grpc-prometheus families (``grpc_server_*``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, also when loaded by path

from dashboard_queries import DS, PREFIX, Panel, Row
from dashboard_rows import consume_row, overview_row, publish_row
from dashboard_rows_net import brokers_row, http_grpc_row, links_row

ROOT = Path(__file__).resolve().parent.parent
IMPORT_COPY = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"
CHART_COPY = ROOT / "deploy" / "helm" / "tubemq-gateway" / "dashboards" / "tubemq-gateway.json"
OUTPUTS = (IMPORT_COPY, CHART_COPY)
UID = "tubemq-gateway"
DS_INPUT = "DS_PROMETHEUS"


def rows() -> list[Row]:
    return [overview_row(), publish_row(), consume_row(), http_grpc_row(), links_row(), brokers_row()]


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
