"""Helpers shared by the chart tests: rendering with expected failures, the pod spec of the Deployment, and
kubernetes-validate over rendered manifests."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_tools import CHART, NAMESPACE, RELEASE, one, run_helm, set_args

FULLNAME = f"{RELEASE}-tubemq-gateway"
#: The script of the chart's `helm test` pod.
SMOKE_SCRIPT = CHART / "files" / "smoke_test.py"
#: Kinds the Kubernetes schemas do not cover (Prometheus Operator CRDs).
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
OLDEST_KUBERNETES = "1.25.0"


def refused(values: dict[str, Any] | None = None, *flags: str) -> str:
    """``helm template`` that must fail; returns its stderr."""
    done = run_helm("template", RELEASE, str(CHART), *set_args(values), *flags, check=False)
    assert done.returncode != 0, f"helm template accepted {values} {flags}"
    return done.stderr


def render_notes(scratch: Path, values: dict[str, Any] | None = None) -> str:
    """The chart's NOTES.txt as ``helm install`` prints it, rendered without a cluster: a copy of the chart
    whose NOTES body is wrapped in a named template and emitted as one YAML string."""
    chart = scratch / "chart"
    shutil.copytree(CHART, chart)
    templates = chart / "templates"
    body = (templates / "NOTES.txt").read_text(encoding="utf-8")
    (templates / "_notes_probe.tpl").write_text(
        '{{- define "notes.probe" -}}\n' + body + "{{- end }}\n", encoding="utf-8"
    )
    (templates / "notes-probe.yaml").write_text(
        'notes: {{ include "notes.probe" . | toJson }}\n', encoding="utf-8"
    )
    args = ("template", RELEASE, str(chart), "--namespace", NAMESPACE, *set_args(values))
    out = run_helm(*args, "--show-only", "templates/notes-probe.yaml").stdout
    notes: str = yaml.safe_load(out)["notes"]
    return notes


def pod_spec(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(manifests, "Deployment")["spec"]["template"]["spec"]
    return spec


def gateway_container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    containers = pod_spec(manifests)["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def kubernetes_validate() -> Any:
    """The kubernetes_validate module; in CI (dev extras installed) a missing one is a failure, not a skip."""
    if os.environ.get("CI"):
        import kubernetes_validate

        return kubernetes_validate
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (dev extras) is not installed"
    )


def validate_manifests(manifests: list[dict[str, Any]]) -> None:
    """Every manifest (CRDs aside) against the schemas of the oldest supported and the newest Kubernetes,
    strictly (unknown fields are errors)."""
    kv = kubernetes_validate()
    for version in (OLDEST_KUBERNETES, kv.latest_version()):
        for manifest in manifests:
            if manifest["kind"] in CRD_KINDS:
                continue
            try:
                kv.validate(manifest, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']} on {version}: {exc.message}")


async def run_smoke_test(url: str, key: str, topic: str = "demo", seconds: int = 30) -> tuple[int, str]:
    """Run the `helm test` script against ``url`` as the pod would; (exit status, its output)."""
    env = {
        **os.environ,
        "GATEWAY_URL": url,
        "GATEWAY_API_KEY": key,
        "GATEWAY_TOPIC": topic,
        "GATEWAY_TIMEOUT": str(seconds),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SMOKE_SCRIPT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=seconds + 30)
    assert process.returncode is not None
    return process.returncode, out.decode()
