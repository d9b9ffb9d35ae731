"""CPU per one-message publish through the gateway's ASGI app, in process, next to the service alone.

Run from the repository root:
``python bench/bench_app_publish.py --master 127.0.0.1:PORT [--requests N] [--concurrency C] [--rounds R]``
(a loopback master: the real TubeMQ, or an embedded cluster started with ``tubemq-gateway embedded``).

No sockets on the HTTP side and no load driver: each request is a synthetic ASGI ``http`` scope sent straight
into the app (every middleware, the access log to ``/dev/null`` as JSON, metrics, limits, auth), so the
process's own CPU time divided by the requests is the gateway's cost per request without uvicorn. The same
count of direct ``PublishService.publish`` calls is printed next to it for scale (a lower bound of the core's
share: alone, the concurrent sends share the connection's writes more than between HTTP requests).

``--without RequestIdMiddleware`` (repeatable) leaves a middleware out: the difference is its cost (the work
it does included).

With ``--protocol`` the requests go in one layer further out, as bytes into the HTTP protocol the gateway
serves with (uvicorn's httptools protocol with the gateway's guard, ``gateway.serve.http_config``), one
protocol instance per connection over an in-memory transport: the parser, uvicorn's request cycle, the
guard's timers and the response writes are counted too; only the socket system calls are not.
``PYTHONPATH=<other tree>`` runs another version for an A/B comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

# The gateway comes from PYTHONPATH when set (an older tree for an A/B), else from this checkout.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchloop import pick_loop

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.observability.logging import configure_logging
from gateway.runtime import Runtime
from gateway.serve import tune_gc
from gateway.service.publish import OutgoingMessage

LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


def asgi_scope(method: str, path: str, headers: list[tuple[bytes, bytes]], query: str = "") -> dict[str, Any]:
    """A request's ASGI ``http`` scope as uvicorn builds it for a loopback client."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "state": {},
    }


class Driver:
    """Sends one-message publish requests into an ASGI app and checks every answer is a 200."""

    def __init__(self, app: Any, topic: str, size: int) -> None:
        self.app = app
        self.body = json.dumps({"messages": [{"value": "x" * size, "attributes": {"bench": "1"}}]}).encode()
        self.path = f"/v1/topics/{topic}/messages"
        self.headers = [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
            (b"user-agent", b"bench"),
        ]

    async def one(self) -> None:
        scope = asgi_scope("POST", self.path, self.headers)
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # a disconnect never comes in this bench
            sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app(scope, receive, send)
        if status != 200:
            raise SystemExit(f"publish answered {status}")


class MemoryTransport(asyncio.Transport):
    """What the protocol writes is parsed for whole answers (by Content-Length); ``answered`` resolves at
    the end of each."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = bytearray()
        self.answered: asyncio.Future[int] | None = None
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        at = head.find(b"content-length: ")
        length = int(head[at + 16 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(self.buffer) >= end + 4 + length:
            status = int(head[9:12])
            del self.buffer[: end + 4 + length]
            if self.answered is not None and not self.answered.done():
                self.answered.set_result(status)

    def writelines(self, data: Any) -> None:
        self.write(b"".join(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class ProtocolDriver:
    """Sends one-message publish requests as bytes into the gateway's HTTP protocol, one connection per
    request in flight."""

    def __init__(self, app: Any, settings: Settings, topic: str, size: int, connections: int) -> None:
        from uvicorn.server import ServerState

        from gateway.serve import http_config

        config = http_config(settings, app, host="127.0.0.1", port=8080, lifespan="off")
        config.load()
        body = json.dumps({"messages": [{"value": "x" * size, "attributes": {"bench": "1"}}]}).encode()
        self.request = (
            f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\nuser-agent: bench\r\n\r\n"
        ).encode() + body
        self._config = config
        self._state = ServerState()
        self.idle = [self._connect() for _ in range(connections)]

    def _connect(self) -> tuple[asyncio.Protocol, MemoryTransport]:
        config = self._config
        protocol = config.http_protocol_class(config=config, server_state=self._state, app_state={})
        transport = MemoryTransport()
        protocol.connection_made(transport)
        return protocol, transport

    async def one(self) -> None:
        protocol, transport = self.idle.pop()
        if transport.closing:  # the server closed it (idle past limits.keep_alive_timeout): a new one
            protocol.connection_lost(None)
            protocol, transport = self._connect()
        transport.answered = asyncio.get_running_loop().create_future()
        protocol.data_received(self.request)
        status = await transport.answered
        self.idle.append((protocol, transport))
        if status != 200:
            raise SystemExit(f"publish answered {status}")

    def close(self) -> None:
        for protocol, _ in self.idle:
            protocol.connection_lost(None)


async def run_many(work: Any, requests: int, concurrency: int) -> float:
    """CPU seconds of this process for ``requests`` calls of ``work``, ``concurrency`` at a time."""
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await work()

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - cpu


@contextlib.asynccontextmanager
async def started_app(args: argparse.Namespace) -> AsyncIterator[tuple[Any, Runtime]]:
    """The gateway's app of a started runtime on ``--master``, the access log sampled as asked."""
    runtime = Runtime(Settings(masters=args.master, access_log_sample=args.access_log_sample))
    await runtime.start()
    try:
        yield create_app(runtime=runtime), runtime
    finally:
        await runtime.stop()


async def main_async(args: argparse.Namespace) -> None:
    async with started_app(args) as (app, runtime):
        settings = runtime.settings
        if args.without:  # a layer's cost: the same requests with it left out (its work is skipped too)
            names = {m.cls.__name__ for m in app.user_middleware}
            unknown = set(args.without) - names
            if unknown:
                raise SystemExit(f"no middleware {sorted(unknown)}; the app's are {sorted(names)}")
            app.user_middleware = [m for m in app.user_middleware if m.cls.__name__ not in args.without]
        driver: Driver | ProtocolDriver = Driver(app, args.topic, args.size)
        if args.protocol:
            driver = ProtocolDriver(app, settings, args.topic, args.size, args.concurrency)
        service = runtime.publish
        assert service is not None
        message = [OutgoingMessage(b"x" * args.size, attributes={"bench": "1"})]

        async def direct() -> None:
            await service.publish(args.topic, list(message))

        await run_many(driver.one, 200, args.concurrency)  # warm up: routes, metric children, links
        await run_many(direct, 200, args.concurrency)
        tune_gc()  # as the server does just before serving (gateway/serve.py)
        app_us, svc_us = [], []
        for _ in range(args.rounds):
            app_us.append(await run_many(driver.one, args.requests, args.concurrency) / args.requests * 1e6)
            svc_us.append(await run_many(direct, args.requests, args.concurrency) / args.requests * 1e6)
        app_med, svc_med = sorted(app_us)[len(app_us) // 2], sorted(svc_us)[len(svc_us) // 2]
        if isinstance(driver, ProtocolDriver):
            driver.close()
        way = "protocol" if args.protocol else "app"
        if args.without:
            way += f" without {', '.join(args.without)}"
        print(
            f"{args.label}one-message publish, {args.size} B, {args.concurrency} in flight, "
            f"median of {args.rounds} x {args.requests}: {way} {app_med:.1f} us/request "
            f"(min {min(app_us):.1f}); PublishService.publish alone {svc_med:.1f} (min {min(svc_us):.1f})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="demo", help="topic to publish to (default demo)")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    parser.add_argument("--requests", type=int, default=3000, help="requests per round (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are printed (default 5)")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="MIDDLEWARE",
        help="leave this middleware (class name, e.g. RequestIdMiddleware) out of the app: its cost per "
        "request by difference (repeatable)",
    )
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="requests as bytes into the HTTP protocol (uvicorn's, guarded)",
    )
    run_app_bench(parser, main_async)
    return 0


def app_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every in-process app bench: the master, the access log's sample, a label, the event
    loop."""
    parser.add_argument("--master", required=True, help="TubeMQ master host:port (loopback only)")
    parser.add_argument(
        "--access-log-sample", type=float, default=1.0, help="the access log's sample (default 1.0)"
    )
    parser.add_argument("--label", default="", help="text printed before the result (an A/B's name)")
    parser.add_argument("--no-uvloop", action="store_true", help="asyncio's own event loop")


def run_app_bench(
    parser: argparse.ArgumentParser, bench: Callable[[argparse.Namespace], Coroutine[Any, Any, None]]
) -> None:
    """Parse ``parser``'s arguments (with :func:`app_arguments`'s), then run ``bench`` with them on the
    event loop of choice, the access log to ``/dev/null`` as JSON."""
    app_arguments(parser)
    args = parser.parse_args()
    if args.master.rsplit(":", 1)[0] not in LOOPBACK:
        parser.error("--master must be a loopback address (127.0.0.1 or [::1])")
    if args.label:
        args.label += ": "
    configure_logging("info", "json", stream=open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    loop_factory, _ = pick_loop(args.no_uvloop)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(bench(args))


if __name__ == "__main__":
    raise SystemExit(main())
