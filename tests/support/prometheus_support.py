"""A real Prometheus for the tests: scrapes gateways every second with the chart's alert rules, and answers
PromQL queries (the dashboard's and the alerts'). The Debian package ``prometheus`` provides it
(``scripts/ensure_prometheus.sh``); without it the tests skip, saying so."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.deploy_tools import NAMESPACE, RELEASE, alert_rules_file, prometheus_tool, render
from tests.support.serving import free_port

#: the job name the chart's alert rules select (ServiceMonitor: the Service name)
JOB = f"{RELEASE}-tubemq-gateway"
RATE_WINDOW = "10s"
SCRAPE = "1s"


def concrete(expr: str) -> str:
    """A dashboard query with its variables set as Grafana sets them for "All" and a 1 s scrape."""
    return (
        expr.replace("$job", JOB)
        .replace("$namespace", ".*")
        .replace("$pod", ".*")
        .replace("$__rate_interval", RATE_WINDOW)
    )


def scrape_job(targets: list[str], job: str = JOB, **extra: Any) -> dict[str, Any]:
    """A scrape config of ``targets`` (host:port) labelled as the chart's ServiceMonitor would be; ``extra``:
    more scrape settings (scheme, tls_config...)."""
    return {
        "job_name": job,
        "static_configs": [{"targets": targets, "labels": {"namespace": NAMESPACE}}],
        **extra,
    }


def _config(directory: Path, jobs: list[dict[str, Any]], rules: Path) -> Path:
    config = {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE, "scrape_timeout": SCRAPE},
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def query(prom: httpx.AsyncClient, expr: str) -> list[dict[str, Any]]:
    answer = await prom.get("/api/v1/query", params={"query": expr})
    body = answer.json()
    assert answer.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def scalar(prom: httpx.AsyncClient, expr: str) -> float | None:
    """The value of a query answering one series, None when it answers none."""
    result = await query(prom, expr)
    assert len(result) <= 1, f"{expr}: {result}"
    return float(result[0]["value"][1]) if result else None


@asynccontextmanager
async def running_prometheus(
    directory: Path, targets: list[str], jobs: list[dict[str, Any]] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A real Prometheus scraping ``targets`` (host:port, /metrics; or the scrape configs ``jobs``) every
    second with the chart's alert rules, until it has scraped every target once (with ``jobs``: until
    ``targets`` of them are up); yields an HTTP client on its API."""
    prometheus, promtool = prometheus_tool("prometheus"), prometheus_tool("promtool")
    rules = alert_rules_file(render({"metrics": {"prometheusRule": {"enabled": True}}}), directory)
    config = _config(directory, jobs if jobs is not None else [scrape_job(targets)], rules)
    pipe, merged = asyncio.subprocess.PIPE, asyncio.subprocess.STDOUT
    checked = await asyncio.create_subprocess_exec(
        promtool, "check", "config", str(config), stdout=pipe, stderr=merged
    )
    output, _ = await checked.communicate()
    assert checked.returncode == 0, output.decode()
    port = free_port()
    with (directory / "prometheus.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as prom:
                await _until_scraped(prom, proc, len(targets))
                yield prom
        finally:
            proc.terminate()
            await proc.wait()


async def _until_scraped(prom: httpx.AsyncClient, proc: asyncio.subprocess.Process, targets: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.returncode is None, "prometheus exited"
        with contextlib.suppress(httpx.HTTPError):
            if (await prom.get("/-/ready")).status_code == 200 and len(
                await query(prom, "up == 1")
            ) == targets:
                return
        await asyncio.sleep(0.2)
    raise AssertionError("prometheus did not scrape the gateway in 20 s")
