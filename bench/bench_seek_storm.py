"""What a storm of seeks by time on one consumer instance costs: CPU seconds, wall time and the answers.

Run from the repository root: ``python bench/bench_seek_storm.py [--messages N] [--seeks S] [--masters
HOST:PORT --topic T]``. An embedded cluster (one broker, topic ``storm`` with one partition), or the TubeMQ
at ``--masters`` (its topic ``--topic``, one partition), the REST gateway and the HTTP client share one
process. N messages a minute apart are published, one instance is created and polled until it holds the
partition, then S seeks by time to the middle of what was published are sent at once, each on its own
connection. Printed: the process's CPU seconds and the wall time of the storm, and how many seeks were
answered with each status.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from bench_poll import gateway
from benchloop import pick_loop

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress, parse_address_list


@dataclass
class RealMasters:
    """The masters of a running TubeMQ, in the shape ``bench_poll.gateway`` reads a cluster's."""

    master_addresses: list[NodeAddress] = field(default_factory=list)


@contextlib.asynccontextmanager
async def cluster_of(masters: str | None, topic: str) -> AsyncIterator[EmbeddedCluster | RealMasters]:
    if masters:
        yield RealMasters(parse_address_list(masters, 8715))
        return
    async with EmbeddedCluster([TopicSpec(topic, 1)], balance_period=0.2) as cluster:
        yield cluster


def _stamp(i: int) -> str:
    """``yyyyMMddHHmm`` of minute ``i`` after 2026-11-01 00:00."""
    day, minute = divmod(i, 1440)
    return f"202611{1 + day:02d}{minute // 60:02d}{minute % 60:02d}"


async def run(messages: int, seeks: int, masters: str | None, topic: str) -> None:
    async with cluster_of(masters, topic) as cluster, gateway(cluster) as url:  # type: ignore[arg-type]
        limits = httpx.Limits(max_connections=seeks + 10)
        async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as http:
            for start in range(0, messages, 1000):
                batch = [
                    {"value": f"m{i}", "msgTime": _stamp(i)}
                    for i in range(start, min(messages, start + 1000))
                ]
                (await http.post(f"/v1/topics/{topic}/messages", json={"messages": batch})).raise_for_status()
            created = await http.post(
                "/v1/consumers/storm", json={"topics": [topic], "startPosition": "earliest"}
            )
            created.raise_for_status()
            base = f"/v1/consumers/storm/instances/{created.json()['instanceId']}"
            while not (await http.get(base)).json()["partitions"]:
                await http.get(f"{base}/messages", params={"timeout_ms": 200})
            middle = _stamp(messages // 2)
            body = {
                "position": "time",
                "time": f"{middle[:4]}-{middle[4:6]}-{middle[6:8]}T{middle[8:10]}:{middle[10:]}:00Z",
                "timeZone": "UTC",
            }
            clients = [httpx.AsyncClient(base_url=url, timeout=60.0) for _ in range(seeks)]
            cpu, wall = time.process_time(), time.perf_counter()
            answers = await asyncio.gather(*(c.post(f"{base}/seek", json=body) for c in clients))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            await asyncio.gather(*(c.aclose() for c in clients))
    statuses = collections.Counter(a.status_code for a in answers)
    where = f"TubeMQ at {masters}, topic {topic}" if masters else "embedded cluster"
    print(f"{seeks} seeks by time at once, one instance, {messages} messages ({where})")
    print(f"  CPU {cpu:.2f} s, wall {wall:.2f} s; answers {dict(sorted(statuses.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--seeks", type=int, default=50)
    parser.add_argument("--masters", help="a running TubeMQ's masters (default: an embedded cluster)")
    parser.add_argument("--topic", default="storm", help="the topic (one partition) to publish to and seek")
    args = parser.parse_args()
    loop_factory, _ = pick_loop(False)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.messages, args.seeks, args.masters, args.topic))


if __name__ == "__main__":
    main()
