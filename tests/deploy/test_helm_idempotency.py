"""The chart's ``idempotency`` values: the Redis URL and the Secret of its password reach the gateway, and
the chart refuses to render idempotency for more than one pod without a store they share."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import Settings
from tests.support.chart_support import gateway_container, refused, validate_manifests
from tests.support.deploy_tools import render

REDIS = {"redisUrl": "redis://redis.gateway:6379/0", "passwordSecret": {"name": "gw-redis", "key": "pw"}}


def _env(values: dict[str, Any] | None = None) -> dict[str, Any]:
    manifests = render(values)
    validate_manifests(manifests)
    return {e["name"]: e for e in gateway_container(manifests)["env"]}


def test_by_default_nothing_is_set() -> None:
    assert not [name for name in _env() if name.startswith("TUBEMQ_GATEWAY_IDEMPOTENCY__")]


def test_the_redis_url_and_its_password_secret_reach_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env({"idempotency": {"enabled": True, **REDIS}})
    url = env["TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL"]["value"]
    assert url == "redis://redis.gateway:6379/0"
    assert env["TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "gw-redis",
        "key": "pw",
    }
    monkeypatch.setenv("TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL", url)
    monkeypatch.setenv("TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_PASSWORD", "from-the-secret")
    settings = Settings()
    assert settings.idempotency.redis_url == url
    assert settings.idempotency.redis_password is not None
    assert settings.idempotency.redis_password.get_secret_value() == "from-the-secret"


@pytest.mark.parametrize(
    "pods",
    [{}, {"autoscaling": {"enabled": False}, "replicaCount": 3}],
    ids=["autoscaling", "replicas"],
)
def test_idempotency_for_several_pods_without_redis_is_refused(pods: dict[str, Any]) -> None:
    stderr = refused({"idempotency": {"enabled": True}, **pods})
    assert "idempotency.enabled with more than one pod" in stderr and "idempotency.redisUrl" in stderr


def test_one_pod_keeps_its_own_keys() -> None:
    env = _env({"idempotency": {"enabled": True}, "autoscaling": {"enabled": False}, "replicaCount": 1})
    assert "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL" not in env
