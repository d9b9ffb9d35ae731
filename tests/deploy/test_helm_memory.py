"""The pod's memory limit and the publish bytes its workers may hold in flight agree, for 1, 2 and 4 CPUs
(``helm template``): without a memory limit the chart sizes it from the worker count; with one, the in-flight
cap is what it leaves; a limit that cannot hold the workers fails the render (templates/_memory.tpl)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_support import gateway_container, refused, validate_manifests
from tests.support.deploy_tools import render

MIB = 1024 * 1024
#: Idle RSS measured on a real TubeMQ (serve --workers 1/2/4, ready, a few publishes through every worker,
#: VmRSS): the supervisor 62.3 MiB, each worker 84.9-85.2 MiB, the single process of --workers 1 85.2 MiB.
MEASURED_SUPERVISOR_MIB = 62.3
MEASURED_WORKER_MIB = 85.2
#: Peak RSS (VmHWM) of each worker of serve --workers 2 under 32 and 64 concurrent 0.8 MB JSON publishes rose
#: 55-66 and 110-126 MiB over idle for about 13 and 26 MB of bodies in flight per worker: 4.5 MiB per MiB
BODY_PEAK_FACTOR = 4.5
#: limits.max_request_bytes, default: every worker's share of the in-flight cap must take one such body
MAX_REQUEST_MIB = 21


def _mebibytes(quantity: str) -> float:
    units = {"Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def _plan(values: dict[str, Any]) -> tuple[int, float, float | None, dict[str, Any]]:
    """(workers, memory limit MiB, in-flight publish cap MiB or None, resources) of a render."""
    manifests = render(values)
    validate_manifests(manifests)
    container = gateway_container(manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    inflight = env.get("TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES")
    resources: dict[str, Any] = container["resources"]
    limit = _mebibytes(resources["limits"]["memory"])
    workers = int(env["TUBEMQ_GATEWAY_WORKERS"])
    return workers, limit, None if inflight is None else int(inflight) / MIB, resources


def _fits(workers: int, limit: float, inflight: float) -> None:
    """The limit holds the measured idle processes plus the in-flight bodies at their peak, and each
    worker's share of the cap takes the largest publish."""
    supervisor = MEASURED_SUPERVISOR_MIB if workers > 1 else 0
    assert supervisor + workers * MEASURED_WORKER_MIB + BODY_PEAK_FACTOR * inflight <= limit
    assert inflight / workers >= MAX_REQUEST_MIB


@pytest.mark.parametrize(("cpu", "workers", "limit"), [("1", 1, 400), (2, 2, 800), ("4", 4, 1472)])
def test_the_chart_sizes_memory_from_the_worker_count(cpu: str | int, workers: int, limit: int) -> None:
    got_workers, got_limit, inflight, resources = _plan({"resources": {"limits": {"cpu": cpu}}})
    assert (got_workers, got_limit) == (workers, limit)
    assert inflight == 48 * workers
    _fits(workers, got_limit, inflight)
    assert resources["requests"]["memory"] == resources["limits"]["memory"], "requested as sized"
    assert resources["requests"]["cpu"] == "250m" and resources["limits"]["cpu"] == cpu


@pytest.mark.parametrize(
    ("cpu", "memory", "inflight"),
    [
        ("1", "512Mi", (512 - 96 - 64) // 5),  # the old default limit: 1 worker
        (2, "1Gi", (1024 - 64 - 2 * 96 - 64) // 5),
        ("4", "2Gi", (2048 - 64 - 4 * 96 - 64) // 5),
    ],
)
def test_a_given_limit_sizes_the_in_flight_cap(cpu: str | int, memory: str, inflight: int) -> None:
    workers, limit, got, resources = _plan({"resources": {"limits": {"cpu": cpu, "memory": memory}}})
    assert limit == _mebibytes(memory) and got == inflight
    assert got is not None
    _fits(workers, limit, got)
    assert resources["requests"]["memory"] == memory


def test_a_limit_that_cannot_hold_the_workers_fails_the_render() -> None:
    # The case: 4 CPUs, 4 workers, the old 512Mi limit.
    error = refused({"resources": {"limits": {"cpu": 4, "memory": "512Mi"}}})
    assert "cannot hold 4 worker(s)" in error and "at least 932Mi" in error
    assert "or leave resources.limits.memory out" in error
    # an explicit worker count counts the same
    assert "cannot hold 3 worker(s)" in refused({"workers": 3, "resources": {"limits": {"memory": "400Mi"}}})
    # a memory limit whose worker count the chart cannot know (no CPU anywhere): refused, not guessed
    error = refused({"resources": {"limits": {"cpu": None, "memory": "1Gi"}, "requests": None}})
    assert "needs a known worker count" in error
    # too few in-flight bytes per worker for the largest publish
    assert "cannot take one 21 MiB publish" in refused({"memory": {"inflightPublishPerWorkerMi": 16}})


def test_an_in_flight_cap_in_config_is_kept_and_sized_for() -> None:
    cap = 100 * MIB
    values = {"config": {"TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES": str(cap)}, "workers": 2}
    workers, limit, inflight, _ = _plan(values)
    assert inflight is None, "the chart does not set it over config's"
    assert limit == 64 + 2 * 96 + 5 * 100 + 64
    _fits(workers, limit, cap / MIB)
    values["resources"] = {"limits": {"cpu": 2, "memory": "400Mi"}}
    assert "cannot hold 2 worker(s)" in refused(values)
    unbounded = {"config": {"TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES": "0"}}
    assert "cannot fit a memory limit" in refused(unbounded)


def test_no_cpu_and_no_memory_limit_leaves_both_to_the_cluster() -> None:
    manifests = render({"resources": {"limits": None, "requests": None}})
    container = gateway_container(manifests)
    assert not container["resources"]
    names = {e["name"] for e in container["env"]}
    assert "TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES" not in names
