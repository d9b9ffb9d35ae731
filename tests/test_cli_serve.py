"""``tubemq-gateway serve`` as a user runs it: a real process, HTTP on a port, the embedded default."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from serve_support import free_port, stop_serve

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
