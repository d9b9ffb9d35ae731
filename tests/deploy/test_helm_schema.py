"""values.schema.json: every object closed (a misspelt key fails), Kubernetes-shaped values (resources,
probes, security contexts, affinity, tolerations, ...) type-checked, and good values accepted by
``helm lint --strict`` and ``helm template`` (what ``helm install --dry-run`` renders; install itself is not
run, even with ``--dry-run=client`` it looks for a Kubernetes API server)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.service.access import ACTIONS
from tests.support.chart_support import refused, validate_manifests
from tests.support.deploy_tools import CHART, RELEASE, render, run_helm

SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
#: Open on purpose: maps whose keys are the user's (names, labels) and pass-through Kubernetes objects.
OPEN_OBJECTS = {"global", "claims", "stringMap", "settingsMap"}

#: Values a careful operator could set, using every option of the new chart features at once.
GOOD: dict[str, Any] = {
    "image": {"repository": "registry.example/tubemq-gateway", "digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": [{"name": "registry"}],
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}},
    "probes": {
        "liveness": {
            "initialDelaySeconds": 0,
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 4,
        },
        "readiness": {
            "initialDelaySeconds": 1,
            "periodSeconds": 3,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        "startup": {"periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 60},
    },
    "podSecurityContext": {
        "runAsNonRoot": True,
        "runAsUser": 20000,
        "fsGroup": 20000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    },
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}
                ]
            }
        }
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 2,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "tubemq-gateway"}},
        }
    ],
    "extraEnv": [
        {"name": "TUBEMQ_GATEWAY_POOL__IDLE_TIMEOUT", "value": "120"},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ],
    "extraEnvFrom": [
        {"secretRef": {"name": "more-settings"}},
        {"configMapRef": {"name": "x", "optional": True}},
    ],
    "extraVolumes": [{"name": "ca-bundle", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [{"name": "ca-bundle", "mountPath": "/etc/ca", "readOnly": True}],
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "tls": [{"secretName": "gw-tls", "hosts": ["tubemq-gateway.example.com"]}],
        "grpc": {"enabled": True, "tls": [{"secretName": "gw-grpc-tls", "hosts": ["grpc.example.com"]}]},
    },
    "networkPolicy": {
        "enabled": True,
        "ingressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}],
        "adminFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "tubemq": {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [8715, 8123]},
        "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.30.0.5/32"}}], "ports": [{"port": 4317}]}],
    },
    "podDisruptionBudget": {"minAvailable": "50%", "maxUnavailable": ""},
    "autoscaling": {"enabled": False},
    "replicaCount": 3,
    "tests": {"topic": "smoke", "timeoutSeconds": 30},
}


def _good_values_file(tmp_path: Path) -> Path:
    path = tmp_path / "good-values.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    return path


def test_good_values_pass_lint_and_template(tmp_path: Path) -> None:
    values = _good_values_file(tmp_path)
    run_helm("lint", "--strict", str(CHART), "-f", str(values))
    run_helm("template", RELEASE, str(CHART), "--namespace", "tubemq", "-f", str(values))
    validate_manifests(render(GOOD))


@pytest.mark.parametrize(
    "flag",
    [
        "ingres.enabled=true",
        "ingress.enable=true",
        "ingress.grpc.enbled=true",
        "image.digets=sha256:00",
        "resources.request.cpu=1",
        "probes.liveness.periodSecond=5",
        "probes.readyness.periodSeconds=5",
        "podSecurityContext.runAsUsr=1",
        "securityContext.readOnlyRootFilesytem=true",
        "securityContext.capabilities.dorp[0]=ALL",
        "metrics.serviceMonitor.enbled=true",
        "metrics.prometheusRule.lables.a=b",
        "dashboard.namepsace=x",
        "service.httpport=80",
        "autoscaling.maxReplica=3",
        "podDisruptionBudget.maxUnavailible=1",
        "serviceAccount.annotation.a=b",
        "spread.maxskew=1",
        "tolerations[0].efect=NoSchedule",
        "topologySpreadConstraints[0].maxskew=1",
        "affinity.podAntiAfinity.x=1",
        "extraEnv[0].nmae=X",
        "extraVolumeMounts[0].mountpath=/x",
        "networkPolicy.ingresFrom[0].podSelector.matchLabels.a=b",
        "networkPolicy.tubemq.port[0]=1",
        "tests.enabeld=false",
        "auth.rules.rules[0].action[0]=publish",
        "grpc.enable=false",
        "log.levle=debug",
    ],
)
def test_a_misspelt_key_is_refused(flag: str) -> None:
    stderr = refused(None, "--set", flag)
    named = re.search(r"Additional property (\w+) is not allowed", stderr)
    assert named, stderr
    assert named.group(1) in re.split(r"[.\[\]=]", flag), f"the error names {named.group(1)}, not the typo"


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("resources=foo", "resources"),
        ("resources.limits.cpu=lots", "resources.limits.cpu"),
        ("nodeSelector=foo", "nodeSelector"),
        ("nodeSelector.zone=1", "nodeSelector.zone"),
        ("tolerations=foo", "tolerations"),
        ("tolerations[0].operator=Maybe", "operator"),
        ("affinity=foo", "affinity"),
        ("probes.liveness.periodSeconds=0", "periodSeconds"),
        ("probes.startup=5", "probes.startup"),
        ("podSecurityContext.runAsUser=-1", "runAsUser"),
        ("securityContext.privileged=yes", "privileged"),
        ("securityContext.seccompProfile.type=Loose", "type"),
        ("image.digest=latest", "image.digest"),
        ("podDisruptionBudget.maxUnavailable=lots", "maxUnavailable"),
        ("extraEnv[0].value=1", "extraEnv.0"),
        ("extraEnvFrom=foo", "extraEnvFrom"),
        ("extraVolumes[0].name=lonely", "extraVolumes.0"),
        ("extraVolumeMounts[0].name=x", "mountPath"),
        ("ingress.proxyBodySize=huge", "proxyBodySize"),
        ("ingress.hosts[0].paths[0].pathType=Glob", "pathType"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("networkPolicy.tubemq.ports[0]=0", "ports.0"),
        ("spread.antiAffinityWeight=1000", "antiAffinityWeight"),
        ("auth.rules.rules[0].actions[0]=everything", "actions.0"),
        ("tests.topic=no spaces", "tests.topic"),
        ("tests.topic=x", "tests.topic"),
    ],
)
def test_a_wrong_value_is_refused(flag: str, complaint: str) -> None:
    stderr = refused(None, "--set", flag)
    assert complaint in stderr, stderr


def test_lint_refuses_a_typo(tmp_path: Path) -> None:
    values = tmp_path / "typo.yaml"
    values.write_text("ingres:\n  enabled: true\n", encoding="utf-8")
    done = run_helm("lint", "--strict", str(CHART), "-f", str(values), check=False)
    assert done.returncode != 0 and "Additional property ingres is not allowed" in done.stdout + done.stderr


def _objects(node: Any, path: str = "#") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append((path, node))
        for key, value in node.items():
            found += _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _objects(value, f"{path}/{index}")
    return found


def test_every_object_in_the_schema_is_closed() -> None:
    """An object schema either lists its properties and allows no others, or says what every other key
    holds (a map); only the known open ones are exempt."""
    for path, node in _objects(SCHEMA):
        name = path.rsplit("/", 1)[-1]
        if name in ("if", "then"):  # conditions on an object described beside them
            continue
        if name in OPEN_OBJECTS or (
            path.startswith("#/definitions/volume/properties/") and node == {"type": "object"}
        ):
            continue
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path} allows unknown keys"
        else:
            assert isinstance(node.get("additionalProperties"), dict), f"{path} is an open object"


def test_every_value_of_values_yaml_is_in_the_schema() -> None:
    """Walk values.yaml: each key is a property of the schema at that place (helm validates the defaults
    too, so this mostly keeps the schema's documentation complete)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    def walk(value: Any, schema: dict[str, Any], where: str) -> None:
        schema = resolve(schema)
        if isinstance(value, dict) and "properties" in schema:
            for key, item in value.items():
                assert key in schema["properties"], f"{where}.{key} is not in values.schema.json"
                walk(item, schema["properties"][key], f"{where}.{key}")

    walk(values, SCHEMA, "values")


def test_rule_actions_are_the_gateways() -> None:
    rule = SCHEMA["properties"]["auth"]["properties"]["rules"]["properties"]["rules"]["items"]
    assert set(rule["properties"]["actions"]["items"]["enum"]) == set(ACTIONS) | {"*"}
