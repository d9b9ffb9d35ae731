"""CPU per one-message publish at each layer below HTTP: the pooled broker round, the producer, the service.

Run from the repository root against a running TubeMQ master on loopback (e.g. the real-TubeMQ harness)::

    python bench/bench_publish_one.py --master 127.0.0.1:8715 --topic demo

Without ``--master`` an embedded cluster runs in a child process, so its CPU is not counted. ``--callers``
tasks each make one-message calls until ``--calls`` are done, for each layer in turn and ``--rounds`` times
(interleaved, so a busy machine weighs on every layer alike):

* ``round``: ``ConnectionPool.request_decoded`` of a prebuilt ``SendMessageRequestP2B`` (framing, the
  link's bookkeeping, the write, the answer's wake-up and reading, the RPC metrics);
* ``producer``: ``Producer.send_prepared`` of one prepared message (``producer/single.py``: partition
  choice, breaker, judging, the send metrics, on top of the round);
* ``service``: ``PublishService.publish`` of one message (topic, the publish rules, quotas, outcome).

Each line gives this process's CPU (user + system) per call, the minimum of the rounds and every round: the
cost one REST or gRPC one-message request pays below its adapter. The gateway's metrics are subscribed, as in
the gateway. The ``gateway`` package is the working directory's: for an A/B, run this script from the root
of each tree in turn. Benchmarks print numbers; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

# the gateway of the working directory's tree where it holds one (see the docstring), else this one's
sys.path.insert(0, str(Path.cwd() if (Path.cwd() / "gateway").is_dir() else Path(__file__).parent.parent))


from gateway.observability.metrics import GatewayMetrics
from gateway.service.publish import OutgoingMessage, PublishService
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire import prepare_message
from gateway.tubemq.wire.rpc import Method, Service
from gateway.tubemq.wire.send_answers import decode_send_answers


async def cpu_per_call(calls: int, callers: int, call: Callable[[], Awaitable[object]]) -> float:
    """CPU microseconds of this process per ``call()``, ``calls`` of them made by ``callers`` tasks."""
    left = calls

    async def caller() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    cpu0 = time.process_time()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return (time.process_time() - cpu0) / calls * 1e6


async def run(args: argparse.Namespace, master: NodeAddress) -> None:
    events = EventBus()
    GatewayMetrics(process_metrics=False).subscribe(events)
    async with ConnectionPool(events=events) as pool:
        producer = Producer([master], pool=pool, config=ProducerConfig(), events=events)
        await producer.start()
        try:
            service = PublishService(producer)
            value = b"x" * args.size
            message = [OutgoingMessage(value, attributes={"bench": "1"})]
            for _ in range(300):  # warm up: route, links, code paths
                (outcome,) = await service.publish(args.topic, message)
                if not outcome.ok:
                    raise SystemExit(f"publishing to {args.topic!r} fails: {outcome.error}")
            route = producer.topic_route(args.topic)
            assert route is not None
            target = route.partitions[0]
            prepared = prepare_message(value, {"bench": "1"}, None, None)
            template = SendRequestTemplate(
                producer.client_id, args.topic, sent_addr=0, visit_token=producer.visit_token
            )
            request = template.encode(target.partition_id, prepared.data, prepared.flag, None, None)

            address, method, service_id = target.broker_address, Method.SEND_MESSAGE, Service.BROKER_WRITE
            decoded = getattr(pool, "request_decoded", None)  # None in a tree from before it (an A/B)

            async def one_round() -> object:
                if decoded is None:
                    return await pool.request(address, method, request, 5.0, service_id)
                return await decoded(address, method, request, 5.0, service_id, decode_send_answers)

            async def one_send() -> object:
                return await producer.send_prepared(args.topic, (prepared,))

            async def one_publish() -> object:
                return await service.publish(args.topic, message)

            layers = {"round": one_round, "producer": one_send, "service": one_publish}
            figures: dict[str, list[float]] = {name: [] for name in layers}
            for _ in range(args.rounds):
                for name, call in layers.items():
                    figures[name].append(await cpu_per_call(args.calls, args.callers, call))
            for name, values in figures.items():
                every = " ".join(f"{v:.1f}" for v in values)
                print(f"{name:9s} {min(values):7.1f} CPU us/call (min; rounds: {every})")
            print(f"({args.callers} callers, {args.calls} calls per layer and round, {args.size} B values)")
        finally:
            await producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", help="host:port of a loopback TubeMQ master (default: embedded child)")
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    from bench_publish_core import run_against  # (after gateway's import: it puts its own tree first)

    run_against(parser, args, run)


if __name__ == "__main__":
    main()
