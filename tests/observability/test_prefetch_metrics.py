"""The fetch-ahead gauges: what a worker's consumer instances hold fetched and not delivered, and the
worker's cap, read from a real consumer service over the embedded cluster at scrape time."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.telemetry import install_telemetry
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.pool import ConnectionPool
from tests.support.consumer_support import Env, values
from tests.support.waiting import eventually

P = "tubemq_gateway_"


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "demo:1,solo:1"


class Runtime:
    """What install_telemetry reads of a runtime, with a real consumer service."""

    def __init__(self, consumers: ConsumerService | None) -> None:
        self.events = EventBus()
        self.pool: ConnectionPool | None = None
        self.draining = False
        self.consumers = consumers

    def readiness(self) -> tuple[bool, dict[str, object]]:
        return True, {}


async def scrape(app: FastAPI) -> dict[str, float]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        text = (await client.get("/metrics")).text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels
    }


async def test_the_bytes_fetched_ahead_are_a_gauge_of_the_worker(env: Env) -> None:
    service = await env.service(prefetch_bytes=2**20, prefetch_worker_bytes=3 * 2**20)
    app = FastAPI()
    install_telemetry(app, Runtime(service))
    before = await scrape(app)
    assert before[P + "consumer_prefetch_bytes"] == 0
    assert before[P + "consumer_prefetch_cap_bytes"] == 3 * 2**20

    info = await service.create("g-gauge", InstanceSpec({"solo": None}, start_position="earliest"))
    instance = service.instance("g-gauge", info.instance_id)
    await env.publish("solo", [b"a" * 100, b"b" * 100])
    first = await service.poll("g-gauge", info.instance_id, timeout=3.0)
    assert len(first) == 2
    await env.publish("solo", [b"c" * 300, b"d" * 400])
    await service.commit("g-gauge", info.instance_id, [m.token for m in first])  # fetches the next ahead
    await eventually(lambda: instance.buffered_count == 2, what="the batch fetched ahead")
    assert (await scrape(app))[P + "consumer_prefetch_bytes"] == 700

    second = await service.poll("g-gauge", info.instance_id, timeout=3.0)
    assert values(second) == [b"c" * 300, b"d" * 400]
    assert (await scrape(app))[P + "consumer_prefetch_bytes"] == 0  # delivered: nothing held any more


async def test_before_the_consumer_service_starts_nothing_is_held() -> None:
    app = FastAPI()
    install_telemetry(app, Runtime(None))
    scraped = await scrape(app)
    assert scraped[P + "consumer_prefetch_bytes"] == 0
    assert scraped[P + "consumer_prefetch_cap_bytes"] == 0
