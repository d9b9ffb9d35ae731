"""Throughput of the frame codec: encode and decode, for 100-byte, 1 KiB and 64 KiB payloads.

Run from the repository root: ``python bench/bench_frame.py [seconds per case]`` (default 0.5 s).
Decoding feeds 64 KiB chunks of a stream of back-to-back frames, as a socket reader would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.tubemq.wire.frame import encode_frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder

SIZES = {"100 B": 100, "1 KiB": 1024, "64 KiB": 64 * 1024}
CHUNK = 64 * 1024


def measure(run: Callable[[], int], seconds: float) -> tuple[float, int]:
    """Call ``run`` (returning how many frames it handled) repeatedly for ``seconds``; frames per second."""
    frames = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        frames += run()
        elapsed = time.perf_counter() - start
    return frames / elapsed, frames


def bench_encode(payload: bytes, batch: int) -> Callable[[], int]:
    def run() -> int:
        for serial in range(batch):
            encode_frame(serial, payload)
        return batch

    return run


def bench_decode(payload: bytes, batch: int) -> Callable[[], int]:
    stream = b"".join(encode_frame(serial, payload) for serial in range(batch))
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def run() -> int:
        decoder = FrameDecoder()
        count = 0
        for chunk in chunks:
            count += len(decoder.feed(chunk))
        assert count == batch
        return count

    return run


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    print(f"{'case':<16}{'frames/s':>14}{'MB/s (payload)':>18}")
    for label, size in SIZES.items():
        payload = bytes(i % 251 for i in range(size))
        batch = max(1, (4 << 20) // (size + 16))
        for op, factory in (("encode", bench_encode), ("decode", bench_decode)):
            rate, _ = measure(factory(payload, batch), seconds)
            print(f"{op + ' ' + label:<16}{rate:>14,.0f}{rate * size / 1e6:>18,.1f}")


if __name__ == "__main__":
    main()
