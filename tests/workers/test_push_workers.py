"""Push subscriptions under ``serve --workers 2``: both worker processes join the subscription's group and
share its partitions, every message reaches the receiver, and a worker killed with SIGKILL in the middle of
deliveries loses nothing (its partitions go to the group again and what it delivered without a commit is
delivered again)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from tests.support.push_support import Answer, push_env, receiver
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, samples, start_workers, worker_pids


def _environment(tmp: Path, endpoint: str) -> dict[str, str]:
    changes = {"group": "push-workers", "maxBackoffMs": 500, "maxConcurrency": 4}
    return {"TUBEMQ_GATEWAY_EMBEDDED__TOPICS": "demo:4,retry:2", **push_env(tmp, endpoint, **changes)}


async def _publish(gw: WorkerGateway, values: list[str]) -> None:
    async with gw.shared() as client:
        answer = await client.post(
            "/v1/topics/demo/messages", json={"messages": [{"value": v} for v in values]}
        )
        assert answer.status_code == 200, answer.text


async def _acked_per_worker(gw: WorkerGateway) -> dict[str, float]:
    async with gw.shared() as client:
        text = (await client.get("/metrics")).text
    found = samples(text, "tubemq_gateway_push_deliveries_total")
    return {labels["worker"]: value for labels, value in found if labels["outcome"] == "acked"}


async def test_two_workers_share_the_group_and_a_killed_one_loses_nothing(tmp_path: Path) -> None:
    async with receiver(lambda r: Answer(200, delay=0.02)) as hook:
        gw = await asyncio.to_thread(start_workers, tmp_path, 2, env=_environment(tmp_path, hook.url))
        try:
            # Both workers join the group at start; until the master has balanced the partitions over
            # them one may deliver alone, so publish batches until each has delivered some.
            first: list[str] = []

            def delivered() -> set[str]:
                return {json.loads(r.body)["message"]["value"] for r in hook.answered}

            async def both_deliver() -> bool:
                batch = [f"a-{len(first) + i}" for i in range(20)]
                first.extend(batch)
                await _publish(gw, batch)
                await eventually(lambda: delivered() >= set(first), timeout=60, what="a batch delivered")
                return all(v > 0 for v in (await _acked_per_worker(gw)).values())

            await eventually(both_deliver, timeout=60, what="both workers delivering", step=0.5)
            assert set(await _acked_per_worker(gw)) == {"0", "1"}

            second = [f"b-{i}" for i in range(200)]
            await _publish(gw, second)
            await eventually(
                lambda: len(delivered() & set(second)) >= 20, timeout=60, what="deliveries going"
            )
            os.kill(worker_pids(gw)[1], signal.SIGKILL)
            await eventually(lambda: delivered() >= set(second), timeout=90, what="all 200 after the kill")
        finally:
            await asyncio.to_thread(gw.stop)
    values = [json.loads(r.body)["message"]["value"] for r in hook.answered]
    print(f"\n{len(values)} acknowledged deliveries of {len(first) + len(second)} messages")
    assert set(values) == set(first) | set(second)
