"""Cost per message of the redelivery bookkeeping: nack versus commit.

1. Without sockets (the consumer instance over a stand-in core, as ``bench_render.py``): the gateway's CPU per
   message to settle delivered messages by token with a commit, and with a nack whose republish returns at
   once (attribute building, the settle, the token bookkeeping; no broker round trip). The per-message cost
   the new fields add to every delivery (deadline, attempt, their JSON and protobuf) is in
   ``bench_render.py``'s rows, compared before and after in the commit that added them.
2. Against the embedded cluster over loopback: messages per second through a nack (republish to the retry
   topic, acknowledged by the broker, settle) and back (the retried copy delivered and committed), next to a
   plain poll + commit of the same messages in the same run.

Run from the repository root: ``python bench/bench_redelivery.py [--messages N] [--rounds R]``. The native
TubeMQ client has no per-message nack to compare with; its consume rate is in ``bench_vs_native.py``.
Benchmarks print numbers; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_render import _Core, answer, batch_maker

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import parse_topic_specs
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.instance import ConsumerInstance
from gateway.service.redelivery import RedeliveryPolicy
from gateway.service.retry_signature import RetrySigner
from gateway.tubemq.consumer.batch import decode_messages
from gateway.tubemq.consumer.config import ConsumerConfig
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig


class _Instant:
    """A republisher whose publish is acknowledged at once."""

    async def register_topic(self, topic: str) -> object:
        return None

    async def send(self, topic: str, body: bytes, **_: Any) -> object:
        return None


async def in_process(messages: int, rounds: int) -> list[tuple[str, float]]:
    wire = answer(messages, 1024, "custom")
    decoded, _ = decode_messages(wire.messages, None, 0, True)
    core = _Core()
    instance = ConsumerInstance(
        "bench",
        "g",
        core,  # type: ignore[arg-type]
        auto_commit=False,
        max_bytes=None,
        commit_timeout=60.0,
        assignment_wait=0.0,
        policy=RedeliveryPolicy("retry", "dead", 5, RetrySigner([b"bench-retry-secret-0123456789"])),
        republisher=_Instant(),
    )
    batch = batch_maker(decoded)

    results: dict[str, list[float]] = {"commit by token": [], "nack (instant republish)": []}
    for _ in range(rounds):
        for name in results:
            core.batch = batch()
            delivered = await instance.poll(messages, 2**40, 0.0)
            tokens = [m.token for m in delivered]
            started = time.perf_counter()
            if name.startswith("commit"):
                await instance.commit(tokens)
            else:
                await instance.nack(tokens, 0.0)
            results[name].append((time.perf_counter() - started) / messages * 1e6)
    return [(name, min(samples)) for name, samples in results.items()]


async def embedded(messages: int) -> list[tuple[str, float]]:
    specs = parse_topic_specs("solo:1,retry:1")
    async with EmbeddedCluster(specs, balance_period=0.1) as cluster:
        pool = ConnectionPool()
        producer = Producer(
            cluster.master_addresses, pool=pool, config=ProducerConfig(heartbeat_interval=0.5)
        )
        await producer.start()
        await producer.register_topic("solo")
        fast = ConsumerConfig(
            heartbeat_interval=0.2,
            broker_heartbeat_interval=0.5,
            not_found_wait=0.005,
            not_found_max_wait=0.02,
        )
        service = ConsumerService(
            cluster.master_addresses,
            pool,
            advertised_url="http://127.0.0.1:9",
            republisher=producer,
            consumer_config=fast,
        )
        await service.start()
        try:
            spec = InstanceSpec({"solo": None}, start_position="earliest", retry_topic="retry")
            instance = (await service.create("bench", spec)).instance_id
            # warm up: the instance holds both partitions and has delivered, nacked and committed once
            await producer.send("solo", b"warm-up")
            [warm] = await service.poll("bench", instance, timeout=10.0)
            await service.nack("bench", instance, [warm.token])
            [warm] = await service.poll("bench", instance, timeout=10.0)
            await service.commit("bench", instance, [warm.token])
            await producer.send_batch("solo", [(b"x" * 1024, None, None, None)] * messages)

            async def settle(count: int, nack: bool) -> list[Any]:
                """Poll ``count`` messages, committing (or nacking) each answer before the next poll: a
                partition's next batch comes only once its last one is settled."""
                got: list[Any] = []
                while len(got) < count:
                    answer = await service.poll("bench", instance, max_messages=100, timeout=2.0)
                    tokens = [m.token for m in answer]
                    if not tokens:
                        continue
                    if nack:
                        await service.nack("bench", instance, tokens)
                    else:
                        await service.commit("bench", instance, tokens)
                    got += answer
                return got

            started = time.perf_counter()
            await settle(messages, nack=False)
            plain = time.perf_counter() - started
            # as many again, each nacked, then its retried copy delivered and committed
            await producer.send_batch("solo", [(b"x" * 1024, None, None, None)] * messages)
            started = time.perf_counter()
            await settle(messages, nack=True)
            nacked = time.perf_counter() - started
            await settle(messages, nack=False)
            round_trip = time.perf_counter() - started
        finally:
            await service.close()
            await producer.close()
            await pool.close()
    return [
        ("poll + commit", messages / plain),
        ("poll + nack (republish acknowledged, settle)", messages / nacked),
        ("poll + nack, then the copy polled + committed", messages / round_trip),
    ]


async def run(args: argparse.Namespace) -> None:
    rows = await in_process(args.messages, args.rounds)
    print(f"in process, {args.messages} delivered 1 KiB messages, best of {args.rounds} rounds")
    for name, us in rows:
        print(f"  {name:<40} {us:7.2f} us/msg")
    rates = await embedded(args.messages)
    print(f"embedded cluster over loopback, {args.messages} messages of 1 KiB, polls of 100")
    for name, rate in rates:
        print(f"  {name:<48} {rate:9.0f} msg/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
