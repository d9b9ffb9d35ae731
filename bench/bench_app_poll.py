"""CPU per long poll through the gateway's ASGI app, in process, next to the service's poll and the render
alone: the HTTP framework's share of a poll, per request.

Run from the repository root, on a topic holding enough messages (each way reads in a group of its own, from
the earliest offset):
``python bench/bench_app_poll.py --master 127.0.0.1:PORT [--topic demo] [--max 1000] [--requests N]``
(a loopback master: the real TubeMQ, or an embedded cluster started with ``tubemq-gateway embedded``).

No sockets on the HTTP side: each poll is a synthetic ASGI ``http`` scope sent into the app (every middleware,
the access log to ``/dev/null`` as JSON, metrics, limits, auth; no gzip asked for: the answer's messages are
counted in it), as ``bench/bench_app_publish.py`` sends publishes. The other way calls
``ConsumerService.poll`` and ``render_poll`` as the route does, without the app. Both ways poll one after the
other, round by round, each its own instance (so each finds its own messages waiting, fetched ahead as a
client's would be); the difference of their CPU per request is what the app's layers (middlewares, routing,
parameters, the response objects) add to one poll, whatever it carries. Polls that answered no message are
not counted. The CPU is the process's: each way's answers are scanned for their count alike, and the
instance not being polled fetches ahead (up to its cap) during the other's round, for both ways alike; on a
busy machine, run it more than once.

What this does not see: a poll that comes over a socket also pays uvicorn's request cycle (the parser's
callbacks, the scope, a task per request, ASGI messages turned into bytes, the keep-alive timer), the event
loop's turns between the client and the gateway (about five ``epoll_wait`` a poll) and the socket's system
calls; with a client in another process the caches are cold at each poll too. On a 2-core machine that was
about 300 us more than the app here (``bench/bench_poll_shape.py --max 1`` with ``http.direct_poll`` off:
530-830 us a poll, against 300-330 here), nearly all of it user time (the system time is 15-40 us a poll:
one ``recvfrom``, one ``sendto``). And the usual poll does not take the ASGI way at all over a socket: the
HTTP protocol answers it below ASGI (``gateway/api/direct_poll.py``), which this in-process bench cannot
enter; ``bench_poll_shape.py`` measures it (285-420 us a one-message poll, against 530-830 the ASGI way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))

from bench_app_publish import asgi_scope, run_app_bench, started_app

from gateway.api.consumer_render import render_poll
from gateway.serve import tune_gc


async def call(app: Any, method: str, path: str, query: str = "", body: bytes = b"") -> bytes:
    """One request into the app; its answer's body (any status but 200, 201 or 204 ends the bench)."""
    headers = [
        (b"host", b"127.0.0.1"),
        (b"user-agent", b"bench"),
        (b"content-length", str(len(body)).encode()),
    ]
    if body:
        headers.append((b"content-type", b"application/json"))
    scope = asgi_scope(method, path, headers, query)
    sent = False
    status = 0
    parts: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # a disconnect never comes in this bench
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    if status not in (200, 201, 204):
        raise SystemExit(f"{method} {path} answered {status}: {b''.join(parts)[:300]!r}")
    return parts[0] if len(parts) == 1 else b"".join(parts)  # not copied: the direct way has no copy


async def new_instance(app: Any, topic: str, tag: str) -> tuple[str, str]:
    group = f"gwbenchapppoll{tag}{int(time.time() * 1000) % 10**9}"
    spec = {"topics": [topic], "startPosition": "earliest", "autoCommit": True}
    answer = await call(app, "POST", f"/v1/consumers/{group}", body=json.dumps(spec).encode())
    return group, str(json.loads(answer)["instanceId"])


async def measure(poll: Callable[[], Awaitable[int]], requests: int) -> tuple[float, int, int]:
    """CPU seconds of this process over ``requests`` polls that answered messages; the polls and messages.
    Ten empty answers in a row (20 s) end the bench: the topic ran dry."""
    done = messages = empty = 0
    cpu = time.process_time()
    while done < requests:
        got = await poll()
        if got:
            done += 1
            messages += got
            empty = 0
        else:
            empty += 1
            if empty == 10:
                raise SystemExit("ten polls in a row answered no message: the topic ran dry (or has none)")
    return time.process_time() - cpu, done, messages


async def main_async(args: argparse.Namespace) -> None:
    async with started_app(args) as (app, runtime):
        service = runtime.consumers
        assert service is not None
        query = f"max_messages={args.max}&max_bytes={8 * 2**20}&timeout_ms=2000"
        (app_group, app_id), (svc_group, svc_id) = [await new_instance(app, args.topic, t) for t in "as"]
        path = f"/v1/consumers/{app_group}/instances/{app_id}/messages"

        async def through_app() -> int:
            return (await call(app, "GET", path, query)).count(b'{"token":')

        async def direct() -> int:
            polled = await service.poll(
                svc_group, svc_id, max_messages=args.max, max_bytes=8 * 2**20, timeout=2
            )
            # counted as the app's answer is (the count is the bench's own cost, the same on both ways)
            return b"".join((render_poll(polled, "base64"),)).count(b'{"token":')

        await measure(through_app, 20)  # warm up: joining, routes, metric children, links
        await measure(direct, 20)
        tune_gc()  # as the server does just before serving (gateway/serve.py)
        rows: dict[str, list[tuple[float, float]]] = {"app": [], "service": []}
        for _ in range(args.rounds):
            for name, way in (("app", through_app), ("service", direct)):
                cpu, done, messages = await measure(way, args.requests)
                rows[name].append((cpu / done * 1e6, messages / done))
        medians = {name: sorted(r)[len(r) // 2] for name, r in rows.items()}
        (app_us, per), (svc_us, _) = medians["app"], medians["service"]
        added = app_us - svc_us
        print(
            f"{args.label}long poll max {args.max} ({per:.0f} messages an answer), "
            f"median of {args.rounds} x {args.requests}: app {app_us:.1f} us/request, "
            f"ConsumerService.poll + render_poll {svc_us:.1f}: the app adds {added:.1f} us a request "
            f"({added / per:.3f} us/msg, {added / app_us:.1%} of the request)"
        )
        for group, iid in ((app_group, app_id), (svc_group, svc_id)):
            await call(app, "DELETE", f"/v1/consumers/{group}/instances/{iid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="demo", help="topic to consume (default demo)")
    parser.add_argument("--max", type=int, default=1000, help="max_messages of a poll (default 1000)")
    parser.add_argument("--requests", type=int, default=100, help="polls per round and way (default 100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are printed (default 5)")
    run_app_bench(parser, main_async)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
