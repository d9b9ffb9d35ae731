"""Network faults between the gateway and TubeMQ (the lab of tests/support/netns_support.py: the gateway in a
network namespace of its own, TubeMQ reached through a veth pair that gets latency, loss and a partition):
publishes answer 200 only after a broker acknowledged them, nothing acknowledged is lost, and publishing
recovers once the partition heals. Skipped, with the reason, where the lab cannot be made (not root, no ip /
nft)."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support import netfault_scenario
from tests.support.netfault_scenario import start_gateway_in
from tests.support.netns_support import NetLab, unavailable

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network-fault lab: {REASON}")


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
