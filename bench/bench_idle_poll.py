"""What idle long polls cost the broker: GetMessage requests per second while N REST long polls wait on
topics that receive nothing.

Run from the repository root: ``python bench/bench_idle_poll.py [--polls N] [--groups G] [--partitions P]
[--poll-seconds S] [--max-wait W] [--no-uvloop]``. An embedded cluster (one broker, topic ``idle`` with P
partitions), the gateway (REST, default consumer settings but ``--max-wait`` for
``consumers.empty_fetch_max_wait``) and the HTTP client share one process. N consumer instances are created
in G groups (default: one group each, so every instance holds every partition), each polled once to get its
assignment, then all N wait in one ``GET .../messages?timeout_ms=S*1000`` each at the same time. The
broker's GetMessage requests are counted over the middle of that wait and printed per second and per poll.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from bench_poll import gateway
from benchloop import pick_loop
from google.protobuf.message import Message

from gateway.config import ConsumerSettings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.server import CallContext
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.wire.rpc import Method

TOPIC = "idle"


class GetCounter:
    """Counts the GetMessage calls a broker handles (wraps its RPC handler before it starts)."""

    def __init__(self) -> None:
        self.gets = 0

    def wrap(
        self, handle: Callable[[int, Message, CallContext], Awaitable[Message]]
    ) -> Callable[[int, Message, CallContext], Awaitable[Message]]:
        async def counted(method: int, request: Message, ctx: CallContext) -> Message:
            if method == Method.GET_MESSAGES:
                self.gets += 1
            return await handle(method, request, ctx)

        return counted


async def run(polls: int, groups: int, partitions: int, poll_seconds: float, max_wait: float | None) -> None:
    cluster = EmbeddedCluster([TopicSpec(TOPIC, partitions)], balance_period=0.2)
    counter = GetCounter()
    for broker in cluster.brokers:
        broker.handle = counter.wrap(broker.handle)  # type: ignore[method-assign,assignment]
    consumers = ConsumerSettings(max_instances=max(polls, 1000), empty_fetch_max_wait=max_wait)
    async with cluster, gateway(cluster, consumers) as url:
        limits = httpx.Limits(max_connections=polls + 10, max_keepalive_connections=polls + 10)
        async with httpx.AsyncClient(base_url=url, timeout=poll_seconds + 30, limits=limits) as http:
            paths = []
            for i in range(polls):
                group = f"idle-{i % groups}"
                created = await http.post(f"/v1/consumers/{group}", json={"topics": [TOPIC]})
                created.raise_for_status()
                paths.append(f"/v1/consumers/{group}/instances/{created.json()['instanceId']}/messages")
            # A first short poll each: waits for the assignment (up to assignment_wait).
            await asyncio.gather(*(http.get(p, params={"timeout_ms": 1000}) for p in paths))
            held = sum(len(b.consumers.registrations) for b in cluster.brokers)
            params = {"timeout_ms": int(poll_seconds * 1000)}
            waiting = [asyncio.create_task(http.get(p, params=params)) for p in paths]
            margin = min(5.0, poll_seconds / 4)
            await asyncio.sleep(margin)
            before, start = counter.gets, time.perf_counter()
            cpu_before = time.process_time()
            await asyncio.sleep(poll_seconds - 2 * margin)
            gets, seconds = counter.gets - before, time.perf_counter() - start
            cpu = (time.process_time() - cpu_before) / seconds
            answers = await asyncio.gather(*waiting)
            empty = sum(1 for a in answers if a.status_code == 200 and not a.json()["messages"])
    print(f"partition registrations held: {held} ({polls} instances in {groups} groups)")
    print(f"idle polls answered empty: {empty}/{polls}")
    print(f"broker GetMessage requests: {gets / seconds:,.0f}/s over {seconds:.1f}s")
    print(f"per idle poll: {gets / seconds / polls:.2f}/s ({gets / polls:.1f} per poll in the window)")
    print(f"process CPU while idle: {cpu * 100:.0f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=200, help="concurrent idle long polls (default 200)")
    parser.add_argument(
        "--groups", type=int, default=0, help="consumer groups the instances share (default: one each)"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    parser.add_argument(
        "--poll-seconds", type=float, default=30.0, help="long-poll timeout in seconds (default 30)"
    )
    parser.add_argument(
        "--max-wait", type=float, default=None, help="consumers.empty_fetch_max_wait (default: the setting's)"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    args = parser.parse_args()
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    groups = args.groups or args.polls
    print(
        f"polls={args.polls} groups={groups} partitions={args.partitions} poll={args.poll_seconds:g}s "
        f"loop={loop_name} python={sys.version.split()[0]}"
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args.polls, groups, args.partitions, args.poll_seconds, args.max_wait))


if __name__ == "__main__":
    main()
