"""The redelivery counters (tubemq_gateway_nacks_total, deadlines_expired_total, retries_published_total,
dead_letters_total, labelled by group) as a scrape of the registry shows them, driven by real nacks, dead
letters and deadline expiries on the embedded cluster."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import GatewayMetrics
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.tubemq.events import EventBus
from tests.support.consumer_support import Env
from tests.support.waiting import eventually

#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "solo:1,retry:1,dlq:1"


def _scraped(metrics: GatewayMetrics, group: str) -> dict[str, float]:
    """The four counters of ``group`` as the exposition text a Prometheus scrapes has them."""
    names = {"nacks", "deadlines_expired", "retries_published", "dead_letters"}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            short = sample.name.removeprefix("tubemq_gateway_").removesuffix("_total")
            if short in names and sample.name.endswith("_total") and sample.labels == {"group": group}:
                out[short] = sample.value
    return out


async def _one(service: ConsumerService, group: str, instance: str) -> DeliveredMessage:
    got: list[DeliveredMessage] = []

    async def some() -> bool:
        got.extend(await service.poll(group, instance, timeout=0.2))
        return bool(got)

    await eventually(some, what="a message")
    assert len(got) == 1
    return got[0]


async def test_nacks_retries_dead_letters_and_expired_deadlines_are_counted(env: Env) -> None:
    events = EventBus()
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    metrics.subscribe(events)
    service = await env.service(republisher=env.producer, events=events)
    spec = InstanceSpec(
        {"solo": None},
        start_position="earliest",
        retry_topic="retry",
        dead_letter_topic="dlq",
        max_delivery_attempts=3,
        ack_deadline=1.0,
    )
    group = "g-metrics"
    instance = (await service.create(group, spec)).instance_id
    await env.publish("solo", [b"m"])
    first = await _one(service, group, instance)
    assert _scraped(metrics, group) == {
        "nacks": 0.0,
        "deadlines_expired": 0.0,
        "retries_published": 0.0,
        "dead_letters": 0.0,
    }  # the group's series exist from its first fetch: rates and ratios of them are defined
    result = await service.nack(group, instance, [first.token, "999"])
    assert (result.retried, result.stale) == (1, ["999"])
    second = await _one(service, group, instance)  # attempt 2, comes back at once
    assert second.attempt == 2
    # not committed: past its 1 s deadline it goes to the retry topic alone, as attempt 3
    await asyncio.sleep(1.1)
    await service.reap()
    third = await _one(service, group, instance)
    assert third.attempt == 3
    # its last attempt: a nack sends it to the dead-letter topic
    assert (await service.nack(group, instance, [third.token])).dead_lettered == 1
    assert _scraped(metrics, group) == {
        "nacks": 2.0,
        "deadlines_expired": 1.0,
        "retries_published": 2.0,
        "dead_letters": 1.0,
    }
