"""The chart's http.trustedProxies: loopback only (the gateway's default) without an ingress, the pod network
(forwarding.allow's IP ranges) with one, and always a value the gateway's settings accept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config import HttpSettings
from tests.support.deploy_tools import RELEASE, render

VARIABLE = "TUBEMQ_GATEWAY_HTTP__TRUSTED_PROXIES"
FULLNAME = f"{RELEASE}-tubemq-gateway"
PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"]


def trusted(values: dict[str, Any] | None) -> list[str] | None:
    """The rendered setting (None: unset, the gateway's default), checked to load as settings."""
    (config,) = [m for m in render(values) if m["kind"] == "ConfigMap" and m["metadata"]["name"] == FULLNAME]
    raw = config["data"].get(VARIABLE)
    if raw is None:
        return None
    loaded = HttpSettings(trusted_proxies=raw).trusted_proxies
    assert loaded == json.loads(raw)
    return loaded


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (None, None),
        ({"ingress": {"enabled": True}}, PRIVATE),
        (
            {
                "ingress": {"enabled": True},
                "forwarding": {"allow": ["10.244.0.0/16", "*.pods.local", "gw-0"]},
            },
            ["10.244.0.0/16"],
        ),
        (
            {"ingress": {"enabled": True}, "http": {"port": 8080, "trustedProxies": ["10.3.0.7"]}},
            ["10.3.0.7"],
        ),
        ({"http": {"port": 8080, "trustedProxies": ["10.3.0.0/24", "::1"]}}, ["10.3.0.0/24", "::1"]),
    ],
    ids=["default", "ingress", "ingress-narrowed-allow", "ingress-explicit", "explicit"],
)
def test_trusted_proxies(values: dict[str, Any] | None, expected: list[str] | None) -> None:
    assert trusted(values) == expected
