"""The configuration reference (docs/configuration.md) and the Helm values reference (docs/helm-values.md) are
generated, from gateway/config/ and the chart's values.yaml (issue #28 item 5): the committed pages are
what the generators print, every setting and every value is on them, and what the generators read off the
code (the serve flags, the chart's templates, the split over the workers) is what the code does."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import Settings
from gateway.serve import settings_from_args
from tests.support.files import ROOT
from tests.support.script_support import load_script

CONFIG_PAGE = ROOT / "docs" / "configuration.md"
HELM_PAGE = ROOT / "docs" / "helm-values.md"
VALUES = ROOT / "deploy" / "helm" / "tubemq-gateway" / "values.yaml"


@pytest.fixture(scope="module")
def config_doc() -> ModuleType:
    return load_script("gen_config_doc")


@pytest.fixture(scope="module")
def helm_doc() -> ModuleType:
    return load_script("gen_helm_values_doc")


def leaves(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every setting's file key, walked here on its own (not with the generator's walk)."""
    out = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += leaves(kind, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_the_configuration_reference_is_generated(config_doc: ModuleType) -> None:
    committed = CONFIG_PAGE.read_text(encoding="utf-8")
    assert committed == config_doc.page_with(config_doc.render(), committed), (
        "docs/configuration.md is stale (gateway/config/, the serve flags, the chart's templates or the "
        "split over the workers changed): run `python scripts/gen_config_doc.py` and commit it"
    )


def test_the_helm_values_reference_is_generated(helm_doc: ModuleType) -> None:
    assert HELM_PAGE.read_text(encoding="utf-8") == helm_doc.render(), (
        "docs/helm-values.md is stale (values.yaml or values.schema.json changed): run "
        "`python scripts/gen_helm_values_doc.py` and commit it"
    )


def test_every_setting_is_in_the_reference() -> None:
    page = CONFIG_PAGE.read_text(encoding="utf-8")
    paths = leaves(Settings)
    assert len(paths) > 100
    missing = [
        p
        for p in paths
        if f"| `{p}` | `TUBEMQ_GATEWAY_{p.replace('.', '__').upper()}` |" not in page
        or not f"`{p}`".join(page.split(f"| `{p}` |")[1:])  # the row has more than its key
    ]
    assert not missing, f"settings without a row in docs/configuration.md: {missing}"


def _helm_leaves(node: Any, path: tuple[str, ...] = ()) -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _helm_leaves(value, (*path, str(key)))]
    return [".".join(path)]


def test_every_helm_value_is_in_the_reference() -> None:
    page = HELM_PAGE.read_text(encoding="utf-8")
    values = _helm_leaves(yaml.safe_load(VALUES.read_text(encoding="utf-8")))
    assert len(values) > 100
    missing = [v for v in values if f"| `{v}` |" not in page]
    assert not missing, f"values without a row in docs/helm-values.md: {missing}"


def test_a_values_comment_becomes_its_rows_meaning(helm_doc: ModuleType) -> None:
    parsed = helm_doc.values_with_comments(
        "# the group\ngroup:\n  # first\n  # line two\n  a: 1\n\n  b: 2  # not this\n"
        "list:\n  - x: 1\n    y: 2\n"
    )
    assert [(".".join(v.path), v.comment) for v in parsed] == [
        ("group", "the group"),
        ("group.a", "first line two"),
        ("group.b", ""),
        ("list", ""),
        ("list.y", ""),  # inside a list item: render() leaves it out, the list is one value
    ]


def test_each_serve_flag_sets_the_setting_the_reference_names(config_doc: ModuleType, tmp_path: Path) -> None:
    """The generator names a flag's setting by the flag's name; ``serve`` with that flag alone (TLS files
    in pairs) must set exactly that setting."""
    flags = config_doc.serve_flags()
    assert flags["grpc.port"] == "--grpc-port" and flags["embedded.topics"] == "--embedded-topics"
    samples: dict[str, tuple[list[str], Any]] = {
        "masters": (["127.0.0.1:8715"], "127.0.0.1:8715"),
        "http_host": (["127.0.0.7"], "127.0.0.7"),
        "log_level": (["debug"], "debug"),
        "embedded.topics": (["t:2"], "t:2"),
        "embedded.data_dir": ([str(tmp_path)], tmp_path),
        "tls.client_auth": (["none"], "none"),
    }
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    pairs = {"tls.cert_file": cert, "tls.key_file": key}
    for path, flag in flags.items():
        if path in pairs or path == "tls.client_ca_file":
            continue
        argv, expected = samples.get(path, (["7"], 7))
        settings = _serve(flag, *argv)
        assert _get(settings, path) == expected, (flag, path)
    settings = _serve(flags["tls.cert_file"], str(cert), flags["tls.key_file"], str(key))
    assert (settings.tls.cert_file, settings.tls.key_file) == (cert, key)


def _serve(*argv: str) -> Settings:
    import argparse

    from gateway.serve import add_serve_parser

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    return settings_from_args(parser.parse_args(["serve", *argv]))


def _get(settings: Any, path: str) -> Any:
    for name in path.split("."):
        settings = getattr(settings, name)
    return settings


def test_the_split_over_the_workers_is_read_off_the_supervisor(config_doc: ModuleType) -> None:
    split = config_doc.split_by_workers()
    assert {"limits.max_concurrent_requests", "consumers.max_instances"} <= set(split)
    # whole on every worker: the workers count instances together, and share what callers spent
    for path in ("rate_limits.max_instances_per_principal", "rate_limits.publish_messages_per_second"):
        assert path not in split
    reach = config_doc.reach()
    assert reach["rate_limits.publish_messages_per_second"].startswith("per replica: every worker holds")
    assert reach["grpc.max_connections"] == "per worker"
    assert reach["limits.max_request_bytes"] == "per request"


def test_the_chart_values_are_read_off_the_templates(config_doc: ModuleType) -> None:
    chart = config_doc.chart_values()
    assert chart["TUBEMQ_GATEWAY_HTTP_PORT"] == "http.port"  # deployment.yaml, value on the next line
    assert (
        chart["TUBEMQ_GATEWAY_COMPRESSION__LEVEL"] == "compression.level"
    )  # inside `with .Values.compression`
    assert chart["TUBEMQ_GATEWAY_TRACING__ENABLED"] == "tracing.enabled"  # "true" inside `if .enabled`
    assert chart["TUBEMQ_GATEWAY_TUBEMQ__TLS__SERVER_HOSTNAME"] == "tubemq.tls.serverHostname"
    assert chart["TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET"] == ""  # the chart's generated secret
