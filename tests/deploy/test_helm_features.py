"""The chart's scheduling, disruption, ingress, image, extension and NetworkPolicy values: what each renders,
and that the result is valid Kubernetes (kubernetes-validate)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConsumerSettings, LimitSettings
from tests.support.chart_support import FULLNAME, gateway_container, pod_spec, refused, validate_manifests
from tests.support.deploy_tools import RELEASE, by_kind, one, render

SELECTOR = {"app.kubernetes.io/name": "tubemq-gateway", "app.kubernetes.io/instance": RELEASE}
NGINX = "nginx.ingress.kubernetes.io/"


def _named(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(m for m in by_kind(manifests, kind) if m["metadata"]["name"] == name)


def test_replicas_spread_softly_by_default() -> None:
    pod = pod_spec(render())
    constraints = pod["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    for constraint in constraints:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", "a preference: never leaves a pod pending"
        assert constraint["maxSkew"] == 1 and constraint["labelSelector"] == {"matchLabels": SELECTOR}
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == {
        "weight": 100,
        "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": SELECTOR},
        },
    }


def test_own_scheduling_values_replace_or_join_the_defaults() -> None:
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}]
        }
    }
    own_constraint = {"maxSkew": 3, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}
    pod = pod_spec(
        render({"affinity": {"nodeAffinity": node_affinity}, "topologySpreadConstraints": [own_constraint]})
    )
    assert pod["topologySpreadConstraints"] == [own_constraint]
    assert pod["affinity"]["nodeAffinity"] == node_affinity
    assert "podAntiAffinity" in pod["affinity"], "the soft anti-affinity joins an affinity without one"
    hard = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": SELECTOR}}
        ]
    }
    assert pod_spec(render({"affinity": {"podAntiAffinity": hard}}))["affinity"] == {"podAntiAffinity": hard}
    plain = pod_spec(render({"spread": {"enabled": False}}))
    assert "affinity" not in plain and "topologySpreadConstraints" not in plain
    one_key = pod_spec(render({"spread": {"topologyKeys": ["kubernetes.io/hostname"], "maxSkew": 2}}))
    assert [(c["topologyKey"], c["maxSkew"]) for c in one_key["topologySpreadConstraints"]] == [
        ("kubernetes.io/hostname", 2)
    ]


def test_pdb_never_blocks_a_drain() -> None:
    default = one(render(), "PodDisruptionBudget")["spec"]
    assert default["maxUnavailable"] == 1 and "minAvailable" not in default
    single = render({"autoscaling": {"enabled": False}, "replicaCount": 1})
    assert one(single, "Deployment")["spec"]["replicas"] == 1
    assert one(single, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1, (
        "one replica can still be drained"
    )
    for values in (
        {"autoscaling": {"enabled": False}, "replicaCount": 1},
        {"autoscaling": {"minReplicas": 2, "maxReplicas": 4}},
    ):
        stderr = refused({**values, "podDisruptionBudget": {"minAvailable": 2, "maxUnavailable": ""}})
        assert "would block every node drain" in stderr
    ok = render({"replicaCount": 3, "autoscaling": {"enabled": False}, "podDisruptionBudget": {
        "minAvailable": 2, "maxUnavailable": ""}})  # fmt: skip
    assert one(ok, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert "set minAvailable or maxUnavailable" in refused({"podDisruptionBudget": {"maxUnavailable": ""}})
    assert not by_kind(render({"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")


def test_ingress_defaults_fit_long_polls_sse_and_publishes() -> None:
    ingress = one(render({"ingress": {"enabled": True}}), "Ingress")
    annotations = ingress["metadata"]["annotations"]
    timeout = int(annotations[NGINX + "proxy-read-timeout"])
    consumers = ConsumerSettings()
    assert timeout > consumers.poll_max_timeout + consumers.assignment_wait, "a long poll outlives the proxy"
    assert timeout > consumers.sse_keepalive, "an idle SSE stream outlives the proxy"
    assert annotations[NGINX + "proxy-send-timeout"] == str(timeout)
    assert annotations[NGINX + "proxy-buffering"] == "off", "SSE events must not wait in nginx's buffer"
    body = annotations[NGINX + "proxy-body-size"]
    assert body.endswith("m") and int(body[:-1]) * 1024 * 1024 == LimitSettings().max_request_bytes
    assert NGINX + "backend-protocol" not in annotations
    mine = {NGINX + "proxy-read-timeout": "600", "cert-manager.io/cluster-issuer": "le"}
    custom = one(render({"ingress": {"enabled": True, "annotations": mine}}), "Ingress")["metadata"]
    assert custom["annotations"][NGINX + "proxy-read-timeout"] == "600", "the user's annotation wins"
    assert custom["annotations"]["cert-manager.io/cluster-issuer"] == "le"
    bare = render({"ingress": {"enabled": True, "nginxDefaults": False, "annotations": mine}})
    assert one(bare, "Ingress")["metadata"]["annotations"] == mine
    tls = render({"ingress": {"enabled": True}, "tls": {"enabled": True, "secretName": "gw-tls"}})
    assert one(tls, "Ingress")["metadata"]["annotations"][NGINX + "backend-protocol"] == "HTTPS"
    stderr = refused(
        {"ingress": {"enabled": True}, "config": {"TUBEMQ_GATEWAY_CONSUMERS__POLL_MAX_TIMEOUT": 300}}
    )
    assert "must exceed the longest long poll" in stderr
    assert by_kind(
        render({"ingress": {"enabled": True, "proxyTimeoutSeconds": 400},
                "config": {"TUBEMQ_GATEWAY_CONSUMERS__POLL_MAX_TIMEOUT": 300}}),
        "Ingress",
    )  # fmt: skip


def test_grpc_gets_an_ingress_of_its_own() -> None:
    values = {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "grpc": {"enabled": True, "tls": [{"secretName": "grpc-tls", "hosts": ["grpc.example"]}],
                     "hosts": [{"host": "grpc.example", "paths": [{"path": "/", "pathType": "Prefix"}]}]},
        }
    }  # fmt: skip
    manifests = render(values)
    grpc = _named(manifests, "Ingress", f"{FULLNAME}-grpc")
    annotations = grpc["metadata"]["annotations"]
    assert annotations[NGINX + "backend-protocol"] == "GRPC"
    assert annotations[NGINX + "proxy-body-size"] == "0", "a PublishStream is one request body"
    assert int(annotations[NGINX + "proxy-read-timeout"]) == 3600
    assert NGINX + "proxy-buffering" not in annotations
    assert grpc["spec"]["ingressClassName"] == "nginx", "defaults to ingress.className"
    assert grpc["spec"]["tls"] == [{"hosts": ["grpc.example"], "secretName": "grpc-tls"}]
    (path,) = grpc["spec"]["rules"][0]["http"]["paths"]
    assert path["backend"]["service"] == {"name": FULLNAME, "port": {"number": 9090}}
    assert _named(manifests, "Ingress", FULLNAME)["spec"]["rules"][0]["http"]["paths"][0]["backend"][
        "service"
    ]["port"] == {"number": 8080}
    alone = render({"ingress": {"grpc": {"enabled": True}}, "tls": {"enabled": True, "secretName": "t"}})
    assert [m["metadata"]["name"] for m in by_kind(alone, "Ingress")] == [f"{FULLNAME}-grpc"]
    assert one(alone, "Ingress")["metadata"]["annotations"][NGINX + "backend-protocol"] == "GRPCS"
    assert "needs grpc.enabled" in refused(
        {"ingress": {"grpc": {"enabled": True}}, "grpc": {"enabled": False}}
    )
    validate_manifests(manifests)


def test_image_digest_overrides_the_tag() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    assert gateway_container(render())["image"] == "tubemq-gateway:0.1.0"
    assert gateway_container(render({"image": {"tag": "0.2.0"}}))["image"] == "tubemq-gateway:0.2.0"
    pinned = render({"image": {"repository": "reg.example/gw", "tag": "0.2.0", "digest": digest}})
    assert gateway_container(pinned)["image"] == f"reg.example/gw@{digest}"
    test_pod = one(pinned, "Pod")["spec"]["containers"][0]
    assert test_pod["image"] == f"reg.example/gw@{digest}", "helm test runs the same image"


def test_extra_env_volumes_and_mounts() -> None:
    extra_env = [
        {"name": "TUBEMQ_GATEWAY_POOL__IDLE_TIMEOUT", "value": "120"},
        {"name": "PEER", "value": "$(POD_IP)"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    values = {
        "extraEnv": extra_env,
        "extraEnvFrom": [{"secretRef": {"name": "more"}}],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ca", "readOnly": True}],
    }
    manifests = render(values)
    container = gateway_container(manifests)
    names = [e["name"] for e in container["env"]]
    assert container["env"][-3:] == extra_env, "after the chart's own variables"
    assert names.index("POD_IP") < names.index("PEER"), "$(POD_IP) expands only from earlier variables"
    assert container["envFrom"][0] == {"configMapRef": {"name": FULLNAME}}
    assert container["envFrom"][-1] == {"secretRef": {"name": "more"}}, "after the chart's ConfigMap"
    assert pod_spec(manifests)["volumes"][-1] == {"name": "ca", "configMap": {"name": "corporate-ca"}}
    assert container["volumeMounts"][-1] == {"name": "ca", "mountPath": "/etc/ca", "readOnly": True}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], "the chart's own stay"
    validate_manifests(manifests)


def _rules(policy: dict[str, Any], direction: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = policy["spec"][direction]
    return rules


def _ports(rule: dict[str, Any]) -> set[Any]:
    return {p["port"] for p in rule["ports"]}


def test_network_policy_is_opt_in_and_allows_what_the_gateway_needs() -> None:
    assert not by_kind(render(), "NetworkPolicy")
    manifests = render({"networkPolicy": {"enabled": True}})
    policy = one(manifests, "NetworkPolicy")
    assert policy["spec"]["podSelector"] == {"matchLabels": SELECTOR}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    api, admin = _rules(policy, "ingress")
    assert _ports(api) == {"http", "grpc"} and "from" not in api, "empty ingressFrom: from anywhere"
    assert _ports(admin) == {"admin"} and admin["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ], "only the named namespaces (adminNamespaces)"
    dns, peers, tubemq = _rules(policy, "egress")
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    # forwarded REST requests and relayed gRPC calls to the pod holding the instance
    assert _ports(peers) == {8080, 9090} and peers["to"] == [{"podSelector": {"matchLabels": SELECTOR}}]
    assert _ports(tubemq) == {8715, 8716, 8123, 8124} and "to" not in tubemq
    validate_manifests(manifests)
    any_resolver = render({"networkPolicy": {"enabled": True, "dns": {"to": []}}})
    dns = _rules(one(any_resolver, "NetworkPolicy"), "egress")[0]
    assert _ports(dns) == {53} and "to" not in dns, "NodeLocal DNSCache and other resolvers: dns.to []"


def test_network_policy_narrowed() -> None:
    ingress_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    otel = {"to": [{"ipBlock": {"cidr": "10.30.0.5/32"}}], "ports": [{"port": 4317, "protocol": "TCP"}]}
    values = {
        "networkPolicy": {
            "enabled": True,
            "ingressFrom": [ingress_ns],
            "adminNamespaces": [],  # only the peers of adminFrom
            "adminFrom": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}],
            "tubemq": {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [8715, 8123]},
            "dns": {"enabled": False},
            "extraEgress": [otel],
        },
        "auth": {"jwt": {"issuer": "https://id.example", "audience": ["gw"],
                         "jwksUrl": "https://id.example:8443/keys"}},
        "grpc": {"enabled": False},
    }  # fmt: skip
    manifests = render(values)
    policy = one(manifests, "NetworkPolicy")
    api, admin = _rules(policy, "ingress")
    assert _ports(api) == {"http"}
    test_pod_labels = one(manifests, "Pod")["metadata"]["labels"]
    assert api["from"][0] == ingress_ns
    assert {"podSelector": {"matchLabels": SELECTOR}} in api["from"], "replicas forward to each other"
    test_peer = next(p for p in api["from"][1:] if p["podSelector"]["matchLabels"] != SELECTOR)
    assert test_peer["podSelector"]["matchLabels"].items() <= test_pod_labels.items(), "helm test gets in"
    assert admin["from"] == [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]
    peers, tubemq, jwks, extra = _rules(policy, "egress")
    assert _ports(peers) == {8080}
    assert tubemq["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}] and _ports(tubemq) == {8715, 8123}
    assert _ports(jwks) == {8443}
    assert extra == otel
    validate_manifests(manifests)
    jwt = {"issuer": "https://id.example", "audience": ["gw"], "jwksUrl": "https://id.example/keys"}
    default_port = render({"networkPolicy": {"enabled": True}, "auth": {"jwt": jwt}})
    assert _ports(_rules(one(default_port, "NetworkPolicy"), "egress")[-1]) == {443}


@pytest.mark.parametrize(
    "values", [{"admin": {"enabled": False}}, {"tls": {"enabled": True, "secretName": "t"}}]
)
def test_network_policy_follows_the_listeners(values: dict[str, Any]) -> None:
    policy = one(render({**values, "networkPolicy": {"enabled": True}}), "NetworkPolicy")
    ingress = _rules(policy, "ingress")
    if values.get("admin"):
        assert len(ingress) == 1 and _ports(ingress[0]) == {"http", "grpc"}
    else:
        assert len(ingress) == 2
