"""grpc.aio's own floor: the server CPU of a Publish call when the handler does nothing, beside what the
gateway's interceptor, servicer and conversion add, so the gateway's figures can be split into grpc's share
and ours.

Run from the repository root: ``python bench/bench_grpc_floor.py [--seconds S] [--concurrency C]
[--repeat N]``.

A server process (this script with ``--serve``) answers ``GatewayService/Publish`` in one of these modes,
every one a ``grpc.aio`` server with the gateway's own core options (``gateway.grpc.server.core_options``:
the bound on calls in progress, streams per connection, the message size, no per-message decompression, no
BDP probing):

* ``bytes``: no protobuf at all: the request stays bytes, the answer is prebuilt bytes (grpc.aio's cycle);
* ``parse``: the request parsed, the prebuilt answer (the bare grpc.aio server: grpc's floor);
* ``passthrough``: ``parse`` behind an interceptor that only hands the method's handler back (what grpc.aio
  adds for having a Python interceptor at all);
* ``interceptor``: ``parse`` behind the gateway's :class:`~gateway.grpc.interceptors.GatewayInterceptor`
  (authentication off, no events: request id, admission, budgets, error translation);
* ``servicer``: the gateway's own servicer behind that interceptor, over a publish service that answers at
  once with prebuilt outcomes, the call events feeding the gateway's metrics (everything of a gRPC Publish
  but the service and the producer).

This process drives it with grpc.aio (uvloop when installed), ``--concurrency`` calls in flight on one
channel, or (``--driver h2load``) h2load drives it as bench_vs_native.py drives the gateway (``--concurrency``
connections, one call in flight on each; bench/grpc_load.py), with one message per call and 100-message
batches of ``--size``-byte values, and prints the server process's CPU microseconds per call and per message
(user + system from ``/proc``). Each of ``--repeat`` rounds runs every mode once, one after the other,
and the table shows each mode's least CPU per call over the rounds (a busy machine adds to the CPU a call
takes, never takes from it), then the gateway's share: the ``servicer`` row less the ``parse`` row, per call
and as a part of the whole. ``--option KEY=VALUE`` (repeatable, an integer or a string) is passed to
``grpc.aio.server`` after the gateway's own, to measure the floor with other options. The gateway's own
figures, against a broker, are in ``bench_grpc.py`` and ``bench_vs_native.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_grpc import timed  # noqa: E402
from bench_publish import free_port  # noqa: E402
from benchloop import pick_loop  # noqa: E402
from grpc_load import frame, h2load_installed  # noqa: E402
from proc_cpu import cpu_seconds  # noqa: E402

from gateway.config import Settings  # noqa: E402
from gateway.grpc import convert  # noqa: E402
from gateway.grpc.interceptors import GatewayInterceptor  # noqa: E402
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb  # noqa: E402
from gateway.grpc.pb.tubemq.gateway.v1.gateway_pb2_grpc import (  # noqa: E402
    GatewayServiceStub,
    add_GatewayServiceServicer_to_server,
)
from gateway.grpc.servicer import GatewayServicer  # noqa: E402
from gateway.observability.metrics import GatewayMetrics  # noqa: E402
from gateway.tubemq.events import EventBus  # noqa: E402

try:  # the servicer's own registration (Publish requests read by hand), where the tree has one
    from gateway.grpc.servicer import add_to_server
except ImportError:  # an older tree
    add_to_server = add_GatewayServiceServicer_to_server
try:  # the gateway's core options, where the tree names them
    from gateway.grpc.server import core_options
except ImportError:  # an older tree: grpc's defaults

    def core_options(settings: Settings, *, max_message_bytes: int, reuse_port: bool) -> dict[str, Any]:
        return {}


from gateway.service.publish import OutgoingMessage, PublishOutcome, PublishService  # noqa: E402
from gateway.tubemq.producer import SendResult  # noqa: E402

SERVICE = "tubemq.gateway.v1.GatewayService"
MODES = ("bytes", "parse", "passthrough", "interceptor", "servicer")
BATCHES = (1, 100)


def _result(i: int) -> SendResult:
    return SendResult(
        topic="bench",
        partition_key="1:bench:0",
        broker_id=1,
        partition_id=i % 8,
        append_offset=123456 + i,
        message_id=987654321 + i,
        append_time_ms=1_700_000_000_000,
        partition_index=i % 8,
    )


def _response(n: int) -> pb.PublishResponse:
    stored = [PublishOutcome(i, result=_result(i)) for i in range(n)]
    return pb.PublishResponse(topic="bench", results=[convert.publish_result(o) for o in stored])


class _PassThrough(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        return await continuation(details)


class _Publisher:
    """A publish service that prepares messages by the publish rules (as the gateway's does), stores nothing
    and answers at once with prebuilt outcomes."""

    def __init__(self, outcomes: dict[int, list[PublishOutcome]]) -> None:
        self._outcomes = outcomes
        # the service's own prepare step (it needs no producer), where the tree has one
        self.prepare = getattr(PublishService(None), "prepare", None)  # type: ignore[arg-type]

    async def publish(self, topic: str, messages: Sequence[OutgoingMessage]) -> list[PublishOutcome]:
        return self._outcomes[len(messages)]

    async def publish_prepared(self, topic: str, prepared: Sequence[object]) -> list[PublishOutcome]:
        return self._outcomes[len(prepared)]


class _Runtime:
    def __init__(self, outcomes: dict[int, list[PublishOutcome]]) -> None:
        self._publisher = _Publisher(outcomes)

    def publisher(self) -> _Publisher:
        return self._publisher

    def subscriptions(self) -> object:
        """The push subscriptions API, which the servicer takes and a Publish never calls."""
        raise RuntimeError("the bench's runtime has no push subscriptions")


async def serve(mode: str, port: int, options: Sequence[tuple[str, Any]] = ()) -> None:
    answers = {n: _response(n) for n in BATCHES}
    answer_bytes = {n: a.SerializeToString() for n, a in answers.items()}
    outcomes = {n: [PublishOutcome(i, result=_result(i)) for i in range(n)] for n in BATCHES}

    async def publish(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if mode == "bytes":
            # the client sends 1 or 100 messages: tell them apart by size
            return answer_bytes[1 if len(request) < 4096 else 100]
        return answers[len(request.messages)]

    interceptors: list[grpc.aio.ServerInterceptor] = []
    if mode == "passthrough":
        interceptors.append(_PassThrough())
    elif mode == "interceptor":
        interceptors.append(GatewayInterceptor())
    elif mode == "servicer":
        events = EventBus()
        GatewayMetrics(process_metrics=False).subscribe(events)  # the call events, as a served gateway's
        interceptors.append(GatewayInterceptor(events=events))
    settings = Settings(masters="127.0.0.1:1")
    most = getattr(settings.grpc, "max_message_bytes", 4 * 1024 * 1024)
    core = core_options(settings, max_message_bytes=most, reuse_port=False)
    core["options"] = [*core.get("options", ()), *options]
    server = grpc.aio.server(interceptors=interceptors, **core)
    if mode == "servicer":
        add_to_server(GatewayServicer(_Runtime(outcomes)), server)  # type: ignore[arg-type]
    else:
        raw = mode == "bytes"
        handler = grpc.unary_unary_rpc_method_handler(
            publish,
            request_deserializer=None if raw else pb.PublishRequest.FromString,
            response_serializer=None if raw else pb.PublishResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Publish": handler}),)
        )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def drive(port: int, batch: int, size: int, concurrency: int, seconds: float) -> float:
    """Calls per second of ``concurrency`` loops calling Publish with ``batch`` messages."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = GatewayServiceStub(channel)
        message = pb.Message(value=b"x" * size, attributes={"bench": "1"})
        request = pb.PublishRequest(topic="bench", messages=[message] * batch)
        await stub.Publish(request)

        async def one() -> int:
            await stub.Publish(request)
            return 1

        return await timed(seconds, concurrency, one)


def h2load(port: int, batch: int, size: int, connections: int, seconds: float) -> float:
    """Calls per second from h2load (one call in flight on each of ``connections``)."""
    message = pb.Message(value=b"x" * size, attributes={"bench": "1"})
    body = frame(pb.PublishRequest(topic="bench", messages=[message] * batch).SerializeToString())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "body.bin"
        path.write_bytes(body)
        cmd = ["h2load", "-D", str(max(1, round(seconds))), "-c", str(connections), "-m", "1", "-t", "1"]
        cmd += ["-d", str(path), "-H", "content-type: application/grpc", "-H", "te: trailers"]
        cmd += [f"http://127.0.0.1:{port}/{SERVICE}/Publish"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    found = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out)
    if found is None or " 0 failed" not in out:
        raise SystemExit(f"h2load failed:\n{out[-2000:]}")
    return float(found.group(1))


def _option(item: str) -> tuple[str, Any]:
    key, _, value = item.partition("=")
    return key, int(value) if value.lstrip("-").isdigit() else value


def _run_mode(mode: str, args: argparse.Namespace, loop_factory: Any) -> list[tuple[int, float, float]]:
    """One server of ``mode``, each batch size driven in turn: (batch, calls/s, CPU us per call)."""
    port = free_port()
    cmd = [sys.executable, __file__, "--serve", mode, str(port)] + (["--no-uvloop"] if args.no_uvloop else [])
    cmd += [f"--option={item}" for item in args.option]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {mode} server did not start")
        for batch in BATCHES:
            if args.driver == "h2load":
                h2load(port, batch, args.size, args.concurrency, 1)  # warm up
                cpu0 = cpu_seconds(server.pid)
                rate = h2load(port, batch, args.size, args.concurrency, args.seconds)
                cpu = cpu_seconds(server.pid) - cpu0
                elapsed = max(1, round(args.seconds))  # h2load's rate is over its own duration
            else:
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    runner.run(drive(port, batch, args.size, args.concurrency, 0.5))  # warm up
                    cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
                    rate = runner.run(drive(port, batch, args.size, args.concurrency, args.seconds))
                    cpu, elapsed = cpu_seconds(server.pid) - cpu0, time.perf_counter() - t0
            rows.append((batch, rate, cpu / (rate * elapsed) * 1e6))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per case (default 5)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (default 16)")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every mode (default 1)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {MODES}")
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop (both sides)")
    parser.add_argument(
        "--driver", choices=("grpc", "h2load"), default="grpc", help="the load (default grpc)"
    )
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a grpc.aio.server option"
    )
    parser.add_argument("--serve", nargs=2, metavar=("MODE", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    options = [_option(item) for item in args.option]
    loop_factory, loop_name = pick_loop(args.no_uvloop)
    if args.serve:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(args.serve[0], int(args.serve[1]), options))
        return 0
    if args.driver == "h2load" and not h2load_installed():
        parser.error("install h2load (Debian package nghttp2-client)")
    load = "connections (h2load)" if args.driver == "h2load" else "calls in flight on one channel"
    print(
        f"value size {args.size} B, {args.concurrency} {load}, {args.seconds:g} s per case, "
        f"server {loop_name}" + (f", options {args.option}" if args.option else "")
    )
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    modes = args.modes.split(",")
    least: dict[tuple[str, int], tuple[float, float]] = {}  # (mode, batch) -> (CPU us per call, calls/s)
    for round_ in range(args.repeat):
        for mode in modes:
            for batch, rate, per_call in _run_mode(mode, args, loop_factory):
                print(
                    f"  [{round_ + 1}] {mode} {batch}: {rate:,.0f} calls/s, {per_call:.1f} us/call",
                    flush=True,
                )
                if (mode, batch) not in least or per_call < least[(mode, batch)][0]:
                    least[(mode, batch)] = (per_call, rate)
    print(f"least CPU per call of {args.repeat} round(s):")
    print(f"{'server':<14}{'batch':>6}{'calls/s':>10}{'CPU us/call':>13}{'CPU us/msg':>12}")
    for mode in modes:
        for batch in BATCHES:
            per_call, rate = least[(mode, batch)]
            print(f"{mode:<14}{batch:>6}{rate:>10,.0f}{per_call:>13.1f}{per_call / batch:>12.1f}")
    if "parse" in modes and "servicer" in modes:
        for batch in BATCHES:
            floor, whole = least[("parse", batch)][0], least[("servicer", batch)][0]
            print(
                f"batch {batch}: bare grpc.aio {floor:.1f} us/call, the gateway's servicer {whole:.1f} "
                f"us/call: the gateway's share {whole - floor:.1f} us ({(whole - floor) / whole:.0%})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
