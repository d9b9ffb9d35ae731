"""The dashboard and alerts count replicas (pods), not worker processes: a real Prometheus scrapes one
``serve --workers 2`` (each series once per worker, label ``worker``: gateway/observability/worker_merge.py)
and the dashboard's replica counts read 1."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import Settings
from tests.support.dashboard_load import Target, publish_and_poll, until_every_panel_has_data
from tests.support.deploy_tools import ROOT, prometheus_tool
from tests.support.prometheus_support import JOB, concrete, query, running_prometheus, scalar
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, start_workers

DASHBOARD = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"
#: panels whose figure is a number of replicas
REPLICA_COUNTS = ("Ready replicas", "Master sessions up")
#: gauges of a process's state: one series per worker, so a panel adding them up counts workers
PER_PROCESS_STATE = ("ready", "draining", "master_session_up", "build_info")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def _targets(dashboard: dict[str, Any], title: str) -> list[str]:
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == title and p["type"] != "row"]
    return [t["expr"] for t in panel["targets"]]


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    prometheus_tool("prometheus")  # skip before starting anything when it is missing
    gateway = start_workers(
        tmp_path_factory.mktemp("workers"),
        2,
        "--embedded-topics",
        "demo:2,orders:3",
        env={"TUBEMQ_GATEWAY_TUBEMQ__GROUP_LAG_INTERVAL": "1"},  # the group lag panels within the wait
    )
    try:
        yield gateway
    finally:
        gateway.stop()


def test_process_state_is_folded_per_replica_before_it_is_summed(dashboard: dict[str, Any]) -> None:
    """Without Prometheus: every query reading a per-process state gauge folds the workers away first."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in PER_PROCESS_STATE:
                for found in re.finditer(rf"tubemq_gateway_{name}\{{", target["expr"]):
                    before = target["expr"][: found.start()]
                    assert re.search(r"(min|max) without \(worker\) \($", before), (panel["title"], before)


@pytest.mark.slow  # a supervisor with two workers under load, and a real Prometheus scraping it
async def test_one_replica_of_two_workers_counts_once(
    dashboard: dict[str, Any], two_workers: WorkerGateway, tmp_path: Path
) -> None:
    target = Target(f"127.0.0.1:{two_workers.http_port}", f"127.0.0.1:{two_workers.grpc_port}")
    stop = asyncio.Event()
    load = asyncio.create_task(publish_and_poll(target, stop))
    try:
        async with running_prometheus(tmp_path, [target.http]) as prom:
            await _replica_counts(dashboard, prom)
            await _fetch_ahead_per_worker(dashboard, prom)
            queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
            await until_every_panel_has_data(prom, queries, load)
    finally:
        stop.set()
        assert await load > 0


async def _replica_counts(dashboard: dict[str, Any], prom: httpx.AsyncClient) -> None:
    """Each replica-count panel reads 1 where the same series summed read 2."""
    selector = f'{{job="{JOB}"}}'

    async def both_workers_ready() -> bool:
        return await scalar(prom, f"count(tubemq_gateway_ready{selector} == 1)") == 2

    # The premise: one scrape target, each state series twice (one per worker).
    await eventually(both_workers_ready, timeout=30, what="both workers scraped ready", step=0.3)
    assert len(await query(prom, f'up{{job="{JOB}"}}')) == 1
    for title in REPLICA_COUNTS:
        for expr in _targets(dashboard, title):
            assert await scalar(prom, concrete(expr)) == 1, f"{title}: {concrete(expr)}"
    # The old sums read 2 here: the test tells a per-worker sum from a per-replica count.
    assert await scalar(prom, f"sum(tubemq_gateway_ready{selector})") == 2


async def _fetch_ahead_per_worker(dashboard: dict[str, Any], prom: httpx.AsyncClient) -> None:
    """The fetch-ahead panel shows one line per worker process, and the cap of one worker (the default
    consumers.prefetch_worker_bytes, not the sum over the workers)."""
    held, cap = _targets(dashboard, "Fetched ahead per worker")
    lines = await query(prom, concrete(held))
    assert sorted(line["metric"].get("worker") for line in lines) == ["0", "1"], lines
    assert await scalar(prom, concrete(cap)) == Settings().consumers.prefetch_worker_bytes
