"""CPU per message of the consume side's Python steps, without sockets: decoding a GetMessage answer,
handing it out through a consumer instance (deliver, auto-commit), and rendering it as the poll JSON, the SSE
events and the gRPC ``SubscribeResponse``.

Run from the repository root: ``python bench/bench_render.py [--messages N] [--size B] [--rounds R]
[--attributes none|stream|custom]``. Each step is timed over R rounds of one N-message answer (1 KiB values
by default); the figure is the best round's µs per message (the least disturbed by other load).
``--attributes`` picks what the messages carry: none (as the Java benchmark producer sends), a stream id and
time (as the gateway's publish sets), or those plus two custom attributes. End-to-end numbers come from
``bench_vs_native.py`` and ``bench_poll.py``; this script shows where the Python time of a consumed message
goes. Benchmarks print numbers; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.api.consumer_render import render_events, render_poll
from gateway.grpc.consumed_wire import encode_consumed
from gateway.service.instance import ConsumerInstance
from gateway.tubemq.consumer.batch import ConsumedBatch, answer_reader, decode_messages, read_answer
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.payload import crc32_checksum, encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb

ATTRIBUTES: dict[str, tuple[dict[str, str] | None, str | None, str | None]] = {
    "none": (None, None, None),
    "stream": (None, "orders", "202611232200"),
    "custom": ({"region": "eu", "source": "bench"}, "orders", "202611232200"),
}
#: message ids as brokers make them (milliseconds since an epoch in the high bits): 8-byte varints
BASE_ID = 1_700_000_000_000 << 22


def answer(count: int, size: int, attributes: str) -> broker_pb.GetMessageResponseB2C:
    attrs, stream, when = ATTRIBUTES[attributes]
    out = broker_pb.GetMessageResponseB2C(
        success=True, errCode=200, errMsg="OK", currOffset=0, maxOffset=28 * count
    )
    for i in range(count):
        body = (b"%08d" % i) + b"x" * (size - 8)
        if attributes == "none":
            data, flag = body, 0
        else:
            data, flag = encode_payload(body, attrs, stream, when)
        out.messages.add(messageId=BASE_ID + i, checkSum=crc32_checksum(data), payLoadData=data, flag=flag)
    return out


class _Core:
    """Stands in for the core consumer: hands out the prepared batch once per poll, confirms at once."""

    closed = False

    def __init__(self) -> None:
        self.batch: ConsumedBatch | None = None

    async def wait_for_assignment(self, timeout: float) -> bool:  # noqa: ASYNC109
        return True

    async def poll(self, timeout: float) -> ConsumedBatch | None:  # noqa: ASYNC109
        batch, self.batch = self.batch, None
        return batch

    async def poll_many(self, timeout: float, most: int) -> list[ConsumedBatch]:  # noqa: ASYNC109
        batch = await self.poll(timeout)
        return [] if batch is None else [batch]

    async def confirm(self, context: str, consumed: bool) -> None:
        return None

    def confirm_local(self, context: str) -> str | None:
        return None

    async def send_due_commits(self, *keys: str) -> None:
        return None


def batch_maker(messages: list[Any]) -> Callable[[], ConsumedBatch]:
    """Batches of ``messages`` (one partition, dense offsets), each with its own confirm context."""
    seq = 0

    def batch() -> ConsumedBatch:
        nonlocal seq
        seq += 1
        return ConsumedBatch(
            topic="demo",
            partition_key="1:demo:0",
            partition_id=0,
            broker_id=1,
            broker=None,  # type: ignore[arg-type]
            messages=messages,
            curr_offset=0,
            max_offset=28 * len(messages),
            lag_bytes=0,
            fetched_count=len(messages),
            confirm_context=f"1:demo:0:{seq}",
            offsets_exact=True,
        )

    return batch

    async def close(self) -> None:
        return None


def timed(rounds: int, count: int, step: Callable[[], Any]) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) / count * 1e6)
    return min(samples)


async def run(args: argparse.Namespace) -> None:
    wire = answer(args.messages, args.size, args.attributes)
    raw = wire.SerializeToString()
    n = args.messages

    def parse() -> None:
        broker_pb.GetMessageResponseB2C.FromString(raw)

    def decode() -> None:
        decode_messages(wire.messages, None, 0, True)

    method = rpc.Method.GET_MESSAGES
    response = rpc.RpcResponse(1, method, raw)
    reader = answer_reader(None)

    def read_bytes() -> None:
        if reader is None:
            read_answer(broker_pb.GetMessageResponseB2C.FromString(raw), None)
        else:
            reader((response,), method)

    messages, _ = decode_messages(wire.messages, None, 0, True)
    core = _Core()
    instance = ConsumerInstance(
        "bench",
        "g",
        core,  # type: ignore[arg-type]
        auto_commit=True,
        max_bytes=None,
        commit_timeout=60.0,
        assignment_wait=0.0,
    )
    batch = batch_maker(messages)

    delivered: list[Any] = []
    deliver_samples = []
    for _ in range(args.rounds):
        core.batch = batch()
        started = time.perf_counter()
        delivered = await instance.poll(n, 2**40, 0.0)
        deliver_samples.append((time.perf_counter() - started) / n * 1e6)
    assert len(delivered) == n, len(delivered)
    await instance.poll(n, 2**40, 0.0)  # commits the last round

    rows = [
        ("protobuf parse of the answer", timed(args.rounds, n, parse)),
        ("decode (CRC, attributes)", timed(args.rounds, n, decode)),
        ("answer bytes to messages, one pass", timed(args.rounds, n, read_bytes)),
        ("instance: deliver + auto-commit", min(deliver_samples)),
        ("poll JSON (base64)", timed(args.rounds, n, lambda: render_poll(delivered, "base64"))),
        ("poll JSON (utf8)", timed(args.rounds, n, lambda: render_poll(delivered, "utf8"))),
        ("SSE events (base64)", timed(args.rounds, n, lambda: render_events(delivered, "base64"))),
        (
            "gRPC SubscribeResponse, serialized",
            timed(args.rounds, n, lambda: encode_consumed(delivered)),
        ),
    ]
    print(f"{n} messages of {args.size} B, attributes {args.attributes}, best of {args.rounds} rounds")
    for name, us in rows:
        print(f"  {name:<40} {us:7.2f} us/msg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--attributes", choices=sorted(ATTRIBUTES), default="stream")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
