"""Network faults between the gateway and TubeMQ (the lab of tests/support/netns_support.py: the gateway in a
network namespace of its own, TubeMQ reached through a veth pair that gets latency, loss and a partition):
publishes answer 200 only after a broker acknowledged them, nothing acknowledged is lost, and publishing
recovers once the partition heals. Skipped, with the reason, where the lab cannot be made (not root, no ip /
nft)."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support import netfault_scenario
from tests.support.files import ROOT
from tests.support.netns_support import NetLab, unavailable

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network-fault lab: {REASON}")


def start_gateway_in(lab: NetLab, master_port: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = 20000 + secrets.randbelow(20000)  # the lab's own namespace: nothing else listens there
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUBEMQ_GATEWAY_PRODUCER__SEND_TIMEOUT": "3",
        "TUBEMQ_GATEWAY_PRODUCER__RPC_TIMEOUT": "1.5",
        "TUBEMQ_GATEWAY_PRODUCER__HEARTBEAT_INTERVAL": "1",
        "TUBEMQ_GATEWAY_PRODUCER__FAILURE_COOLDOWN": "2",
        "TUBEMQ_GATEWAY_PRODUCER__UNAVAILABLE_COOLDOWN": "2",
        "TUBEMQ_GATEWAY_POOL__CONNECT_TIMEOUT": "1",
        "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "1",
        "TUBEMQ_GATEWAY_LOG_LEVEL": "warning",
    }
    cmd = [sys.executable, "-m", "gateway", "serve", "--masters", f"127.0.0.1:{master_port}"]
    cmd += ["--http-host", lab.c_ns_ip, "--http-port", str(port), "--workers", "1", "--grpc-port", "0"]
    with log.open("wb") as out:
        proc = lab.popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))
    url = f"http://{lab.c_ns_ip}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the gateway in the lab did not become ready:\n{log.read_text()[-3000:]}")


@pytest.fixture
def cluster_ports(tmp_path: Path) -> Iterator[tuple[EmbeddedCluster, list[int]]]:
    loop = asyncio.new_event_loop()
    cluster = EmbeddedCluster([TopicSpec("nf", 2)], brokers=1, data_dir=tmp_path / "data")
    loop.run_until_complete(cluster.start())
    # the embedded cluster serves from this thread's loop while the scenario runs in a thread of its own
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        ports = [a.port for a in cluster.master_addresses] + [b.address.port for b in cluster.brokers]
        yield cluster, ports
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.run_until_complete(cluster.stop())
        loop.close()


def test_latency_loss_and_a_partition_keep_answers_honest(
    tmp_path: Path, cluster_ports: tuple[EmbeddedCluster, list[int]]
) -> None:
    _, ports = cluster_ports
    with NetLab(ports) as lab:
        proc, url = start_gateway_in(lab, ports[0], tmp_path / "gateway.log")
        try:
            report = asyncio.run(
                netfault_scenario.run(lab, url, "nf", tag=f"nf{secrets.token_hex(4)}", drain_seconds=60)
            )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"latency by {lab.latency_kind}:", report.table(), report.summary())
    statuses = {r.status for r in report.requests}
    assert statuses <= {200, 207, 503}, report.table()  # never a 500, never a hung request (0)
    assert not report.dishonest, report.dishonest[:5]
    assert any(r.status == 503 for r in report.requests if r.phase == "partition"), report.table()
    assert report.recovery is not None, report.table()
    assert report.acked and report.lost == 0, report.summary()
