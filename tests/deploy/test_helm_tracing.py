"""The chart's ``tracing`` and ``compression`` values: what they render, and that the gateway reads the
rendered ConfigMap back into the settings the values describe (the chart's defaults are the gateway's)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import CompressionSettings, Settings, TracingSettings
from tests.support.chart_support import FULLNAME, refused
from tests.support.deploy_tools import by_kind, render


def _data(values: dict[str, Any] | None = None) -> dict[str, str]:
    config = next(m for m in by_kind(render(values), "ConfigMap") if m["metadata"]["name"] == FULLNAME)
    data: dict[str, str] = config["data"]
    return data


def _settings(monkeypatch: pytest.MonkeyPatch, data: dict[str, str]) -> Settings:
    for name, value in data.items():
        if name.startswith(("TUBEMQ_GATEWAY_TRACING__", "TUBEMQ_GATEWAY_COMPRESSION__")):
            monkeypatch.setenv(name, value)
    return Settings()


def test_defaults_are_the_gateways(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data()
    assert not [k for k in data if k.startswith(("TUBEMQ_GATEWAY_TRACING__", "OTEL_"))]
    settings = _settings(monkeypatch, data)
    assert settings.tracing == TracingSettings()
    assert settings.compression == CompressionSettings()


def test_tracing_on_reaches_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data(
        {"tracing": {"enabled": True, "endpoint": "http://collector.observability:4318", "sampleRatio": 0.25}}
    )
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector.observability:4318"
    tracing = _settings(monkeypatch, data).tracing
    assert tracing.enabled and tracing.exporter == "otlp"
    assert tracing.sample_ratio == 0.25
    assert tracing.service_name == FULLNAME, "spans name the release, so two releases can be told apart"


def test_tracing_without_endpoint_uses_the_sdk_default(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data({"tracing": {"enabled": True, "exporter": "console"}})
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in data
    assert _settings(monkeypatch, data).tracing.exporter == "console"


def test_compression_values_reach_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data({"compression": {"enabled": False, "minBytes": 0, "level": 9}})
    compression = _settings(monkeypatch, data).compression
    assert compression == CompressionSettings(enabled=False, min_bytes=0, level=9)


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("tracing.exporter=jaeger", "exporter"),
        ("tracing.sampleRatio=2", "sampleRatio"),
        ("tracing.endpoint=collector:4318", "endpoint"),
        ("compression.level=0", "level"),
        ("compression.minBytes=-1", "minBytes"),
        ("tracing.enabeld=true", "enabeld"),
    ],
)
def test_bad_values_are_refused(flag: str, complaint: str) -> None:
    assert complaint in refused(None, "--set", flag)
