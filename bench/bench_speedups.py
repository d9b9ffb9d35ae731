"""Compiled vs pure: CPU microseconds per message of each per-message loop the C extension takes over
(gateway/tubemq/wire/_speedups.c), against its pure-Python reference, on the same input in one process.

Run from the repository root: ``python bench/bench_speedups.py [--messages N] [--size B] [--rounds R]``.
Each loop is timed over R rounds of one N-message batch with ``time.process_time`` (CPU time of this
process: other load on a shared machine does not inflate it); the figure is the best round's µs per message.
Rows: decoding a GetMessage answer (CRC check, attribute split, ConsumedMessage objects) for messages
without attributes (as the Java benchmark producer sends), with a stream id and time (as the gateway's
publish sets) and with custom attributes too. Needs the extension built (``pip install -e .`` where a C
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

from gateway.tubemq.consumer import batch


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
    try:
        import gateway.tubemq.wire._speedups as compiled
    except ImportError as exc:
        print(f"the C extension is not built ({exc}): pure rows only")
        compiled = None
    else:
        compiled.set_message_type(batch.ConsumedMessage, batch._MESSAGE_FIELDS)
    n = args.messages
    print(f"{n} messages of {args.size} B, best of {args.rounds} rounds, CPU us per message")
    print(f"  {'loop':<44}{'pure':>8}{'compiled':>10}{'ratio':>8}")
    for attributes in sorted(ATTRIBUTES):
        wire = answer(n, args.size, attributes).messages
        pure = cpu_us(args.rounds, n, lambda wire=wire: batch.decode_messages_py(wire, None, 0, True))
        name = f"decode GetMessage answer (attributes {attributes})"
        if compiled is None:
            print(f"  {name:<44}{pure:8.2f}")
            continue
        c = cpu_us(
            args.rounds,
            n,
            lambda wire=wire: compiled.decode_messages(wire, None, 0, True, batch.parse_prefix),
        )
        print(f"  {name:<44}{pure:8.2f}{c:10.2f}{pure / c:7.2f}x")


if __name__ == "__main__":
    main()
