"""``tubemq-gateway serve`` as a user runs it: a real process, HTTP on a port, the embedded default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_support import free_port, stop_serve

from gateway.config import Settings
from gateway.process_server import served_urls

ROOT = Path(__file__).resolve().parent.parent


def test_serve_runs_on_the_embedded_cluster_and_publishes(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_MASTERS": ""}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(port),
            "--grpc-port",
            str(free_port()),
            "--embedded-topics",
            "orders:3",
            "--embedded-data-dir",
            str(tmp_path / "data"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "gateway did not become ready in 30 s"
            time.sleep(0.2)
        r = httpx.post(
            f"{base}/v1/topics/orders/messages", json={"messages": [{"value": "hi"}] * 3}, timeout=10
        )
        assert r.status_code == 200, r.text
        assert len(r.json()["results"]) == 3
        topic = httpx.get(f"{base}/v1/topics/orders", timeout=10).json()
        assert len(topic["partitions"]) == 3
    finally:
        code, _ = stop_serve(proc)
    assert code == 0
    # the embedded cluster kept the messages on disk
    assert any((tmp_path / "data").rglob("*.log"))


def _serve_until_ready(args: list[str], env: dict[str, str]) -> str:
    """Runs ``serve`` with ``args`` until /readyz answers 200, stops it; its output."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--http-port", str(port), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_MASTERS": "", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "gateway did not become ready in 60 s"
            time.sleep(0.2)
        time.sleep(0.5)  # every worker's start-up lines are out
    finally:
        code, output = stop_serve(proc)
    assert code == 0, output
    return output.replace(str(port), "PORT")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_names_the_console_url_once_and_does_not_warn_a_lone_replica(workers: str) -> None:
    out = _serve_until_ready(
        ["--http-host", "127.0.0.1", "--grpc-port", str(free_port()), "--workers", workers], {}
    )
    serving = [
        json.loads(line)
        for line in out.splitlines()
        if line.startswith('{"ts"') and '"msg":"serving ' in line
    ]
    assert len(serving) == 1, out
    assert serving[0]["msg"] == (
        "serving http://127.0.0.1:PORT: web console http://127.0.0.1:PORT/console, "
        "API docs http://127.0.0.1:PORT/docs"
    )
    assert serving[0]["console_url"] == "http://127.0.0.1:PORT/console"
    # a replica alone has no other replica's instances to forward to: nothing to warn about
    assert "forward_allow" not in out


def test_the_forward_allow_warning_stays_for_several_replicas() -> None:
    env = {
        "TUBEMQ_GATEWAY_CONSUMERS__REPLICAS": "2",
        "TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET": "a-secret-of-at-least-16-chars",
        "TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL": "http://127.0.0.1:8080",
    }
    out = _serve_until_ready(
        ["--http-host", "127.0.0.1", "--grpc-port", str(free_port()), "--workers", "1"], env
    )
    assert "consumers.forward_allow is empty" in out, out


def test_served_urls_follow_tls_the_admin_listener_and_the_console_setting() -> None:
    plain = Settings(http_host="0.0.0.0")
    assert served_urls(plain, 8080, None) == {
        "url": "http://localhost:8080",
        "docs_url": "http://localhost:8080/docs",
        "console_url": "http://localhost:8080/console",
    }
    v6 = Settings(http_host="::1", console={"enabled": False})
    assert served_urls(v6, 8080, None) == {"url": "http://[::1]:8080", "docs_url": "http://[::1]:8080/docs"}
    admin = Settings(
        http_host="127.0.0.1",
        admin={"port": 9100},
        console={"listener": "admin", "api_url": "http://127.0.0.1:8080"},
    )
    urls = served_urls(admin, 8080, 9100)
    assert urls["docs_url"] == "http://127.0.0.1:9100/docs"
    assert urls["console_url"] == "http://127.0.0.1:9100/console"
