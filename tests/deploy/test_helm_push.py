"""The chart's ``push`` values: the subscriptions go into a Secret mounted as the file the gateway reads (a
directory mount, so a changed Secret reaches the running pod), ``push.allow`` and the token key reach the
gateway, and what the chart renders is a subscriptions file the gateway loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.config import Settings
from gateway.service.push_outbound import EndpointPolicy
from gateway.service.push_subscription import SUBSCRIPTION_FIELDS, SubscriptionBounds, load_subscriptions
from tests.support.chart_support import gateway_container, pod_spec, validate_manifests
from tests.support.deploy_tools import CHART, render

HOOK = {
    "name": "orders-hook",
    "group": "orders-push",
    "topics": ["orders"],
    "endpoint": "https://hooks.example.com/tubemq",
    "retryTopic": "orders_retry",
    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
}


def _rendered(values: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    manifests = render(values)
    validate_manifests(manifests)
    (config,) = [
        m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("gateway")
    ]
    return manifests, config["data"]


def test_by_default_nothing_is_set() -> None:
    manifests, data = _rendered({})
    assert not [k for k in data if k.startswith("TUBEMQ_GATEWAY_PUSH__")]
    assert not [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"].endswith("-push")]


def test_subscriptions_reach_the_gateway_as_a_file_it_loads(tmp_path: Path, monkeypatch: Any) -> None:
    values = {
        "push": {"subscriptions": [HOOK], "allow": ["hooks.example.com"], "tokenKeySecret": "gw-push-key"}
    }
    manifests, data = _rendered(values)
    (secret,) = [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"].endswith("-push")]
    assert data["TUBEMQ_GATEWAY_PUSH__SUBSCRIPTIONS_FILE"] == "/etc/tubemq-gateway/push/subscriptions.json"
    assert data["TUBEMQ_GATEWAY_PUSH__TOKEN_KEY_FILE"] == "/etc/tubemq-gateway/push-token/push-token.pem"
    mounts = {m["name"]: m for m in gateway_container(manifests)["volumeMounts"]}
    assert mounts["push"]["mountPath"] == "/etc/tubemq-gateway/push" and "subPath" not in mounts["push"]
    volumes = {v["name"]: v for v in pod_spec(manifests)["volumes"]}
    assert volumes["push"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert volumes["push-token"]["secret"]["secretName"] == "gw-push-key"
    # What the pod reads: the Secret's file and the ConfigMap's environment give the gateway's settings.
    path = tmp_path / "subscriptions.json"
    path.write_text(secret["stringData"]["subscriptions.json"], encoding="utf-8")
    monkeypatch.setenv("TUBEMQ_GATEWAY_PUSH__ALLOW", data["TUBEMQ_GATEWAY_PUSH__ALLOW"])
    settings = Settings()
    policy = EndpointPolicy.parse(settings.push.allow)
    (loaded,) = load_subscriptions(path, SubscriptionBounds(check_endpoint=policy.check_url), 10)
    assert loaded.name == "orders-hook" and loaded.secret


def test_an_existing_secret_is_mounted_instead() -> None:
    manifests, data = _rendered({"push": {"existingSecret": "my-push-file"}})
    volumes = {v["name"]: v for v in pod_spec(manifests)["volumes"]}
    assert volumes["push"]["secret"]["secretName"] == "my-push-file"
    assert "TUBEMQ_GATEWAY_PUSH__SUBSCRIPTIONS_FILE" in data and "TUBEMQ_GATEWAY_PUSH__ALLOW" not in data
    assert not [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"].endswith("-push")]


def test_the_redis_prefix_reaches_the_gateway(monkeypatch: Any) -> None:
    """Two releases sharing one Redis keep the subscriptions made through their APIs apart."""
    _, data = _rendered({"push": {"redisPrefix": "staging:push:"}})
    monkeypatch.setenv("TUBEMQ_GATEWAY_PUSH__REDIS_PREFIX", data["TUBEMQ_GATEWAY_PUSH__REDIS_PREFIX"])
    assert Settings().push.redis_prefix == "staging:push:"
    assert "TUBEMQ_GATEWAY_PUSH__REDIS_PREFIX" not in _rendered({})[1]  # the gateway's own default


def test_the_schema_knows_every_field_of_a_definition() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    item = schema["properties"]["push"]["properties"]["subscriptions"]["items"]
    assert set(item["properties"]) == SUBSCRIPTION_FIELDS
