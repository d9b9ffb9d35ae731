"""The Helm chart: helm lint, helm template, Kubernetes schemas, and the properties operators rely on.

Uses a real helm binary (see ``deploy_tools``) and ``kubernetes-validate`` (schemas ship in the package, so
the validation works offline). The Dockerfile is checked against the chart it must agree with.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploy_tools import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    alert_rules_file,
    by_kind,
    one,
    prometheus_tool,
    render,
    run_helm,
)

from gateway.config import RateLimitSettings, Settings

FULLNAME = f"{RELEASE}-tubemq-gateway"
EVERYTHING: dict[str, Any] = {
    "masters": "master-0.tubemq:8715,master-1.tubemq:8715",
    "config": {"TUBEMQ_GATEWAY_POOL__IDLE_TIMEOUT": 120},
    "auth": {"env": {"TUBEMQ_GATEWAY_AUTH__TOKENS": "s3cret"}},
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "tls": [{"secretName": "gw-tls", "hosts": ["gw.example"]}],
    },
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "dashboard": {"enabled": True},
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
}
#: Kinds the Kubernetes schemas do not cover (Prometheus Operator CRDs); checked by hand below.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def default_manifests() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def full_manifests() -> list[dict[str, Any]]:
    return render(EVERYTHING)


def _kubernetes_validate() -> Any:
    """The kubernetes_validate module; in CI (dev extras installed) a missing one is a failure, not a skip."""
    if os.environ.get("CI"):
        import kubernetes_validate

        return kubernetes_validate
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (dev extras) is not installed"
    )


def container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    result: dict[str, Any] = pod["containers"][0]
    return result


def env_of(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e for e in container(manifests)["env"]}


def test_lint_passes_strict() -> None:
    run_helm("lint", "--strict", str(CHART))
    values = [
        arg for key, value in EVERYTHING.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")
    ]
    run_helm("lint", "--strict", str(CHART), *values)


@pytest.mark.parametrize("values", [None, EVERYTHING], ids=["defaults", "everything"])
def test_manifests_match_kubernetes_schemas(values: dict[str, Any] | None) -> None:
    kv = _kubernetes_validate()
    manifests = render(values)
    chart_minimum = "1.25.0"  # Chart.yaml kubeVersion
    for version in (chart_minimum, kv.latest_version()):
        for manifest in manifests:
            if manifest["kind"] in CRD_KINDS:
                continue
            try:
                kv.validate(manifest, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']} on {version}: {exc.message}")
    kinds = {m["kind"] for m in manifests}
    assert kinds - CRD_KINDS <= {
        "ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment",
        "HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress",
    }  # fmt: skip


def test_schema_check_rejects_a_broken_manifest(default_manifests: list[dict[str, Any]]) -> None:
    kv = _kubernetes_validate()
    deployment = copy.deepcopy(one(default_manifests, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = [8080]
    with pytest.raises(kv.ValidationError):
        kv.validate(deployment, "1.25.0", strict=True)
    deployment = copy.deepcopy(one(default_manifests, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProb"] = {}
    with pytest.raises(kv.ValidationError):  # strict: unknown fields are errors, so typos are caught
        kv.validate(deployment, "1.25.0", strict=True)


def test_defaults_render_the_core_objects(default_manifests: list[dict[str, Any]]) -> None:
    kinds = sorted(m["kind"] for m in default_manifests)
    assert kinds == [
        "ConfigMap", "Deployment", "HorizontalPodAutoscaler",
        "PodDisruptionBudget", "Service", "ServiceAccount",
    ]  # fmt: skip
    for manifest in default_manifests:
        assert manifest["metadata"]["name"] == FULLNAME
        assert manifest["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_everything_renders_the_optional_objects(full_manifests: list[dict[str, Any]]) -> None:
    kinds = sorted(m["kind"] for m in full_manifests)
    assert kinds == [
        "ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "PodDisruptionBudget",
        "PrometheusRule", "Secret", "Service", "ServiceAccount", "ServiceMonitor",
    ]  # fmt: skip


def test_probes_security_and_resources(default_manifests: list[dict[str, Any]]) -> None:
    c = container(default_manifests)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert c["args"] == ["serve"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    pod = one(default_manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"], "a read-only root needs a writable /tmp"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8080, "grpc": 9090}
    assert one(default_manifests, "Deployment")["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize(("grace", "sleep", "margin"), [(25, 5, 5), (40, 10, 2)])
def test_termination_budget_matches_grace_period(grace: int, sleep: int, margin: int) -> None:
    manifests = render(
        {"shutdown": {"gracePeriodSeconds": grace, "preStopSleepSeconds": sleep, "marginSeconds": margin}}
    )
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace + sleep + margin
    c = pod["containers"][0]
    assert c["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", str(sleep)]
    assert env_of(manifests)["TUBEMQ_GATEWAY_SHUTDOWN__GRACE_PERIOD"]["value"] == str(grace)


def test_pod_ip_is_the_advertised_url(default_manifests: list[dict[str, Any]]) -> None:
    env = container(default_manifests)["env"]
    names = [e["name"] for e in env]
    pod_ip = env[names.index("POD_IP")]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    url = env[names.index("TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL")]
    assert url["value"] == "http://$(POD_IP):8080"
    # Kubernetes expands $(VAR) only from variables defined earlier in the list.
    assert names.index("POD_IP") < names.index("TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL")
    other = render({"http": {"port": 9000}})
    assert env_of(other)["TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL"]["value"] == "http://$(POD_IP):9000"
    assert env_of(other)["TUBEMQ_GATEWAY_HTTP_PORT"]["value"] == "9000"


def test_service_ports(default_manifests: list[dict[str, Any]]) -> None:
    service = one(default_manifests, "Service")
    ports = {p["name"]: (p["port"], p["targetPort"], p.get("appProtocol")) for p in service["spec"]["ports"]}
    assert ports == {"http": (8080, "http", "http"), "grpc": (9090, "grpc", "grpc")}
    assert (
        service["spec"]["selector"] == one(default_manifests, "Deployment")["spec"]["selector"]["matchLabels"]
    )
    without_grpc = render({"grpc": {"enabled": False}})
    assert [p["name"] for p in one(without_grpc, "Service")["spec"]["ports"]] == ["http"]
    assert [p["name"] for p in container(without_grpc)["ports"]] == ["http"]


def test_config_and_secret(full_manifests: list[dict[str, Any]]) -> None:
    config = next(m for m in by_kind(full_manifests, "ConfigMap") if m["metadata"]["name"] == FULLNAME)
    assert config["data"]["TUBEMQ_GATEWAY_MASTERS"] == "master-0.tubemq:8715,master-1.tubemq:8715"
    assert config["data"]["TUBEMQ_GATEWAY_POOL__IDLE_TIMEOUT"] == "120"
    assert config["data"]["TUBEMQ_GATEWAY_LOG_FORMAT"] == "json"
    secret = one(full_manifests, "Secret")
    assert base64.b64decode(secret["data"]["TUBEMQ_GATEWAY_AUTH__TOKENS"]) == b"s3cret"
    sources = container(full_manifests)["envFrom"]
    assert {"configMapRef": {"name": FULLNAME}} in sources and {"secretRef": {"name": FULLNAME}} in sources
    annotations = one(full_manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/secret"]), "pods roll when the secret changes"

    existing = render({"auth": {"existingSecret": "tubemq-credentials", "env": {"X": "ignored"}}})
    assert not by_kind(existing, "Secret")
    assert {"secretRef": {"name": "tubemq-credentials"}} in container(existing)["envFrom"]


def config_data(manifests: list[dict[str, Any]]) -> dict[str, str]:
    config = next(m for m in by_kind(manifests, "ConfigMap") if m["metadata"]["name"] == FULLNAME)
    data: dict[str, str] = config["data"]
    return data


def test_rate_limits_and_cors_reach_the_settings(
    default_manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = config_data(default_manifests)
    assert defaults["TUBEMQ_GATEWAY_RATE_LIMITS__PUBLISH_BYTES_PER_SECOND"] == "268435456"  # no 2.6e+08
    assert not [k for k in defaults if k.startswith("TUBEMQ_GATEWAY_CORS__")], "no CORS unless asked"
    assert "TUBEMQ_GATEWAY_RATE_LIMITS__OVERRIDES" not in defaults
    custom = config_data(
        render(
            {
                "rateLimits": {
                    "publishMessagesPerSecond": 0.5,
                    "maxInstancesPerPrincipal": 0,
                    "overrides": {"ingest": {"publish_messages_per_second": 500000}},
                },
                "cors": {"allowOrigins": ["https://console.example", "http://localhost:3000"]},
            }
        )
    )
    for name, value in custom.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.rate_limits.publish_messages_per_second == 0.5
    assert settings.rate_limits.publish_bytes_per_second == 268435456
    assert settings.rate_limits.max_instances_per_principal == 0
    assert settings.rate_limits.overrides["ingest"].publish_messages_per_second == 500000
    assert settings.cors.allow_origins == ["https://console.example", "http://localhost:3000"]
    assert settings.cors.max_age == 600
    for name in custom:
        monkeypatch.delenv(name)
    for name, value in defaults.items():
        if name.startswith("TUBEMQ_GATEWAY_RATE_LIMITS__"):
            monkeypatch.setenv(name, value)
    assert Settings().rate_limits == RateLimitSettings(), "the chart's defaults are the gateway's"


def test_ingress_hpa_and_pdb(full_manifests: list[dict[str, Any]]) -> None:
    ingress = one(full_manifests, "Ingress")["spec"]
    assert ingress["ingressClassName"] == "nginx" and ingress["tls"][0]["hosts"] == ["gw.example"]
    backend = ingress["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": FULLNAME, "port": {"number": 8080}}
    hpa = one(full_manifests, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == FULLNAME and hpa["minReplicas"] >= 2
    assert "replicas" not in one(full_manifests, "Deployment")["spec"], "the HPA owns the replica count"
    fixed = render({"autoscaling": {"enabled": False}, "replicaCount": 3})
    assert one(fixed, "Deployment")["spec"]["replicas"] == 3 and not by_kind(fixed, "HorizontalPodAutoscaler")
    assert one(full_manifests, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    by_max = render({"podDisruptionBudget": {"minAvailable": "", "maxUnavailable": "25%"}})
    assert one(by_max, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": "25%",
        "selector": {
            "matchLabels": {"app.kubernetes.io/name": "tubemq-gateway", "app.kubernetes.io/instance": RELEASE}
        },
    }
    both = run_helm(
        "template", RELEASE, str(CHART), "--set", "podDisruptionBudget.maxUnavailable=1", check=False
    )
    assert both.returncode != 0 and "not both" in both.stderr


def test_service_monitor_and_dashboard(full_manifests: list[dict[str, Any]]) -> None:
    monitor = one(full_manifests, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        monitor["spec"]["endpoints"][0]["port"] == "http"
        and monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    )
    service_labels = one(full_manifests, "Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    dashboard = next(
        m for m in by_kind(full_manifests, "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")
    )
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (ROOT / "deploy" / "grafana" / "tubemq-gateway.json").read_text(encoding="utf-8")
    assert json.loads(dashboard["data"]["tubemq-gateway.json"]) == json.loads(shipped)
    elsewhere = render({"dashboard": {"enabled": True, "namespace": "monitoring"}})
    dash = next(m for m in by_kind(elsewhere, "ConfigMap") if m["metadata"]["name"].endswith("-dashboard"))
    assert dash["metadata"]["namespace"] == "monitoring"


def test_alert_rules_pass_promtool(full_manifests: list[dict[str, Any]], tmp_path: Path) -> None:
    rule = one(full_manifests, "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "TubeMQGatewayNoReadyReplicas",
        "TubeMQGatewayPublishErrors",
        "TubeMQGatewayBrokersShielded",
        "TubeMQGatewayConsumerLag",
    }
    for alert in alerts.values():
        assert f'namespace="{NAMESPACE}"' in alert["expr"] and f'job="{FULLNAME}"' in alert["expr"]
        assert alert["labels"]["severity"] in {"warning", "critical"} and alert["annotations"]["summary"]
    promtool = prometheus_tool("promtool")
    rules = alert_rules_file(full_manifests, tmp_path)
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 4 rules found" in done.stdout

    broken = rules.read_text(encoding="utf-8").replace("> 0", "> > 0", 1)
    rules.write_text(broken, encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0, "promtool must reject a broken expression (the check above is real)"


def test_dockerfile_agrees_with_the_chart(default_manifests: list[dict[str, Any]]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\w+))?", dockerfile, re.MULTILINE)
    assert len(stages) >= 2 and all("slim" in image or image.startswith("${") for image, _ in stages)
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", dockerfile, re.MULTILINE)
    uid = int(re.search(r"^ARG UID=(\d+)", dockerfile, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert uid != 0 and re.search(r"^USER \$\{UID\}", dockerfile, re.MULTILINE)
    pod = one(default_manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    healthcheck = re.search(r"^HEALTHCHECK .*?/healthz", dockerfile, re.MULTILINE | re.DOTALL)
    assert healthcheck, "the image checks liveness"
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.+)$", dockerfile, re.MULTILINE)[0].split()}
    assert exposed == {p["containerPort"] for p in container(default_manifests)["ports"]}
    assert 'ENTRYPOINT ["tubemq-gateway"]' in dockerfile and 'CMD ["serve"]' in dockerfile
    assert 'tubemq-gateway = "gateway.__main__:main"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    # Every path the build copies must get through .dockerignore.
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    copied = {
        p for line in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE) for p in line.split()
    }
    assert copied == {"pyproject.toml", "README.md", "gateway"}
    assert all(f"!{p}" in ignore or f"!{p}/" in ignore for p in copied)


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("shutdown.gracePeriodSeconds=0", "gracePeriodSeconds"),
        ("log.format=xml", "log.format"),
        ("http.port=70000", "http.port"),
        ("config.not-an-env-name=1", "config"),
        ("tubemq.tls.verify=maybe", "verify"),
        ("rateLimits.burstSeconds=0", "burstSeconds"),
        ("cors.allowOrigins[0]=console.example/app", "allowOrigins"),
    ],
)
def test_values_schema_rejects_mistakes(flag: str, complaint: str) -> None:
    done = run_helm("template", RELEASE, str(CHART), "--set", flag, check=False)
    assert done.returncode != 0 and complaint in done.stderr


def test_tubemq_tls_and_credentials_values() -> None:
    values = {
        "masters": "master-0.tubemq:8716",
        "tubemq": {
            "tls": {
                "enabled": True,
                "secretName": "tubemq-ca",
                "clientCertificate": True,
                "serverHostname": "tubemq",
            },
            "auth": {"username": "gateway"},
        },
        "auth": {"env": {"TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD": "pa55"}},
    }
    manifests = render(values)
    data = next(m for m in by_kind(manifests, "ConfigMap") if m["metadata"]["name"] == FULLNAME)["data"]
    folder = "/etc/tubemq-gateway/tubemq-tls"
    assert {k: v for k, v in data.items() if k.startswith("TUBEMQ_GATEWAY_TUBEMQ__")} == {
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__ENABLED": "true",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__VERIFY": "true",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE": f"{folder}/ca.crt",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CERT_FILE": f"{folder}/tls.crt",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__KEY_FILE": f"{folder}/tls.key",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__SERVER_HOSTNAME": "tubemq",
        "TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME": "gateway",
    }
    assert "pa55" not in json.dumps(data), "the password stays in the Secret"
    secret = one(manifests, "Secret")
    assert base64.b64decode(secret["data"]["TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD"]) == b"pa55"
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "tubemq-tls")
    assert volume["secret"]["secretName"] == "tubemq-ca"
    mount = next(m for m in container(manifests)["volumeMounts"] if m["name"] == "tubemq-tls")
    assert mount == {"name": "tubemq-tls", "mountPath": folder, "readOnly": True}
    defaults = render()
    assert not [k for k in one(defaults, "ConfigMap")["data"] if k.startswith("TUBEMQ_GATEWAY_TUBEMQ__")]
    assert all(
        v["name"] != "tubemq-tls" for v in one(defaults, "Deployment")["spec"]["template"]["spec"]["volumes"]
    )


def test_a_tubemq_user_without_a_password_is_refused() -> None:
    done = run_helm("template", RELEASE, str(CHART), "--set", "tubemq.auth.username=gateway", check=False)
    assert done.returncode != 0 and "TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD" in done.stderr
    kept = render({"tubemq": {"auth": {"username": "gateway"}}, "auth": {"existingSecret": "mine"}})
    assert one(kept, "ConfigMap")["data"]["TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME"] == "gateway"
