"""The shape of REST consumption through one gateway worker: how many messages a long-poll answer carries,
the gateway's CPU per request next to its CPU per message, and how many socket writes an answer (or an SSE
stream's step) makes on the client's connection.

Run from the repository root against a running TubeMQ master on loopback (the real one of
``../shared/tubemq-real``, or ``tubemq-gateway embedded``), on a topic holding enough messages::

    python bench/bench_poll_shape.py --master 127.0.0.1:8715 [--topic demo] [--max 1000,100,1] [--sse]
        [--messages 100000] [--strace]

It starts one gateway process (``serve --workers 1``), and for each ``--max`` runs a tight long-poll loop
(``max_messages`` that, ``max_bytes`` 8 MiB, one client, as ``bench/bench_vs_native.py`` polls: gzip asked
unless ``--identity``) in a fresh group from the earliest offset; with ``--sse`` it reads the SSE stream the
same way. It prints the messages per answer (mean and range), the rate, and the gateway's CPU (user + system,
``/proc``) per request and per message: the per-request part is what the HTTP framework (middlewares,
routing, the request's own objects) weighs against the per-message part (decoding, rendering, writing).

With ``--strace`` the write system calls of the worker on the client's connection (its file descriptor,
found from the connection's ports) are counted: per answer for the long poll, per client read and per
thousand messages for the stream (a stream's step, what it fetched and rendered at once, is at most
``consumers.sse_max_unsent_bytes`` of values). strace slows the process: the rate and CPU of a traced run
are not comparable with an untraced one.

The gateway of another source tree runs with ``--gateway-root`` (an export of an older commit, for a
before/after comparison). Only 127.0.0.1 is contacted; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_native import LOOPBACK, Gateway, _group, _rest_instance

#: a long poll's bounds besides max_messages (those of bench_vs_native's consume case)
MAX_BYTES = 8 * 2**20
TIMEOUT_MS = 2000
_WRITES = re.compile(rb"^\d+\s+(write|writev|sendmsg|sendto)\((\d+),", re.MULTILINE)


@dataclass
class Shape:
    """What one loop measured."""

    messages: int = 0
    answers: int = 0
    smallest: int = 0
    largest: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    writes: int | None = None

    def line(self, label: str, unit: str) -> str:
        per = self.messages / self.answers if self.answers else 0.0
        text = (
            f"{label:<22} {self.messages:>8,} msgs in {self.answers:>6,} {unit}s: {per:7.1f} msgs/{unit} "
            f"({self.smallest}..{self.largest}), {self.messages / self.seconds:>9,.0f} msg/s, gateway CPU "
            f"{self.cpu / self.answers * 1e6:8.1f} us/{unit}, {self.cpu / self.messages * 1e6:6.2f} us/msg"
        )
        if self.writes is not None:
            text += f", {self.writes:,} writes on the connection ({self.writes / self.answers:.2f}/{unit})"
        return text


class Tracer:
    """strace of one process's writes, counted for one file descriptor."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [
                "strace",
                "-f",
                "-qq",
                "-e",
                "trace=write,writev,sendmsg,sendto",
                "-e",
                "signal=none",
                "-p",
                str(pid),
                "-o",
                str(out),
            ],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # attached before the timed loop starts

    def writes(self, fd: int) -> int:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        return sum(1 for m in _WRITES.finditer(self.out.read_bytes()) if int(m.group(2)) == fd)


def server_fd(pid: int, server_port: int, client_port: int) -> int:
    """The gateway's file descriptor of the TCP connection between those loopback ports."""
    inodes = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
        if (local, remote) == (server_port, client_port):
            inodes.add(fields[9])
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with_target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if with_target.startswith("socket:[") and with_target[8:-1] in inodes:
            return int(fd)
    raise SystemExit(f"no connection {server_port}<-{client_port} in process {pid}")


def _headers(args: argparse.Namespace) -> dict[str, str]:
    """httpx asks for gzip by default (and decompresses, in this process); --identity asks for none."""
    return {"Accept-Encoding": "identity"} if args.identity else {}


def client_port(response: httpx.Response) -> int:
    stream = response.extensions["network_stream"]
    port: int = stream.get_extra_info("client_addr")[1]
    return port


async def poll_loop(
    gw: Gateway, worker: int, args: argparse.Namespace, count: int, trace: Path | None
) -> Shape:
    async with httpx.AsyncClient(base_url=gw.url, timeout=60, headers=_headers(args)) as http:
        group = _group("shape")
        instance = await _rest_instance(http, group, args.topic)
        path = f"/v1/consumers/{group}/instances/{instance}/messages"
        params = {"max_messages": count, "max_bytes": MAX_BYTES, "timeout_ms": TIMEOUT_MS}

        async def fetch() -> tuple[int, httpx.Response]:
            r = await http.get(path, params=params)
            r.raise_for_status()
            return r.content.count(b'{"token":'), r

        try:
            got, first = await _first(fetch, args.join_wait)
            fd = server_fd(worker, gw.http_port, client_port(first))
            tracer = Tracer(worker, trace) if trace is not None else None
            shape = Shape(smallest=2**31)
            cpu0, start = gw.cpu(), time.perf_counter()
            while shape.messages < args.messages:
                got, _ = await fetch()
                if not got:
                    print("  the topic ran dry")
                    break
                shape.messages += got
                shape.answers += 1
                shape.smallest, shape.largest = min(shape.smallest, got), max(shape.largest, got)
            shape.seconds, shape.cpu = time.perf_counter() - start, gw.cpu() - cpu0
            if tracer is not None:
                shape.writes = tracer.writes(fd)
            return shape
        finally:
            await http.delete(f"/v1/consumers/{group}/instances/{instance}")


async def _first(
    fetch: Callable[[], Awaitable[tuple[int, httpx.Response]]], wait: float
) -> tuple[int, httpx.Response]:
    """The first answer with messages (joining the group is not measured)."""
    deadline = time.monotonic() + wait
    got, response = await fetch()
    while not got:
        if time.monotonic() > deadline:
            raise SystemExit("no message arrived: the consumer got no partitions (or the topic is empty)")
        got, response = await fetch()
    return got, response


async def sse_loop(gw: Gateway, worker: int, args: argparse.Namespace, trace: Path | None) -> Shape:
    """The stream read until ``--messages`` events; the Shape's answers are the client's reads."""
    async with httpx.AsyncClient(base_url=gw.url, timeout=60, headers=_headers(args)) as http:
        group = _group("shapesse")
        instance = await _rest_instance(http, group, args.topic)
        path = f"/v1/consumers/{group}/instances/{instance}/stream"
        shape = Shape(smallest=2**31)
        tracer: Tracer | None = None
        fd = -1
        cpu0 = start = 0.0
        tail = b""
        try:
            async with http.stream("GET", path, params={"max_messages": args.sse_step}) as response:
                response.raise_for_status()
                async for chunk in response.aiter_raw():
                    data = tail + chunk
                    got = data.count(b"\nid: ") - tail.count(b"\nid: ")
                    tail = data[-5:]
                    if not got:
                        continue
                    if not start:  # the first events are not measured: they include joining the group
                        fd = server_fd(worker, gw.http_port, client_port(response))
                        tracer = Tracer(worker, trace) if trace is not None else None
                        cpu0, start = gw.cpu(), time.perf_counter()
                        continue
                    shape.messages += got
                    shape.answers += 1
                    shape.smallest, shape.largest = min(shape.smallest, got), max(shape.largest, got)
                    if shape.messages >= args.messages:
                        break
                shape.seconds, shape.cpu = time.perf_counter() - start, gw.cpu() - cpu0
                if tracer is not None:
                    shape.writes = tracer.writes(fd)
        finally:
            await http.delete(f"/v1/consumers/{group}/instances/{instance}")
        return shape


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="TubeMQ master host:port (loopback only)")
    parser.add_argument("--topic", default="demo", help="topic to consume (default demo)")
    parser.add_argument("--messages", type=int, default=100_000, help="messages per loop (default 100000)")
    parser.add_argument(
        "--max", default="1000,1", help="max_messages of each long-poll loop (default 1000,1)"
    )
    parser.add_argument("--sse", action="store_true", help="read the SSE stream too")
    parser.add_argument("--sse-step", type=int, default=1000, help="the stream's max_messages (default 1000)")
    parser.add_argument("--strace", action="store_true", help="count the writes on the client's connection")
    parser.add_argument(
        "--identity", action="store_true", help="ask for answers not compressed (Accept-Encoding: identity)"
    )
    parser.add_argument("--join-wait", type=float, default=60.0, help="seconds to wait for partitions")
    parser.add_argument("--gateway-root", help="run the gateway of this source tree")
    parser.add_argument("--gateway-arg", action="append", default=[], help="extra argument for serve")
    parser.add_argument("--gateway-env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.master.rsplit(":", 1)[0] not in LOOPBACK:
        parser.error("--master must be a loopback address (127.0.0.1 or [::1])")
    args.gateway_env = dict(item.split("=", 1) for item in args.gateway_env)
    args.log_level = "warning"
    gw = Gateway(args.master, args, None, workers=1)
    worker = gw.proc.pid  # --workers 1 serves in the one process
    trace = Path(f"/tmp/bench_poll_shape.{os.getpid()}.strace") if args.strace else None
    print(f"load average {Path('/proc/loadavg').read_text().split(' ', 3)[:3]}, one worker, {args.topic!r}")
    try:
        for count in (int(c) for c in args.max.split(",")):
            n = min(args.messages, max(count * 100, 2000))  # small answers: a bounded number of requests
            run = argparse.Namespace(**{**vars(args), "messages": n})
            shape = asyncio.run(poll_loop(gw, worker, run, count, trace))
            print(shape.line(f"long poll max {count}", "answer"))
        if args.sse:
            shape = asyncio.run(sse_loop(gw, worker, args, trace))
            print(shape.line(f"SSE max {args.sse_step}", "read"))
            if shape.writes is not None:
                print(f"{'':<22} {shape.writes / shape.messages * 1000:.2f} writes per 1000 messages")
    finally:
        gw.stop()
        if trace is not None:
            trace.unlink(missing_ok=True)
    print(f"load average {Path('/proc/loadavg').read_text().split(' ', 3)[:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
