"""Shutdown answers what is open: a long poll waiting at SIGTERM gets 200 with what is there or 503 +
Retry-After well before the grace period ends (never a 500 or a cut connection), and a failed publish
request cancels its own outstanding sends."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.api.app import create_app
from gateway.config import ConsumerSettings, ProducerSettings, Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import parse_topic_specs
from gateway.process_server import ProcessServer
from gateway.runtime import Runtime
from gateway.service.publish import OutgoingMessage, PublishService
from gateway.shutdown import ShutdownPlan
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.send import SendResult
from tests.support.serving import server_port, uvicorn_serving
from tests.support.waiting import eventually

#: long enough that uvicorn's own request deadline would end a 30 s poll with an error if nothing answered it
PLAN = ShutdownPlan(grace_period=8.0)


@asynccontextmanager
async def gateway(cluster: EmbeddedCluster) -> AsyncIterator[tuple[ProcessServer, asyncio.Task[None], str]]:
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer=ProducerSettings(heartbeat_interval=0.5),
        consumers=ConsumerSettings(heartbeat_interval=0.2, empty_fetch_wait=0.05),
    )
    runtime = Runtime(settings)
    config = uvicorn.Config(
        create_app(runtime=runtime, owns_runtime=False),
        host="127.0.0.1",
        port=0,
        log_config=None,
        timeout_graceful_shutdown=PLAN.requests_timeout,
    )
    server = ProcessServer(config, runtime=runtime, grpc_server=None, on_drain=runtime.begin_drain, plan=PLAN)
    async with uvicorn_serving(server, force_exit=True) as task:
        yield server, task, f"http://127.0.0.1:{server_port(server)}"


async def test_a_long_poll_open_at_sigterm_is_answered_before_the_grace_period() -> None:
    async with (
        EmbeddedCluster(parse_topic_specs("demo:2"), balance_period=0.1) as cluster,
        gateway(cluster) as (server, task, url),
        httpx.AsyncClient(base_url=url, timeout=60.0) as client,
    ):
        created = await client.post("/v1/consumers/g-drain", json={"topics": ["demo"]})
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/g-drain/instances/{created.json()['instanceId']}/messages"
        assert (await client.get(path, params={"timeout_ms": 500})).status_code == 200  # assigned
        consumers = server.runtime.consumers
        assert consumers is not None
        instance = consumers.instance("g-drain", created.json()["instanceId"])
        polls = [asyncio.create_task(client.get(path, params={"timeout_ms": 30_000})) for _ in range(2)]

        async def waiting() -> bool:
            return instance.active == 2

        await eventually(waiting, what="two long polls in flight")
        server.handle_exit(signal.SIGTERM, None)
        answers = await asyncio.gather(*polls)
        for answer in answers:
            assert answer.status_code in (200, 503), answer.text
            if answer.status_code == 503:
                assert answer.headers["retry-after"] == "1"
                assert "stopping" in answer.json()["error"]["message"]
        # Answered, not cut off: the shutdown went on to its end within the grace period.
        await asyncio.wait_for(task, PLAN.grace_period)
        assert server.started and not server.force_exit


class Bug(BaseException):
    """Not an Exception: the publish service cannot turn it into a per-message outcome."""


class HangingProducer(Producer):
    """A real producer whose sends of ``b"hang"`` never end and of ``b"boom"`` fail with something no
    outcome can hold (a stand-in for a bug)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hanging = 0
        self.cancelled = 0

    async def send_prepared(self, topic: str, messages: Any, **options: Any) -> list[SendResult | Exception]:
        """Every message of a publish travels here (a single or pinned one as a batch of one)."""
        if any(m.data.endswith(b"hang") for m in messages):
            await self._hang()
        if any(m.data.endswith(b"boom") for m in messages):
            await asyncio.sleep(0.05)
            raise Bug("a send failed in a way no outcome can hold")
        return await super().send_prepared(topic, messages, **options)

    async def _hang(self) -> None:
        self.hanging += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


@pytest.mark.parametrize("concurrency", [256, 2])
async def test_a_failed_publish_cancels_its_outstanding_sends(concurrency: int) -> None:
    async with EmbeddedCluster(parse_topic_specs("demo:2")) as cluster, ConnectionPool() as pool:
        producer = HangingProducer(cluster.master_addresses, pool=pool, config=ProducerConfig())
        await producer.start()
        try:
            service = PublishService(producer, concurrency=concurrency)
            # The failing send goes first: with concurrency 2 the last message waits for a free slot.
            # Keyed messages: each key is a chain of its own, sent concurrently like single sends.
            batch = [
                OutgoingMessage(b"boom", key="a"),
                OutgoingMessage(b"hang", key="b"),
                OutgoingMessage(b"hang", key="c"),
            ]
            with pytest.raises(Bug):
                await service.publish("demo", batch)
            assert producer.hanging >= 1 and producer.cancelled == producer.hanging

            # Free messages (one batch send) hanging next to a keyed send that fails: the batch is cancelled.
            producer.hanging = producer.cancelled = 0
            batch = [OutgoingMessage(b"boom", key="a"), OutgoingMessage(b"hang"), OutgoingMessage(b"hang")]
            with pytest.raises(Bug):
                await service.publish("demo", batch)
            assert producer.hanging == 1 and producer.cancelled == 1

            # A request cancelled by its client: the same.
            producer.hanging = producer.cancelled = 0
            hangs = [
                OutgoingMessage(b"hang", key="b"),
                OutgoingMessage(b"hang", key="c"),
                OutgoingMessage(b"hang"),
            ]
            request = asyncio.create_task(service.publish("demo", hangs))
            await eventually(lambda: _at_least(producer.hanging, 2), what="sends in flight")
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            assert producer.cancelled == producer.hanging
        finally:
            await producer.close()


async def _at_least(value: int, low: int) -> bool:
    return value >= low
