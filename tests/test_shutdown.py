"""Graceful shutdown: the drain sequence on a real uvicorn server, and SIGTERM to a real gateway process."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gateway.shutdown import GracefulServer, ShutdownPlan


class Recorder:
    def __init__(self) -> None:
        self.draining = False
        self.log: list[str] = []
        self.exit_codes: list[int] = []
        self.stop_hangs = False


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

    server = GracefulServer(config, on_drain=drain, plan=plan, exit_now=rec.exit_codes.append)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "server failed to start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield server, task, f"http://127.0.0.1:{port}"
    finally:
        if not task.done():
            server.force_exit = server.should_exit = True
            await asyncio.wait_for(task, 5)


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
    assert rec.log == ["draining", "slow answered", "runtime stop"]
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


async def test_overrun_of_the_grace_period_exits_nonzero() -> None:
    rec = Recorder()
    rec.stop_hangs = True
    plan = ShutdownPlan(grace_period=0.6)
    async with running(rec, plan) as (server, task, _url):
        server.begin_drain("test")
        started = time.monotonic()
        while not rec.exit_codes:
            assert time.monotonic() - started < 3, "the watchdog did not fire"
            await asyncio.sleep(0.02)
        assert rec.exit_codes == [1] and time.monotonic() - started >= plan.grace_period - 0.05
        assert rec.log[-1] == "runtime stop"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
