"""Push subscriptions in the production topology: two replicas (``serve --workers 2`` each, each in a process
group of its own) on one embedded cluster run the same subscription from a subscriptions file, behind a real
nginx the test publishes through; a receiver on 127.0.0.1 counts deliveries by ``webhook-id``.

One replica is SIGKILLed as a whole (its process group) in the middle of deliveries. Nothing is lost: every
message published through nginx, before and after the kill, is acknowledged by the receiver at least once.
The only repeats are messages the dead replica had posted before it died (delivered, never committed), and
the survivor holds every partition of the group within the cluster's consumer timeout plus a balance round
(3 s and 0.5 s here; docs/push.md, "When a replica dies").

nginx comes from the Debian package (``scripts/ensure_nginx.sh``); without it the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from gateway.embedded.topics import TopicSpec
from tests.support.push_support import Answer, Received, held_all_at, holdings, push_env, receiver
from tests.support.serving import free_port
from tests.support.topology_support import Replica, cluster_of, nginx_binary, replica_env, running_nginx
from tests.support.waiting import eventually
from tests.support.workers_support import start_workers

pytestmark = pytest.mark.slow

GROUP = "push-replicas"
#: the embedded master's and brokers' consumer timeout: a member silent this long is released
CONSUMER_TIMEOUT = 3.0
#: the subscription's partitions: the topic's and the retry topic's
PARTITIONS = 4 + 2
SUBSCRIPTION = {"group": GROUP, "maxBackoffMs": 500, "maxConcurrency": 4}


async def _publish(http: httpx.AsyncClient, values: list[str]) -> None:
    """Publish through nginx, again while it answers 502 (a replica it has not yet seen die)."""
    for start in range(0, len(values), 50):
        batch = {"messages": [{"value": v} for v in values[start : start + 50]]}
        for _ in range(20):
            answer = await http.post("/v1/topics/demo/messages", json=batch)
            if answer.status_code != 502:
                break
            await asyncio.sleep(0.2)
        assert answer.status_code == 200, answer.text
        assert all(r["status"] == 200 for r in answer.json()["results"]), answer.text


def _value(request: Received) -> str:
    value: str = json.loads(request.body)["message"]["value"]
    return value


async def test_a_killed_replica_loses_nothing_and_its_partitions_move(tmp_path: Path) -> None:
    nginx_binary()  # skip before starting anything when it is missing
    replicas = [Replica(name, free_port(), free_port()) for name in ("a", "b")]
    async with (
        receiver(lambda r: Answer(200, delay=0.05)) as hook,
        cluster_of(TopicSpec("demo", 4), TopicSpec("retry", 2), consumer_timeout=CONSUMER_TIMEOUT) as cluster,
    ):
        try:
            envs = {}
            for r in replicas:
                (tmp_path / r.name).mkdir()
                envs[r.name] = {
                    **replica_env(cluster, r, replicas),
                    **push_env(tmp_path / r.name, hook.url, **SUBSCRIPTION),
                }
            gateways = await asyncio.gather(
                *(
                    asyncio.to_thread(
                        start_workers,
                        tmp_path / r.name,
                        2,
                        "--http-port",
                        str(r.http_port),
                        "--grpc-port",
                        str(r.grpc_port),
                        env=envs[r.name],
                        session=True,
                    )
                    for r in replicas
                )
            )
            for replica, gateway in zip(replicas, gateways, strict=True):
                replica.gateway = gateway
            victim, survivor = replicas

            def all_four_hold_some() -> bool:
                records = [*victim.gateway.records(), *survivor.gateway.records()]  # type: ignore[union-attr]
                held = holdings(records, GROUP)
                return len(held) == 4 and sum(len(keys) for keys in held.values()) == PARTITIONS

            await eventually(all_four_hold_some, timeout=60, what="4 workers holding partitions", step=0.2)
            (tmp_path / "nginx").mkdir()
            with running_nginx(tmp_path / "nginx", replicas) as (http_url, _):
                async with httpx.AsyncClient(base_url=http_url, timeout=30) as http:
                    first = [f"a-{i}" for i in range(300)]
                    await _publish(http, first)
                    await eventually(lambda: len(hook.answered) >= 60, timeout=60, what="deliveries going")
                    assert victim.gateway is not None and survivor.gateway is not None
                    killed, killed_at = time.monotonic(), time.time()
                    for pid in victim.pids():  # what a node or container kill does: every process at once
                        os.killpg(pid, signal.SIGKILL)  # supervisor and workers lead process groups
                    await asyncio.to_thread(victim.gateway.proc.wait, 10)
                    assert holdings(victim.gateway.records(), GROUP)  # it died holding partitions
                    await _publish(http, second := [f"b-{i}" for i in range(100)])
                    survivor_records = survivor.gateway.records
                    await eventually(
                        lambda: held_all_at(survivor_records(), GROUP, PARTITIONS, killed_at),
                        timeout=30,
                        what="the survivor holding every partition",
                    )
                    took_all = held_all_at(survivor_records(), GROUP, PARTITIONS, killed_at)
                    assert took_all is not None
                    moved = took_all - killed_at
                    acked = lambda: {_value(r) for r in hook.answered}  # noqa: E731
                    await eventually(
                        lambda: acked() >= set(first) | set(second), timeout=60, what="all 400 acknowledged"
                    )
                    all_in = time.monotonic() - killed
                    await asyncio.sleep(1.0)  # time for a late repeat to show
        finally:
            for replica in replicas:
                if replica.gateway is not None:
                    await asyncio.to_thread(replica.gateway.stop)
    posts = Counter(r.headers["webhook-id"] for r in hook.answered)
    repeated = {webhook_id for webhook_id, n in posts.items() if n > 1}
    # What comes again is what was out when partitions moved: the dead replica's posts before it died, and
    # (at least once) what a survivor's worker had out when the balance after the kill moved its partition
    # to the other worker: at most what that worker may have in flight.
    later = {
        webhook_id
        for webhook_id in repeated
        if min(r.at for r in hook.answered if r.headers["webhook-id"] == webhook_id) >= killed
    }
    print(
        f"\nload {os.getloadavg()[0]:.1f}: partitions moved {moved:.1f} s after the SIGKILL, every message "
        f"acknowledged {all_in:.1f} s after it; {len(posts)} messages, {len(repeated)} acknowledged twice "
        f"or more ({sum(posts.values())} acknowledged posts; {len(later)} of them first after the kill)"
    )
    assert len(posts) == len(first) + len(second)  # nothing lost, nothing made up
    assert len(later) <= 2 * SUBSCRIPTION["maxConcurrency"], sorted(later)
    assert moved < CONSUMER_TIMEOUT + 5.0, moved  # the timeout, a balance round, heartbeats, a loaded machine
