"""The chart's ``workers`` value: one worker process per CPU of the container's limit unless set."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.deploy_tools import one, render


def _workers(values: dict[str, Any] | None) -> str:
    pod = one(render(values), "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    value: str = env["TUBEMQ_GATEWAY_WORKERS"]["value"]
    return value


@pytest.mark.parametrize(
    ("values", "workers"),
    [
        (None, "1"),  # the default limit: cpu "1"
        ({"resources": {"limits": {"cpu": "1500m"}}}, "2"),
        ({"resources": {"limits": {"cpu": 4}}}, "4"),
        ({"resources": {"limits": {"cpu": "2.5"}}}, "3"),
        ({"resources": {"limits": {"cpu": "100m"}}}, "1"),
        ({"resources": {"limits": None, "requests": {"cpu": "3"}}}, "3"),
        ({"resources": {"limits": None, "requests": None}}, "0"),  # the gateway counts its CPUs
        ({"workers": 6}, "6"),
    ],
)
def test_workers_follow_the_cpu_limit(values: dict[str, Any] | None, workers: str) -> None:
    assert _workers(values) == workers
