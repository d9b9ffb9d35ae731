"""Network faults between a gateway and a real TubeMQ, with figures: the scenario of
tests/tubemq/test_network_faults.py (latency, loss, a partition and its heal on the gateway's TubeMQ link
only) run against a given master and its brokers.

Run as root from the repository root (it makes a network namespace and veth pairs, removed at the end)::

    python bench/netfault.py --master 127.0.0.1:8715 --broker-ports 8123 --topic gw4

The gateway runs in the lab's namespace; the master and brokers are reached through relays of their
127.0.0.1 ports (they advertise 127.0.0.1). Prints, per phase, the publish answers by status with p50/p99
latency, the seconds from the heal to the first 200, and messages acknowledged, received back through a
consumer instance of the same gateway, lost and duplicated. Benchmarks print numbers; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import netfault_scenario  # noqa: E402
from tests.support.netfault_scenario import start_gateway_in  # noqa: E402
from tests.support.netns_support import NetLab, unavailable  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", default="127.0.0.1:8715", help="the master, on 127.0.0.1")
    parser.add_argument("--broker-ports", default="8123", help="comma-separated broker ports on 127.0.0.1")
    parser.add_argument("--topic", default="gw4")
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--loss", type=int, default=10, help="percent of packets dropped")
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--partition", type=float, default=15.0, help="seconds of partition")
    args = parser.parse_args()
    host, _, port = args.master.rpartition(":")
    if host != "127.0.0.1":
        raise SystemExit("--master must be on 127.0.0.1")
    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"cannot make the lab: {reason}")
    ports = [int(port), *(int(p) for p in args.broker_ports.split(","))]
    with NetLab(ports) as lab, tempfile.TemporaryDirectory() as tmp:
        proc, url = start_gateway_in(lab, int(port), Path(tmp) / "gateway.log")
        try:
            report = asyncio.run(
                netfault_scenario.run(
                    lab,
                    url,
                    args.topic,
                    phase_seconds=args.phase,
                    partition_seconds=args.partition,
                    latency_ms=args.latency_ms,
                    loss_percent=args.loss,
                    tag=f"nf{secrets.token_hex(4)}",
                )
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(f"master {args.master}, topic {args.topic}; latency by {lab.latency_kind}")
        for row in report.table():
            print(
                f"  {row['phase']:<16} answers {row['answers']}"
                f"  p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms"
            )
        print(" ", report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
