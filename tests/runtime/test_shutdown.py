"""Graceful shutdown: the drain sequence on a real uvicorn server, and SIGTERM to a real gateway process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.shutdown import GracefulServer, ShutdownPlan
from gateway.tubemq.net.pool import ConnectionPool
from tests.support.files import ROOT
from tests.support.serving import free_port, server_port, uvicorn_serving
from tests.support.tubemq_readback import read_topic


class Recorder:
    def __init__(self) -> None:
        self.draining = False
        self.log: list[str] = []
        self.exit_codes: list[int] = []
        self.stop_hangs = False
        self.release_hangs = False


def make_app(rec: Recorder) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        rec.log.append("runtime stop")
        if rec.stop_hangs:
            await asyncio.sleep(30)

    app = FastAPI(lifespan=lifespan)

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return JSONResponse({"ready": not rec.draining}, status_code=503 if rec.draining else 200)

    @app.post("/slow")
    async def slow(seconds: float) -> dict[str, str]:
        await asyncio.sleep(seconds)
        rec.log.append("slow answered")
        return {"status": "stored"}

    return app


@asynccontextmanager
async def running(
    rec: Recorder, plan: ShutdownPlan
) -> AsyncIterator[tuple[GracefulServer, asyncio.Task[None], str]]:
    config = uvicorn.Config(
        make_app(rec),
        host="127.0.0.1",
        port=0,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=plan.requests_timeout,
    )

    def drain() -> None:
        rec.draining = True
        rec.log.append("draining")

    class Server(GracefulServer):
        async def release(self) -> None:
            rec.log.append("release")
            if rec.release_hangs:
                await asyncio.sleep(30)

    server = Server(config, on_drain=drain, plan=plan, exit_now=rec.exit_codes.append)
    async with uvicorn_serving(server, force_exit=True) as task:
        yield server, task, f"http://127.0.0.1:{server_port(server)}"


def test_plan_budgets() -> None:
    plan = ShutdownPlan(grace_period=25, drain_delay=5)
    assert plan.stop_reserve == pytest.approx(25 / 3)
    assert plan.requests_timeout == pytest.approx(25 - 5 - 25 / 3)
    long = ShutdownPlan(grace_period=60)
    assert long.stop_reserve == 10 and long.requests_timeout == 50
    with pytest.raises(ValueError, match="grace_period"):
        ShutdownPlan(grace_period=0)
    with pytest.raises(ValueError, match="drain_delay"):
        ShutdownPlan(grace_period=5, drain_delay=5)


async def test_signal_drains_then_finishes_in_flight_then_stops() -> None:
    rec = Recorder()
    plan = ShutdownPlan(grace_period=6.0, drain_delay=0.4)
    async with running(rec, plan) as (server, task, url), httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/readyz")).status_code == 200
        assert "serving" in repr(server)
        in_flight = asyncio.create_task(client.post("/slow", params={"seconds": 0.8}))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        server.handle_exit(signal.SIGTERM, None)
        assert rec.draining and server.draining and "draining" in repr(server)
        # During the drain delay the listener still answers, but readiness is already false.
        async with httpx.AsyncClient(base_url=url) as fresh:
            assert (await fresh.get("/readyz")).status_code == 503
        answer = await in_flight
        assert answer.status_code == 200 and answer.json() == {"status": "stored"}
        await asyncio.wait_for(task, plan.grace_period)
        assert time.monotonic() - started < plan.grace_period
        # The listener is closed: a new connection is refused.
        async with httpx.AsyncClient(base_url=url) as late:
            with pytest.raises(httpx.ConnectError):
                await late.get("/readyz")
    assert rec.log == ["draining", "slow answered", "runtime stop", "release"]
    assert rec.exit_codes == [] and server._captured_signals == [], "a clean drain exits 0, no re-raise"


async def test_second_signal_skips_the_waits() -> None:
    rec = Recorder()
    plan = ShutdownPlan(grace_period=10.0)
    async with running(rec, plan) as (server, task, url), httpx.AsyncClient(base_url=url) as client:
        in_flight = asyncio.create_task(client.post("/slow", params={"seconds": 5}))
        await asyncio.sleep(0.1)
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.sleep(0.3)
        server.handle_exit(signal.SIGINT, None)
        started = time.monotonic()
        await asyncio.wait_for(task, 3)
        assert time.monotonic() - started < 3, "serve() returned without waiting for the 5 s request"
        assert not in_flight.done()
        for leftover in (*server.server_state.tasks, in_flight):  # the process would exit here
            leftover.cancel()
        await asyncio.gather(in_flight, *server.server_state.tasks, return_exceptions=True)
    assert "slow answered" not in rec.log and "runtime stop" not in rec.log


@pytest.mark.parametrize("where", ["lifespan", "release"])
async def test_overrun_of_the_grace_period_exits_nonzero(where: str) -> None:
    rec = Recorder()
    rec.stop_hangs = where == "lifespan"
    rec.release_hangs = where == "release"
    plan = ShutdownPlan(grace_period=0.6)
    async with running(rec, plan) as (server, task, _url):
        server.begin_drain("test")
        started = time.monotonic()
        while not rec.exit_codes:
            assert time.monotonic() - started < 3, "the watchdog did not fire"
            await asyncio.sleep(0.02)
        assert rec.exit_codes == [1] and time.monotonic() - started >= plan.grace_period - 0.05
        assert rec.log[-1] == ("runtime stop" if where == "lifespan" else "release")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# --- a real gateway process on the embedded cluster ------------------------------------------------------

GRACE = 10.0
DRAIN_DELAY = 2.0  # room for a loaded CI machine to deliver the signal and answer a probe


@dataclass
class Load:
    """Publish load: every value answered 200, and when the answers came."""

    stored: dict[str, float] = field(default_factory=dict)
    failed: int = 0
    stop: bool = False


async def _publisher(base: str, worker: int, load: Load) -> None:
    seq = 0
    async with httpx.AsyncClient(base_url=base, timeout=GRACE) as client:
        while not load.stop:
            values = [f"w{worker}-{seq}-{i}" for i in range(4)]
            seq += 1
            try:
                body = {"messages": [{"value": v} for v in values]}
                answer = await client.post("/v1/topics/orders/messages", json=body)
            except httpx.HTTPError:
                return  # the listener closed: the drain has begun
            now = time.monotonic()
            if answer.status_code in (200, 207):
                for value, result in zip(values, answer.json()["results"], strict=True):
                    if result["status"] == 200:
                        load.stored[value] = now
                    else:
                        load.failed += 1
            else:
                load.failed += len(values)


GROUP = "shutdown_readers"
NEW_INSTANCE = {"topics": ["orders"], "startPosition": "earliest"}


async def _consume_some(client: httpx.AsyncClient) -> set[str]:
    """Create a consumer instance, poll and commit a batch; returns the partitions it holds."""
    created = await client.post(f"/v1/consumers/{GROUP}", json=NEW_INSTANCE)
    assert created.status_code == 201, created.text
    instance = created.json()["baseUrl"]
    polled = await client.get(f"{instance}/messages", params={"timeout_ms": 5000, "max_messages": 50})
    assert polled.status_code == 200 and polled.json()["messages"], polled.text
    tokens = [m["token"] for m in polled.json()["messages"]]
    committed = await client.post(f"{instance}/commits", json={"tokens": tokens})
    assert committed.status_code == 200, committed.text
    described = await client.get(instance)
    assert described.status_code == 200, described.text
    held = {p["partitionKey"] for p in described.json()["partitions"]}
    assert held
    return held


async def _first_unready(base: str, since: float) -> float | None:
    """Seconds after ``since`` at which a fresh connection saw /readyz answer 503 (None: never)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=2, limits=limits) as client:
        while time.monotonic() - since < GRACE:
            try:
                if (await client.get("/readyz")).status_code == 503:
                    return time.monotonic() - since
            except httpx.TimeoutException:
                continue  # a slow answer says nothing about readiness: ask again
            except httpx.HTTPError:
                return None
            await asyncio.sleep(0.02)
    return None


async def test_sigterm_under_publish_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "data"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUBEMQ_GATEWAY_MASTERS": "",
        "TUBEMQ_GATEWAY_SHUTDOWN__GRACE_PERIOD": str(GRACE),
        "TUBEMQ_GATEWAY_SHUTDOWN__DRAIN_DELAY": str(DRAIN_DELAY),
        "TUBEMQ_GATEWAY_LOG_FORMAT": "json",
        # The master hands out partitions in heartbeat answers: a short interval assigns them quickly.
        "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "0.2",
    }
    # gRPC on an ephemeral port: the default 9090 is shared by every gateway started on this machine.
    command = [sys.executable, "-m", "gateway", "serve", "--http-host", "127.0.0.1", "--http-port", str(port),
               "--grpc-port", "0", "--embedded-topics", "orders:3",
               "--embedded-data-dir", str(data)]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT
        )
        try:
            async with httpx.AsyncClient(base_url=base, timeout=1) as probe:
                deadline = time.monotonic() + 30
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get("/readyz")).status_code == 200:
                            break
                    assert proc.returncode is None, log_path.read_text()
                    assert time.monotonic() < deadline, "the gateway did not become ready"
                    await asyncio.sleep(0.1)
            load = Load()
            workers = [asyncio.create_task(_publisher(base, w, load)) for w in range(6)]
            while len(load.stored) < 200:
                assert not any(w.done() for w in workers), log_path.read_text()
                await asyncio.sleep(0.02)
            async with httpx.AsyncClient(base_url=base, timeout=GRACE) as client:
                held = await _consume_some(client)
                sigterm_at = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                unready_after, refused = await asyncio.gather(
                    _first_unready(base, sigterm_at), client.post(f"/v1/consumers/{GROUP}", json=NEW_INSTANCE)
                )
            await asyncio.wait_for(asyncio.gather(*workers), GRACE)
            code = await asyncio.wait_for(proc.wait(), GRACE + 5)
            exited_after = time.monotonic() - sigterm_at
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    output = log_path.read_text(encoding="utf-8")
    assert code == 0, output
    assert exited_after < GRACE, "exits within the grace period"
    assert unready_after is not None and unready_after < DRAIN_DELAY, "readiness turns false at once"
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable", refused.text
    acknowledged_late = [v for v, at in load.stored.items() if at > sigterm_at]
    assert acknowledged_late, "publishes in flight (or within the drain delay) still get their 200"
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert len(lines) == len(output.splitlines()), "every log line is one JSON object"
    messages = [line["msg"] for line in lines]
    assert any(m.startswith("draining") for m in messages) and "graceful shutdown complete" in messages
    # The consumer instance left its group: its partitions were unregistered at the broker, then it closed.
    released = [line for line in lines if line["msg"] == "PartitionReleased" and line["group"] == GROUP]
    assert {line["partition_key"] for line in released} >= held
    assert all(line["reason"] == "close" for line in released)
    closed = [i for i, line in enumerate(lines) if line["msg"] == "ConsumerClosed" and line["group"] == GROUP]
    assert closed and closed[-1] < messages.index("graceful shutdown complete")

    # The process is gone; bring the brokers back on its data directory and read every stored message.
    async with EmbeddedCluster([TopicSpec("orders", 3)], data_dir=data) as cluster, ConnectionPool() as pool:
        brokers = {b.broker_id: b.address for b in cluster.brokers}
        rows = await read_topic(pool, brokers, "orders", TopicSpec("orders", 3).partition_ids(), "verify")
    stored = {row.body.decode() for row in rows}
    missing = set(load.stored) - stored
    assert not missing, f"{len(missing)} messages answered 200 are not stored, e.g. {sorted(missing)[:5]}"
