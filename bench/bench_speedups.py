"""Compiled vs pure: CPU microseconds per message of each per-message loop the C extensions take over
(the ``_*.c`` file beside each module), against its pure-Python reference, on the same input in one process.

Run from the repository root: ``python bench/bench_speedups.py [--messages N] [--size B] [--rounds R]``.
Each loop is timed over R rounds of one N-message batch with ``time.process_time`` (CPU time of this
process: other load on a shared machine does not inflate it); the figure is the best round's µs per message.
Rows: decoding a GetMessage answer (CRC check, attribute split, ConsumedMessage objects) for messages
without attributes (as the Java benchmark producer sends), with a stream id and time (as the gateway's
publish sets) and with custom attributes too; encoding a batch's SendMessage requests
(``SendRequestTemplate.encode_many``) and framing them (``rpc.encode_requests``), for messages with a
stream id and time; the gRPC answer of a poll (``consumed_wire.encode_consumed``, what Subscribe and Poll
send) of the decoded messages with a stream id. Needs the extensions built (``pip install -e .`` where a C
compiler is); it says so and prints the pure rows alone otherwise. Benchmarks print numbers; nothing here
asserts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_render import ATTRIBUTES, answer

from gateway.grpc import consumed_wire
from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import runs_of
from gateway.tubemq.consumer import batch
from gateway.tubemq.producer import send_request
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire import rpc, speedups
from gateway.tubemq.wire.payload import prepare_message


def cpu_us(rounds: int, count: int, step: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    compiled = speedups.load_extension("gateway.tubemq.consumer._batch")
    if compiled is None:
        print(f"the compiled path does not run ({speedups.REASON}): pure rows only")
    n = args.messages
    print(f"{n} messages of {args.size} B, best of {args.rounds} rounds, CPU us per message")
    print(f"  {'loop':<52}{'pure':>8}{'compiled':>10}{'ratio':>8}")
    for attributes in sorted(ATTRIBUTES):
        wire = answer(n, args.size, attributes).messages
        pure = cpu_us(args.rounds, n, lambda wire=wire: batch.decode_messages_py(wire, None, 0, True))
        name = f"decode GetMessage answer (attributes {attributes})"
        if compiled is None:
            print(f"  {name:<52}{pure:8.2f}")
            continue
        c = cpu_us(
            args.rounds,
            n,
            lambda wire=wire: compiled.decode_messages(wire, None, 0, True, batch.parse_prefix),
        )
        print(f"  {name:<52}{pure:8.2f}{c:10.2f}{pure / c:7.2f}x")
    stream, _ = batch.decode_messages_py(answer(n, args.size, "stream").messages, None, 0, True)
    delivered = runs_of(
        DeliveredMessage(i + 1, "bench", "1:bench:0", 1, 0, m, 1, 0.0, 0) for i, m in enumerate(stream)
    )
    name = "gRPC answer of a poll (encode_consumed)"
    pure = cpu_us(args.rounds, n, lambda: consumed_wire.encode_consumed_py(delivered))
    grpc_compiled = speedups.load_extension("gateway.grpc._consumed_wire")
    if grpc_compiled is None:
        print(f"  {name:<52}{pure:8.2f}")
    else:
        c = cpu_us(args.rounds, n, lambda: grpc_compiled.encode_consumed(delivered.runs))
        print(f"  {name:<52}{pure:8.2f}{c:10.2f}{pure / c:7.2f}x")
    template = SendRequestTemplate("bench-producer", "bench", sent_addr=2130706433, visit_token=-2)
    # a publish batch: 100 messages (the REST batch of bench_vs_native), timed over n // 100 of them
    batches = max(1, n // 100)
    n = batches * 100
    sends = [prepare_message(b"x" * args.size, None, "orders", "202611232200") for _ in range(100)]
    partitions = [i % 8 for i in range(100)]
    requests = template.encode_many_py(partitions, sends)
    serials = list(range(100))

    def frames() -> None:
        for _ in range(batches):
            rpc.encode_requests(serials, rpc.Method.SEND_MESSAGE, requests, 10_000)

    def encode_py() -> None:
        for _ in range(batches):
            template.encode_many_py(partitions, sends)

    def encode() -> None:
        for _ in range(batches):
            template.encode_many(partitions, sends)

    def rows(compiled_on: bool, encoder: Callable[[], None]) -> list[float]:
        """The encode rows with the compiled loops of send_request and rpc on, or off (the pure path)."""
        selected = send_request._loops, rpc._loops
        if not compiled_on:
            send_request._loops, rpc._loops = send_request._Python(), rpc._Python()
        try:
            return [cpu_us(args.rounds, n, encoder), cpu_us(args.rounds, n, frames)]
        finally:
            send_request._loops, rpc._loops = selected

    names = ["SendMessage requests, 100 a batch (encode_many)", "their RPC frames (encode_requests)"]
    pure_rows = rows(False, encode_py)
    if compiled is None:
        for name, pure in zip(names, pure_rows, strict=True):
            print(f"  {name:<52}{pure:8.2f}")
        return
    for name, pure, c in zip(names, pure_rows, rows(True, encode), strict=True):
        print(f"  {name:<52}{pure:8.2f}{c:10.2f}{pure / c:7.2f}x")


if __name__ == "__main__":
    main()
