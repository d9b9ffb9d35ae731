"""What an ``Idempotency-Key`` costs a publish: CPU and wall time per request, keyed against unkeyed.

Run from the repository root: ``python bench/bench_idempotency.py [--master 127.0.0.1:PORT] [--topic T]
[--requests N] [--concurrency C] [--rounds R]``. Without ``--master`` it starts an embedded cluster in the
process (its brokers' CPU is then counted too, alike for every case); with one, a loopback master (the real
TubeMQ).

Each case sends ``N`` publishes into the gateway's app in process (httpx's ASGI transport: every middleware,
no sockets), ``C`` at a time, and prints the process CPU time (every thread: the idempotency store runs on
one of its own) and the wall time per request, the median of ``R`` rounds:

* ``unkeyed``: no key; ``keyed``: a new key per request (reserve, publish, record: two store
  transactions); ``replayed``: the keys of the previous round again (one store read, nothing published);
* with 1 message per request and with 100-message batches (``--batch``).

The store is the replica's SQLite database (this process's private directory), or with ``--redis-url`` a
Redis (a loopback one: ``redis-server --port 6390 --save ''``). It prints numbers and asserts only that every
answer is what the case expects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))

import httpx

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


async def _round(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    keys: list[str | None],
    concurrency: int,
    replayed: bool,
) -> tuple[float, float]:
    """CPU and wall seconds of one round (one request per key), every answer checked."""
    queue = list(keys)

    async def worker() -> None:
        while queue:
            key = queue.pop()
            headers = {"content-type": "application/json"}
            if key is not None:
                headers["Idempotency-Key"] = key
            answer = await client.post(path, content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert ("idempotent-replayed" in answer.headers) == replayed, answer.headers

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - cpu, time.perf_counter() - wall


async def bench(args: argparse.Namespace) -> None:
    cluster = None
    if args.master:
        if args.master.rsplit(":", 1)[0] not in LOOPBACK:
            raise SystemExit("--master must be a loopback address")
        masters = args.master
    else:
        cluster = EmbeddedCluster([TopicSpec(args.topic, 4)], brokers=1)
        await cluster.start()
        masters = ",".join(str(a) for a in cluster.master_addresses)
    idempotency: dict[str, Any] = {}
    if args.redis_url:
        idempotency = {
            "redis_url": args.redis_url,
            "redis_password": os.environ.get("REDIS_PASSWORD") or None,
        }
    runtime = Runtime(
        Settings(
            masters=masters,
            log_level="warning",
            limits={"max_batch_messages": 1000},
            idempotency=idempotency,
        )
    )
    await runtime.start()
    try:
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as client:
            print(
                f"{args.requests} requests x {args.rounds} rounds, concurrency {args.concurrency}; "
                "per request: CPU us / wall us (median of rounds)"
            )
            path = f"/v1/topics/{args.topic}/messages"
            for size in (1, args.batch):
                body = json.dumps({"messages": [{"value": f"m{i:04d}" * 8} for i in range(size)]}).encode()
                figures: dict[str, list[tuple[float, float]]] = {"unkeyed": [], "keyed": [], "replayed": []}
                for r in range(args.rounds):
                    keys = [f"b{size}-r{r}-{i}" for i in range(args.requests)]
                    unkeyed: list[str | None] = [None] * args.requests
                    figures["unkeyed"].append(
                        await _round(client, path, body, unkeyed, args.concurrency, False)
                    )
                    figures["keyed"].append(
                        await _round(client, path, body, list(keys), args.concurrency, False)
                    )
                    figures["replayed"].append(
                        await _round(client, path, body, list(keys), args.concurrency, True)
                    )
                base = statistics.median(c for c, _ in figures["unkeyed"]) / args.requests
                for case, rounds in figures.items():
                    cpu = statistics.median(c for c, _ in rounds) / args.requests
                    wall = statistics.median(w for _, w in rounds) / args.requests
                    extra = "" if case == "unkeyed" else f"  ({(cpu - base) * 1e6:+8.1f} us CPU vs unkeyed)"
                    print(f"{size:4d} msg {case:9s} {cpu * 1e6:9.1f} us CPU {wall * 1e6:9.1f} us wall{extra}")
    finally:
        await runtime.stop()
        if cluster is not None:
            await cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--master", default="", help="a loopback TubeMQ master host:port (default: embedded)")
    parser.add_argument("--topic", default="demo", help="the topic published to (default demo)")
    parser.add_argument(
        "--redis-url",
        default="",
        help="keep the keys in this Redis (password: REDIS_PASSWORD); default SQLite",
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    args: Any = parser.parse_args()
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
