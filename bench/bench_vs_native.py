"""The gateway next to the native TubeMQ Java client on one real cluster: each path's rate, its ratio to
the native client, and the gateway's CPU per message.

Run from the repository root against a running TubeMQ master (for example the loopback harness of
``../shared/tubemq-real``)::

    python bench/bench_vs_native.py --master 127.0.0.1:8715 --tubebench /tmp/tubemq-real/tubebench.sh

It starts one gateway (``tubemq-gateway serve --masters MASTER``, HTTP and gRPC) and runs, for ``--size``-byte
values on ``--topic``:

* native (only with ``--tubebench``): the Java client's ``bench-async``, ``bench-sync`` and ``bench-consume``;
* REST publish of 100-message JSON batches (wrk, or hey; ``--batch-connections``);
* REST publish of one message per request at peak (``--single-connections``), then at half that rate with hey
  for the p99 latency;
* gRPC ``Publish`` (100-message batches and one message per call) and ``PublishStream`` (streams of 10
  100-message requests), from h2load on as many connections as the REST row when it is installed (Debian
  ``nghttp2-client``; ``bench/grpc_load.py`` says why and how its calls are checked), else from this process
  with grpc.aio on one channel (``--grpc-driver``);
* consume, each case in a fresh consumer group from the earliest offset, ``--consume-messages`` messages timed
  from the first one: REST long poll, REST SSE and gRPC ``Subscribe``;
* workers: REST publish (one message per request at peak, and 100-message batches) on a gateway started with
  ``--workers 1`` and then on one with ``--workers 2``, on the same machine in the same run (the ratio column
  of the ``--workers 2`` rows compares them with the ``--workers 1`` rows).

The gateway runs as ``serve`` runs by default (one worker process per CPU) unless ``--gateway-arg`` says
otherwise; ``--gateway-env KEY=VALUE`` sets an environment variable for every gateway the bench starts
(e.g. ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` for the pure-Python path). With ``--gateway-root`` the gateway of
another source tree runs (an export of an older commit, for a before/after table on one machine): the bench
passes it only what ``serve`` has long taken (``--masters``, the listen addresses, ``--workers`` in the
workers cases) and the environment variables asked for, and puts that tree first on ``PYTHONPATH``: the
worker processes of ``serve`` import the installed package otherwise, whatever the working directory.

Every case runs ``--repeat`` times; the report shows the median (and the spread). CPU per message is the
gateway process's own CPU time (user + system, from ``/proc/<pid>/stat``, its child processes included)
over the case, divided by the messages of the case (for one-message requests and calls: per request); the
native rows have none (the Java client's CPU includes its JVM's start). The machine's load average is
printed before and after: on a shared machine, compare runs made under a similar load. With ``--pin`` the
gateway runs on the last CPU and every load driver on the others. Benchmarks print numbers; nothing here
asserts a timing.

Only 127.0.0.1 is ever contacted; ``--master`` must be a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import grpc
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_grpc import Stub, grpc_publish, grpc_stream, pb  # noqa: E402
from bench_publish import free_port, parse_load  # noqa: E402
from grpc_load import frame, h2load_calls, h2load_installed, spread  # noqa: E402
from proc_cpu import cpu_seconds, process_tree  # noqa: E402

BATCH = 100
#: the requests of one PublishStream stream h2load sends (each of BATCH messages)
STREAM_REQUESTS = 10
LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


# --- measuring ------------------------------------------------------------------------------------------


@dataclass
class Sample:
    rate: float  # messages per second
    cpu_us: float | None = None  # gateway CPU microseconds per message
    p99_ms: float | None = None
    note: str = ""


@dataclass
class Case:
    name: str
    native: str | None = None  # the native case this one is compared with
    samples: list[Sample] = field(default_factory=list)

    def median(self, attr: str) -> float | None:
        values = [v for s in self.samples if (v := getattr(s, attr)) is not None and v == v]  # not NaN
        return statistics.median(values) if values else None

    def spread(self) -> str:
        rates = [s.rate for s in self.samples if s.rate == s.rate]
        return f"{min(rates):,.0f}-{max(rates):,.0f}" if len(rates) > 1 else ""


class Gateway:
    """The gateway process under test."""

    def __init__(
        self, master: str, args: argparse.Namespace, cpus: set[int] | None, workers: int | None = None
    ) -> None:
        self.http_port, self.grpc_port = free_port(), free_port()
        env = {
            **os.environ,
            "TUBEMQ_GATEWAY_LOG_LEVEL": args.log_level,
            # A short heartbeat: a new consumer instance learns its partitions sooner.
            "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "1",
            **args.gateway_env,
        }
        if args.gateway_root:
            # serve's worker processes start without the working directory on their import path
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (args.gateway_root, env.get("PYTHONPATH"))))
        cmd = [sys.executable, "-m", "gateway", "serve", "--masters", master]
        cmd += ["--http-host", "127.0.0.1", "--http-port", str(self.http_port)]
        cmd += ["--grpc-port", str(self.grpc_port)]
        if workers is not None:
            cmd += ["--workers", str(workers)]
        cmd += args.gateway_arg
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the gateway's stderr, read on failure
        self.proc = subprocess.Popen(
            cmd,
            cwd=args.gateway_root or ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            preexec_fn=_pinner(cpus),
        )
        self.url = f"http://127.0.0.1:{self.http_port}"
        # the workers' "gRPC server listening" lines are info
        self._wait_workers = args.log_level.lower() in ("debug", "info")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    self._wait_listening(time.monotonic() + 15)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        self.log.seek(0)
        raise SystemExit(
            f"the gateway did not become ready:\n{self.log.read()[-3000:].decode(errors='replace')}"
        )

    def _wait_listening(self, deadline: float) -> None:
        """Wait (until ``deadline`` at most: a tree that does not log it is measured anyway) until every
        worker serves gRPC."""
        while not self._all_listening() and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.1)

    def _all_listening(self) -> bool:
        """Every worker process serves gRPC (its log says so): /readyz is one worker's answer, and h2load
        connections made while a sibling still starts all reach the first, which then does the replica's
        work alone (the first case of a run measured one worker now and then)."""
        if not self._wait_workers:
            return True
        workers, listening = 1, set()
        for line in self.log_lines():
            if b"starting worker processes" in line or b"gRPC server listening" in line:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("msg") == "starting worker processes":
                        workers = int(entry.get("workers", 1))
                    elif entry.get("msg") == "gRPC server listening":
                        listening.add(entry.get("worker"))
        return len(listening) >= workers

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def log_lines(self) -> list[bytes]:
        """The gateway's log so far (its stderr, every worker's lines), read without moving the offset the
        gateway writes at (the file is shared with it)."""
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).splitlines()

    def processes(self) -> int:
        """The gateway's processes (the supervisor and its workers, or the one process)."""
        return len(process_tree(self.proc.pid))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _pinner(cpus: set[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def run(cmd: Sequence[str], cpus: set[int] | None, timeout: float) -> str:
    done = subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=timeout, preexec_fn=_pinner(cpus), check=False
    )
    if done.returncode != 0:
        raise SystemExit(
            f"{cmd[0]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done.stdout


# --- native baseline --------------------------------------------------------------------------------------


def native(args: argparse.Namespace, mode: str, cpus: set[int] | None) -> Sample:
    master, topic, secs = args.master, args.topic, str(round(args.seconds))
    if mode == "bench-async":
        cmd = [args.tubebench, mode, master, topic, secs, str(args.size), "1000"]
    elif mode == "bench-sync":
        cmd = [args.tubebench, mode, master, topic, secs, str(args.size)]
    else:
        group = f"gwbench{int(time.time() * 1000) % 10**9}"
        cmd = [args.tubebench, mode, master, topic, group, "120", "2"]
    try:
        out = run(cmd, cpus, timeout=args.seconds + 180)
    except subprocess.TimeoutExpired:  # the shared cluster was restarted under it, or stalled
        return Sample(float("nan"), note=f"tubebench {mode} timed out")
    line = next((x for x in out.splitlines() if x.startswith(mode.split("-")[0] + "-") and "msg/s" in x), "")
    rate = re.search(r"-> (\d+) msg/s", line)
    if rate is None:
        raise SystemExit(f"cannot read the rate from tubebench {mode}:\n{out[-2000:]}")
    p99 = re.search(r"p99=([\d.]+) ms", line)
    fail = re.search(r"fail=(\d+)", line)
    return Sample(
        float(rate.group(1)),
        p99_ms=float(p99.group(1)) if p99 else None,
        note=f"fail={fail.group(1)}" if fail and fail.group(1) != "0" else "",
    )


# --- REST publish -------------------------------------------------------------------------------------------


def publish_body(batch: int, size: int) -> bytes:
    messages = [{"value": "x" * size, "attributes": {"bench": "1"}} for _ in range(batch)]
    return json.dumps({"messages": messages}).encode()


def rest_publish(
    gw: Gateway, args: argparse.Namespace, batch: int, connections: int, cpus: set[int] | None
) -> Sample:
    """Peak msg/s of ``connections`` connections posting ``batch``-message bodies as fast as answered."""
    url = f"{gw.url}/v1/topics/{args.topic}/messages"
    body = publish_body(batch, args.size)
    httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30).raise_for_status()
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body.json"
        body_file.write_bytes(body)
        secs = max(1, round(args.seconds))
        if args.driver == "wrk":
            script = Path(tmp) / "post.lua"
            script.write_text(
                'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f'local f = io.open({json.dumps(str(body_file))})\nwrk.body = f:read("*a")\nf:close()\n'
            )
            cmd = ["wrk", "-t1", f"-c{connections}", f"-d{secs}s", "--latency", "-s", str(script), url]
        else:
            cmd = ["hey", "-z", f"{secs}s", "-c", str(connections), "-m", "POST", "-T", "application/json"]
            cmd += ["-D", str(body_file), url]
        cpu0 = gw.cpu()
        out = run(cmd, cpus, timeout=secs + 120)
        cpu = gw.cpu() - cpu0
    rate, p99 = parse_load(args.driver, out)
    msgs = rate * secs * batch
    return Sample(rate * batch, cpu_us=cpu / msgs * 1e6 if msgs else None, p99_ms=p99)


def rest_latency(gw: Gateway, args: argparse.Namespace, rate: float, cpus: set[int] | None) -> Sample:
    """hey at ``rate`` requests/s of one message each, spread over ``--half-connections``: p99.

    hey paces each connection with its own ticker, and all of them start together, so the connections send
    in bursts of that many requests at once; one gateway process serves a burst one request after another,
    and the last answer of a burst waits for all the others (the p99). With 1 connection the requests come
    one at a time, as the Java sync producer's loop sends them."""
    if shutil.which("hey") is None:
        return Sample(0.0, note="hey not installed")
    url = f"{gw.url}/v1/topics/{args.topic}/messages"
    connections = args.half_connections or args.single_connections
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body.json"
        body_file.write_bytes(publish_body(1, args.size))
        secs = max(1, round(args.seconds))
        per_worker = max(rate / connections, 1.0)
        cmd = ["hey", "-z", f"{secs}s", "-c", str(connections), "-q", f"{per_worker:.2f}", "-m", "POST"]
        cmd += ["-T", "application/json", "-D", str(body_file), url]
        cpu0 = gw.cpu()
        out = run(cmd, cpus, timeout=secs + 120)
        cpu = gw.cpu() - cpu0
    achieved, p99 = parse_load("hey", out)
    msgs = achieved * secs
    return Sample(achieved, cpu_us=cpu / msgs * 1e6 if msgs else None, p99_ms=p99)


# --- gRPC (the calls of bench_grpc.py) ----------------------------------------------------------------------


async def grpc_case(gw: Gateway, work: Callable[[Stub], Awaitable[float]]) -> Sample:
    """Run ``work`` (returning messages per second) on a fresh channel; the gateway's CPU over it."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}") as channel:
        stub = Stub(channel)
        cpu0, start = gw.cpu(), time.perf_counter()
        rate = await work(stub)
        cpu, elapsed = gw.cpu() - cpu0, time.perf_counter() - start
    msgs = rate * elapsed
    return Sample(rate, cpu_us=cpu / msgs * 1e6 if msgs else None)


def grpc_h2load(
    gw: Gateway, args: argparse.Namespace, method: str, batch: int, connections: int, cpus: set[int] | None
) -> Sample:
    """Peak msg/s of ``method`` calls from h2load (bench/grpc_load.py) on ``connections`` connections:
    Publish with ``batch`` messages per call, PublishStream with STREAM_REQUESTS requests of ``batch``
    messages per stream."""
    message = pb.Message(value=b"x" * args.size, attributes={"bench": "1"})
    if method == "Publish":
        body, per_call = (
            frame(pb.PublishRequest(topic=args.topic, messages=[message] * batch).SerializeToString()),
            batch,
        )
    else:
        one = frame(pb.PublishStreamRequest(topic=args.topic, messages=[message] * batch).SerializeToString())
        body, per_call = one * STREAM_REQUESTS, batch * STREAM_REQUESTS
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = gw.cpu()
        calls = h2load_calls(
            gw.grpc_port,
            gw.url,
            method,
            body,
            connections,
            args.seconds,
            lambda cmd: run(cmd, cpus, timeout=args.seconds + 120),
            str(Path(tmp) / "body.bin"),
            log=gw.log_lines,
        )
        cpu = gw.cpu() - cpu0
    msgs = calls.rate * per_call * max(1, round(args.seconds))
    shown = (f"h2load, {connections} connections", spread(calls.by_worker), calls.note())
    note = ", ".join(filter(None, shown))
    return Sample(calls.rate * per_call, cpu_us=cpu / msgs * 1e6 if msgs else None, note=note)


# --- consume ------------------------------------------------------------------------------------------------


async def consume(gw: Gateway, count: int, fetch: Callable[[], Awaitable[int]], join_wait: float) -> Sample:
    """Messages per second from the first message (joining the group is not timed) to ``count``."""
    deadline = time.monotonic() + join_wait
    first = await fetch()
    while not first:
        if time.monotonic() > deadline:
            raise SystemExit("no message arrived: the consumer got no partitions (or the topic is empty)")
        first = await fetch()
    cpu0, start, own0 = gw.cpu(), time.perf_counter(), time.process_time()
    received = 0
    while received < count:
        got = await fetch()
        if not got:
            break  # the topic has no more
        received += got
    elapsed, cpu, own = time.perf_counter() - start, gw.cpu() - cpu0, time.process_time() - own0
    return _consumed(received, count, elapsed, cpu, own)


def _consumed(received: int, count: int, elapsed: float, cpu: float, own: float) -> Sample:
    """A consume case's sample; its note gives the client's own CPU per message (this process: it shares
    the machine's cores with the gateway and the broker, so a costly client slows every row it drives)."""
    note = f"client {own / received * 1e6:.1f} us/msg" if received else ""
    if received < count:
        note += f", topic ran dry at {received:,}"
    return Sample(received / elapsed, cpu_us=cpu / received * 1e6 if received else None, note=note)


def _group(kind: str) -> str:
    return f"gwbench{kind}{int(time.time() * 1000) % 10**9}"


async def _rest_instance(http: httpx.AsyncClient, group: str, topic: str) -> str:
    created = await http.post(
        f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "earliest", "autoCommit": True}
    )
    created.raise_for_status()
    return str(created.json()["instanceId"])


async def rest_poll(gw: Gateway, args: argparse.Namespace) -> Sample:
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        group = _group("poll")
        instance = await _rest_instance(http, group, args.topic)
        path = f"/v1/consumers/{group}/instances/{instance}/messages"
        params = {"max_messages": 1000, "max_bytes": 8 * 2**20, "timeout_ms": 2000}

        async def fetch() -> int:
            r = await http.get(path, params=params)
            r.raise_for_status()
            return r.content.count(b'{"token":')  # counted, not parsed: the client's cost stays small

        try:
            return await consume(gw, args.consume_messages, fetch, args.join_wait)
        finally:
            await http.delete(f"/v1/consumers/{group}/instances/{instance}")


async def stream_consume(
    gw: Gateway, count: int, pieces: AsyncIterator[int], join_wait: float, stall: float = 5.0
) -> Sample:
    """Like :func:`consume` for a stream: ``pieces`` yields message counts as they arrive. Reading runs in
    a task of its own (cancelling a read would end a gRPC call); no progress for ``stall`` s ends it."""
    received = 0
    start: float | None = None
    cpu0 = own0 = 0.0

    async def read() -> None:
        nonlocal received, start, cpu0, own0
        async for n in pieces:
            if n and start is None:  # the first piece is not timed: it includes joining the group
                cpu0, start, own0 = gw.cpu(), time.perf_counter(), time.process_time()
            elif n:
                received += n
                if received >= count:
                    return

    task = asyncio.create_task(read())
    seen = -1
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=join_wait if start is None else stall)
            if task.done():
                break
            if start is None:
                raise SystemExit("no message arrived: the consumer got no partitions (or the topic is empty)")
            if received == seen:
                break  # ran dry
            seen = received
        end, cpu, own = time.perf_counter(), gw.cpu(), time.process_time()
    finally:
        task.cancel()
        (outcome,) = await asyncio.gather(task, return_exceptions=True)
    if isinstance(outcome, Exception):
        raise outcome
    assert start is not None
    return _consumed(received, count, end - start, cpu - cpu0, own - own0)


async def rest_sse(gw: Gateway, args: argparse.Namespace) -> Sample:
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        group = _group("sse")
        instance = await _rest_instance(http, group, args.topic)
        path = f"/v1/consumers/{group}/instances/{instance}/stream"

        async def pieces() -> AsyncIterator[int]:
            async with http.stream("GET", path, params={"max_messages": 1000}) as response:
                response.raise_for_status()
                tail = b""
                async for chunk in response.aiter_raw():
                    # events start "id: " at a line start; the kept tail catches one split across chunks
                    data = tail + chunk
                    yield data.count(b"\nid: ") - tail.count(b"\nid: ")
                    tail = data[-5:]

        try:
            return await stream_consume(gw, args.consume_messages, pieces(), args.join_wait)
        finally:
            await http.delete(f"/v1/consumers/{group}/instances/{instance}")


async def grpc_subscribe(gw: Gateway, args: argparse.Namespace) -> Sample:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}") as channel:
        stub = Stub(channel)
        group = _group("sub")
        created = await stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group=group, topics=[args.topic], start_position=pb.START_POSITION_EARLIEST, auto_commit=True
            )
        )
        call = stub.Subscribe(
            pb.SubscribeRequest(group=group, instance_id=created.instance_id, max_messages=1000)
        )

        async def pieces() -> AsyncIterator[int]:
            async for response in call:
                yield len(response.messages)

        try:
            return await stream_consume(gw, args.consume_messages, pieces(), args.join_wait)
        finally:
            call.cancel()
            await stub.DeleteConsumer(pb.DeleteConsumerRequest(group=group, instance_id=created.instance_id))


# --- the run ------------------------------------------------------------------------------------------------


CASES = (
    "native-async",
    "rest-batch",
    "grpc-batch",
    "grpc-stream",
    "native-sync",
    "rest-single",
    "grpc-single",
    "native-consume",
    "rest-poll",
    "rest-sse",
    "grpc-subscribe",
    "workers",
)
#: the gateways of the workers case: --workers 1, then --workers 2
WORKERS = (1, 2)
#: the cases driven by wrk or hey (REST publish), and by h2load when it drives the gRPC publish rows
REST_LOAD_CASES = frozenset({"rest-batch", "rest-single", "workers"})
GRPC_LOAD_CASES = frozenset({"grpc-batch", "grpc-single", "grpc-stream"})


def run_all(
    args: argparse.Namespace,
    gw: Gateway,
    drivers: set[int] | None,
    start: Callable[[int], Gateway],
) -> dict[str, Case]:
    """Every case of ``args.cases`` on ``gw``, the workers case on gateways ``start(workers)`` starts."""
    half_c = args.half_connections or args.single_connections
    cases = {
        "native-async": Case("native async producer (Java)"),
        "rest-batch": Case(f"REST publish, {BATCH}-msg JSON batches", "native-async"),
        "grpc-batch": Case(f"gRPC Publish, {BATCH}-msg batches", "native-async"),
        "grpc-stream": Case(f"gRPC PublishStream, {BATCH}-msg requests", "native-async"),
        "native-sync": Case("native sync producer (Java)"),
        "rest-single": Case("REST publish, 1 msg/request (peak)", "native-sync"),
        "rest-half": Case(f"REST publish, 1 msg/req, half peak, {half_c} conn", "native-sync"),
        "grpc-single": Case("gRPC Publish, 1 msg/call", "native-sync"),
        "native-consume": Case("native pull consumer (Java)"),
        "rest-poll": Case("REST long poll (max 1000)", "native-consume"),
        "rest-sse": Case("REST SSE", "native-consume"),
        "grpc-subscribe": Case("gRPC Subscribe", "native-consume"),
    }
    for n in WORKERS:  # compared with the --workers 1 rows
        cases[f"rest-single-w{n}"] = Case(f"REST 1 msg/request (peak), --workers {n}", "rest-single-w1")
        cases[f"rest-batch-w{n}"] = Case(f"REST {BATCH}-msg batches, --workers {n}", "rest-batch-w1")
    cases["rest-single-w1"].native = cases["rest-batch-w1"].native = None
    wanted = [c for c in CASES if c in args.cases]
    size, secs, topic, c1 = args.size, args.seconds, args.topic, args.single_connections
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        for round_ in range(args.repeat):
            for key in wanted:
                if key.startswith("native") and not args.tubebench:
                    continue
                if key == "native-async":
                    sample = native(args, "bench-async", drivers)
                elif key == "native-sync":
                    sample = native(args, "bench-sync", drivers)
                elif key == "native-consume":
                    sample = native(args, "bench-consume", drivers)
                elif key == "rest-batch":
                    sample = rest_publish(gw, args, BATCH, args.batch_connections, drivers)
                elif key == "rest-single":
                    sample = rest_publish(gw, args, 1, args.single_connections, drivers)
                    half = rest_latency(gw, args, sample.rate / 2, drivers)
                    cases["rest-half"].samples.append(half)
                    _progress(round_, cases["rest-half"].name, half)
                elif key in ("grpc-batch", "grpc-single") and args.grpc_driver == "h2load":
                    batch, calls = (BATCH, args.batch_connections) if key == "grpc-batch" else (1, c1)
                    sample = grpc_h2load(gw, args, "Publish", batch, calls, drivers)
                elif key == "grpc-stream" and args.grpc_driver == "h2load":
                    sample = grpc_h2load(gw, args, "PublishStream", BATCH, args.batch_connections, drivers)
                elif key in ("grpc-batch", "grpc-single"):
                    batch, calls = (BATCH, args.batch_connections) if key == "grpc-batch" else (1, c1)
                    publish = partial(grpc_publish, batch=batch, size=size, c=calls, s=secs, topic=topic)
                    sample = runner.run(grpc_case(gw, publish))
                elif key == "grpc-stream":
                    stream = partial(grpc_stream, size=size, streams=args.streams, seconds=secs, topic=topic)
                    sample = runner.run(grpc_case(gw, stream))
                elif key == "rest-poll":
                    sample = runner.run(rest_poll(gw, args))
                elif key == "rest-sse":
                    sample = runner.run(rest_sse(gw, args))
                elif key == "grpc-subscribe":
                    sample = runner.run(grpc_subscribe(gw, args))
                else:
                    workers_case(args, start, drivers, cases, round_)
                    continue
                cases[key].samples.append(sample)
                _progress(round_, cases[key].name, sample)
    return cases


def workers_case(
    args: argparse.Namespace,
    start: Callable[[int], Gateway],
    drivers: set[int] | None,
    cases: dict[str, Case],
    round_: int,
) -> None:
    """REST publish peaks, one message per request and 100-message batches, on a gateway of each of
    :data:`WORKERS` worker processes, one gateway after the other."""
    for n in WORKERS:
        gw = start(n)
        try:
            for key, batch, connections in (
                (f"rest-single-w{n}", 1, args.single_connections),
                (f"rest-batch-w{n}", BATCH, args.batch_connections),
            ):
                sample = rest_publish(gw, args, batch, connections, drivers)
                sample.note = f"{gw.processes()} processes"
                cases[key].samples.append(sample)
                _progress(round_, cases[key].name, sample)
        finally:
            gw.stop()


def _progress(round_: int, name: str, s: Sample) -> None:
    extra = f", {s.cpu_us:.1f} us/msg" if s.cpu_us is not None else ""
    extra += f", p99 {s.p99_ms:.2f} ms" if s.p99_ms is not None else ""
    extra += f" ({s.note})" if s.note else ""
    print(f"  [{round_ + 1}] {name}: {s.rate:,.0f} msg/s{extra}", file=sys.stderr, flush=True)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def report(cases: dict[str, Case], args: argparse.Namespace, load: tuple[str, str], gateway: str) -> None:
    print(
        f"value size {args.size} B, topic {args.topic}, {args.seconds:g} s per publish case, "
        f"{args.consume_messages:,} messages per consume case, median of {args.repeat}, "
        f"REST load from {args.driver or 'none'}{', pinned' if args.pin else ''}"
    )
    print(f"load average (1/5/15 min) before: {load[0]}; after: {load[1]}")
    print(
        f"gateway: {gateway}; ratio: to the native client's row (the --workers rows: to --workers 1); "
        "CPU us/msg: the gateway's CPU per message (per request or call for one message each)"
    )
    header = f"{'path':<42}{'msg/s':>10}{'range':>17}{'ratio':>10}{'CPU us/msg':>11}{'p99 ms':>8}"
    print(header)
    print("-" * len(header))
    for case in cases.values():
        if not case.samples:
            continue
        rate = case.median("rate")
        if rate is None:
            print(f"{case.name:<42}{'n/a':>10}  " + "; ".join(s.note for s in case.samples))
            continue
        base = cases[case.native].median("rate") if case.native else None
        ratio = f"{rate / base:.2f}" if base else ""
        cpu = case.median("cpu_us")
        p99 = case.median("p99_ms")
        notes = "; ".join(sorted({s.note for s in case.samples if s.note}))
        print(
            f"{case.name:<42}{rate:>10,.0f}{case.spread():>17}{ratio:>10}"
            f"{'' if cpu is None else f'{cpu:.1f}':>11}{'' if p99 is None else f'{p99:.2f}':>8}"
            + (f"  {notes}" if notes else "")
        )


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="TubeMQ master host:port (loopback only)")
    parser.add_argument("--tubebench", help="the native baseline's tubebench.sh (Java client); none: skipped")
    parser.add_argument("--topic", default="demo", help="topic to publish to and consume (default demo)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per publish case (default 10)")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every case; medians (default 1)")
    parser.add_argument("--batch-connections", type=int, default=8, help="batched publish (default 8)")
    parser.add_argument("--single-connections", type=int, default=32, help="one-message publish (default 32)")
    parser.add_argument(
        "--half-connections",
        type=int,
        default=0,
        help="connections of the half-peak latency case (default: --single-connections; hey sends in bursts "
        "of this many, 1 paces requests one at a time like the Java sync producer)",
    )
    parser.add_argument("--streams", type=int, default=4, help="PublishStream streams (default 4)")
    parser.add_argument(
        "--consume-messages", type=int, default=200_000, help="messages per consume case (default 200000)"
    )
    parser.add_argument("--join-wait", type=float, default=60.0, help="seconds to wait for partitions")
    parser.add_argument("--driver", choices=("auto", "wrk", "hey"), default="auto", help="REST load driver")
    parser.add_argument(
        "--grpc-driver",
        choices=("auto", "h2load", "python"),
        default="auto",
        help="gRPC publish load: h2load (nghttp2-client) on as many connections as the REST row, or grpc.aio "
        "from this process on one channel (auto: h2load when installed)",
    )
    parser.add_argument("--log-level", default="info", help="the gateway's log level (default info)")
    parser.add_argument(
        "--pin", action="store_true", help="gateway on the last CPU, load drivers on the rest"
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}"
    )
    parser.add_argument(
        "--gateway-root",
        help="run the gateway of this source tree (e.g. an export of an older commit, for an A/B on the same "
        "machine state; REST and native cases only when its gRPC API differs)",
    )
    parser.add_argument(
        "--gateway-arg", action="append", default=[], help="extra argument for `tubemq-gateway serve`"
    )
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for every gateway started (repeatable), "
        "e.g. TUBEMQ_GATEWAY_NO_EXTENSIONS=1",
    )
    args = parser.parse_args()
    env: dict[str, str] = {}
    for item in args.gateway_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--gateway-env takes KEY=VALUE, got {item!r}")
        env[key] = value
    args.gateway_env = env
    args.cases = set(args.cases.split(","))
    unknown = args.cases - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.master.rsplit(":", 1)[0] not in LOOPBACK:
        parser.error("--master must be a loopback address (127.0.0.1 or [::1])")
    # each load tool is a need of the cases it drives only (consume cases need none)
    if args.grpc_driver == "auto":
        args.grpc_driver = "h2load" if h2load_installed() else "python"
    elif args.grpc_driver == "h2load" and args.cases & GRPC_LOAD_CASES and not h2load_installed():
        parser.error("install h2load (Debian package nghttp2-client)")
    if args.driver == "auto":
        args.driver = next((d for d in ("wrk", "hey") if shutil.which(d)), "")
    if args.cases & REST_LOAD_CASES and (not args.driver or not shutil.which(args.driver)):
        parser.error(
            f"the cases {', '.join(sorted(args.cases & REST_LOAD_CASES))} need wrk or hey (Debian packages "
            "of those names; --driver picks one)"
        )
    gw_cpus = drivers = None
    if args.pin:
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            parser.error("--pin needs at least 2 CPUs")
        gw_cpus, drivers = {allowed[-1]}, set(allowed[:-1])
    before = _loadavg()
    gw = Gateway(args.master, args, gw_cpus)
    shape = f"{gw.processes()} processes"
    if args.gateway_env:
        shape += ", with " + " ".join(f"{k}={v}" for k, v in args.gateway_env.items())
    if args.gateway_root:
        shape += f", from {args.gateway_root}"
    try:
        if drivers is not None:
            os.sched_setaffinity(0, drivers)  # this process drives the gRPC and consume cases
        cases = run_all(args, gw, drivers, partial(Gateway, args.master, args, gw_cpus))
    finally:
        gw.stop()
    report(cases, args, (before, _loadavg()), shape)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
