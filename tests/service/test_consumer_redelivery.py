"""Per-message redelivery of consumer instances against the embedded cluster: nack with a delay through the
retry topic, delivery attempts, dead letters, deadlines and their extension."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import InvalidInput, NotFound
from gateway.service.instance_redelivery import Redeliverer
from gateway.service.redelivery import DEAD_LETTER_REASON
from tests.support.consumer_support import Env, bodies, environment
from tests.support.files import SUPPORT_DIR
from tests.support.waiting import eventually

TOPICS = "solo:1,retry:2,dlq:1,other:1"


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = TOPICS


def values(messages: list[DeliveredMessage]) -> list[bytes]:
    return [m.message.body for m in messages]


async def _service(env: Env, **options: object) -> ConsumerService:
    return await env.service(republisher=env.producer, **options)


async def _instance(service: ConsumerService, group: str, **spec: object) -> str:
    full = InstanceSpec({"solo": None}, start_position="earliest", retry_topic="retry", **spec)  # type: ignore[arg-type]
    return (await service.create(group, full)).instance_id


async def _collect(service: ConsumerService, group: str, instance: str, count: int) -> list[DeliveredMessage]:
    got: list[DeliveredMessage] = []

    async def enough() -> bool:
        got.extend(await service.poll(group, instance, timeout=0.2))
        return len(got) >= count

    await eventually(enough, what=f"{count} messages")
    return got


async def test_a_nacked_message_comes_back_after_its_delay_alone_with_attempt_2(env: Env) -> None:
    sent = bodies("nack", 10)
    published = await env.publish("solo", sent)
    service = await _service(env)
    instance = await _instance(service, "g-nack")
    first = await _collect(service, "g-nack", instance, 10)
    assert values(first) == sent and all(m.attempt == 1 for m in first)
    assert all(m.deadline_ms > time.time() * 1000 for m in first)
    chosen = first[4]
    started = time.monotonic()
    result = await service.nack("g-nack", instance, [chosen.token], delay=0.6)
    assert (result.retried, result.dead_lettered, result.stale, result.failed) == (1, 0, [], [])
    committed = await service.commit("g-nack", instance, [m.token for m in first if m is not chosen])
    assert committed.committed == 9 and not committed.stale and committed.pending == 0
    again = await _collect(service, "g-nack", instance, 1)
    assert time.monotonic() - started >= 0.6
    assert values(again) == [chosen.message.body]
    back = again[0]
    assert back.attempt == 2
    # delivered under its original position, without the gateway's attributes
    assert (back.topic, back.partition_key, back.offset) == (
        "solo",
        published[4].partition_key,
        chosen.offset,
    )
    assert back.message.message_id == chosen.message.message_id
    assert back.message.attributes == chosen.message.attributes
    assert (await service.commit("g-nack", instance, [back.token])).committed == 1
    # the other nine are never delivered again
    assert await service.poll("g-nack", instance, timeout=1.0) == []


async def test_a_nack_keeps_key_stream_id_and_attributes(env: Env) -> None:
    await env.producer.register_topic("solo")
    await env.producer.send(
        "solo", b"v", key="k-1", stream_id="s1", attributes={"a": "1"}, msg_time="202611221200"
    )
    service = await _service(env)
    instance = await _instance(service, "g-keep")
    [first] = await _collect(service, "g-keep", instance, 1)
    await service.nack("g-keep", instance, [first.token])
    [back] = await _collect(service, "g-keep", instance, 1)
    m = back.message
    assert (m.key, m.stream_id, m.msg_time, m.attributes) == ("k-1", "s1", "202611221200", {"a": "1"})
    assert back.attempt == 2


async def test_after_max_delivery_attempts_the_message_is_a_dead_letter(env: Env) -> None:
    await env.publish("solo", [b"poison", b"fine"])
    service = await _service(env)
    instance = await _instance(service, "g-dead", dead_letter_topic="dlq", max_delivery_attempts=3)
    batch = await _collect(service, "g-dead", instance, 2)
    poison = batch[0]
    await service.commit("g-dead", instance, [batch[1].token])
    attempts = []
    current = poison
    for expected in (1, 2, 3):
        assert current.attempt == expected
        attempts.append(current.attempt)
        result = await service.nack("g-dead", instance, [current.token])
        if expected < 3:
            assert (result.retried, result.dead_lettered) == (1, 0)
            [current] = await _collect(service, "g-dead", instance, 1)
        else:
            assert (result.retried, result.dead_lettered) == (0, 1)
    assert await service.poll("g-dead", instance, timeout=0.8) == []
    reader = await service.create("g-dlq-reader", InstanceSpec({"dlq": None}, start_position="earliest"))
    [letter] = await _collect(service, "g-dlq-reader", reader.instance_id, 1)
    attrs = letter.message.attributes
    assert letter.message.body == b"poison" and letter.topic == "dlq"
    assert attrs["gateway.reason"] == DEAD_LETTER_REASON
    assert attrs["gateway.group"] == "g-dead"
    assert attrs["gateway.topic"] == "solo"
    assert attrs["gateway.partitionKey"] == poison.partition_key
    assert attrs["gateway.messageId"] == str(poison.message.message_id)
    assert attrs["gateway.deliveryAttempts"] == "3"
    assert attrs["gateway.lastFailure"] == "nack"
    if poison.offset is not None:
        assert attrs["gateway.offset"] == str(poison.offset)


async def test_an_expired_deadline_redelivers_that_message_alone_and_counts_an_attempt(env: Env) -> None:
    await env.publish("solo", bodies("dl", 3))
    service = await _service(env, reap_interval=0.05)
    instance = await _instance(service, "g-dl", ack_deadline=0.4)
    first = await _collect(service, "g-dl", instance, 3)
    await service.commit("g-dl", instance, [first[0].token, first[2].token])
    [back] = await _collect(service, "g-dl", instance, 1)
    assert back.message.body == first[1].message.body and back.attempt == 2
    assert (await service.commit("g-dl", instance, [first[1].token])).stale == [first[1].token]


async def test_extended_deadlines_hold(env: Env) -> None:
    await env.publish("solo", bodies("ext", 2))
    service = await _service(env, reap_interval=0.05)
    instance = await _instance(service, "g-ext", ack_deadline=0.3)
    first = await _collect(service, "g-ext", instance, 2)
    result = service.extend_deadlines("g-ext", instance, [m.token for m in first], seconds=3.0)
    assert result.extended == 2 and not result.stale
    assert result.deadline_ms >= time.time() * 1000 + 2500
    assert await service.poll("g-ext", instance, timeout=1.0) == []  # past the 0.3 s deadline: held
    assert (await service.commit("g-ext", instance, [m.token for m in first])).committed == 2


async def test_without_a_retry_topic_an_expired_deadline_rolls_the_batch_back_and_counts(env: Env) -> None:
    await env.publish("solo", bodies("nort", 2))
    service = await env.service(reap_interval=0.05)
    spec = InstanceSpec({"solo": None}, start_position="earliest", ack_deadline=0.3)
    instance = (await service.create("g-nort", spec)).instance_id
    first = await _collect(service, "g-nort", instance, 2)
    again = await _collect(service, "g-nort", instance, 2)
    assert values(again) == values(first)
    assert [m.attempt for m in again] == [2, 2]
    with pytest.raises(InvalidInput) as bad:
        await service.nack("g-nort", instance, [again[0].token])
    assert bad.value.field == "tokens"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"dead_letter_topic": "dlq"}, "retryTopic"),
        ({"retry_topic": "solo"}, "retryTopic"),
        ({"retry_topic": "retry", "dead_letter_topic": "retry"}, "deadLetterTopic"),
        ({"retry_topic": "retry", "max_delivery_attempts": 3}, "deadLetterTopic"),
        (
            {"retry_topic": "retry", "dead_letter_topic": "dlq", "max_delivery_attempts": 0},
            "maxDeliveryAttempts",
        ),
        ({"ack_deadline": 0.0}, "ackDeadlineMs"),
        ({"retry_topic": "bad topic"}, "retryTopic"),
    ],
)
async def test_invalid_redelivery_settings_name_the_field(
    env: Env, spec: dict[str, object], field: str
) -> None:
    service = await _service(env)
    with pytest.raises(InvalidInput) as bad:
        await service.create("g-bad", InstanceSpec({"solo": None}, **spec))  # type: ignore[arg-type]
    assert bad.value.field == field


async def test_a_missing_retry_topic_is_named_at_creation(env: Env) -> None:
    service = await _service(env)
    with pytest.raises(NotFound) as missing:
        await service.create("g-miss", InstanceSpec({"solo": None}, retry_topic="nosuch"))
    assert missing.value.field == "retryTopic" and "nosuch" in str(missing.value)
    with pytest.raises(NotFound) as missing:
        await service.create(
            "g-miss", InstanceSpec({"solo": None}, retry_topic="retry", dead_letter_topic="nosuch")
        )
    assert missing.value.field == "deadLetterTopic"


async def test_nack_and_extension_bounds(env: Env) -> None:
    await env.publish("solo", [b"x"])
    service = await _service(env, max_nack_delay=5.0, max_ack_deadline=10.0)
    instance = await _instance(service, "g-bound")
    [m] = await _collect(service, "g-bound", instance, 1)
    with pytest.raises(InvalidInput) as bad:
        await service.nack("g-bound", instance, [m.token], delay=6.0)
    assert bad.value.field == "delay"
    with pytest.raises(InvalidInput) as bad:
        service.extend_deadlines("g-bound", instance, [m.token], seconds=11.0)
    assert bad.value.field == "extension"
    with pytest.raises(InvalidInput):
        await service.nack("g-bound", instance, [])
    result = await service.nack("g-bound", instance, ["999", m.token])
    assert result.stale == ["999"] and result.retried == 1


async def test_groups_sharing_a_retry_topic_get_only_their_own_retries(env: Env) -> None:
    await env.publish("solo", [b"shared"])
    service = await _service(env)
    a = await _instance(service, "g-share-a")
    b = await _instance(service, "g-share-b")
    [in_a] = await _collect(service, "g-share-a", a, 1)
    [in_b] = await _collect(service, "g-share-b", b, 1)
    await service.commit("g-share-b", b, [in_b.token])
    await service.nack("g-share-a", a, [in_a.token])
    [back] = await _collect(service, "g-share-a", a, 1)
    assert back.attempt == 2 and back.message.body == b"shared" and back.message.stream_id is None
    # the broker filters the retry topic by group
    assert await service.poll("g-share-b", b, timeout=1.0) == []


async def test_a_gateway_stopped_between_the_retry_publish_and_the_settle_loses_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.publish("solo", [b"precious"])
    first_gateway = await _service(env)
    instance = await _instance(first_gateway, "g-crash")
    [m] = await _collect(first_gateway, "g-crash", instance, 1)
    published = asyncio.Event()
    original = Redeliverer._republish

    async def publish_then_hang(self: Redeliverer, d: DeliveredMessage, delay: float, why: str) -> bool:
        await original(self, d, delay, why)
        published.set()
        await asyncio.Event().wait()  # the gateway dies here: the retry copy is stored, nothing settled
        raise AssertionError("unreachable")

    monkeypatch.setattr(Redeliverer, "_republish", publish_then_hang)
    nack = asyncio.create_task(first_gateway.nack("g-crash", instance, [m.token]))
    await asyncio.wait_for(published.wait(), 10)
    nack.cancel()
    await first_gateway.close()
    monkeypatch.setattr(Redeliverer, "_republish", original)
    second_gateway = await _service(env)
    again = await _collect(second_gateway, "g-crash", await _instance(second_gateway, "g-crash"), 2)
    assert sorted((d.message.body, d.attempt) for d in again) == [(b"precious", 1), (b"precious", 2)]


async def test_a_gateway_killed_between_the_retry_publish_and_the_confirm_loses_nothing() -> None:
    """A real SIGKILL of a gateway process (tests/support/kill_after_retry_publish.py) right after the broker
    acknowledged the retry copy, before the batch was confirmed: no unregister, no goodbye. Once the broker
    and the master time the dead consumer out, the group gets the original again besides the retry copy."""
    async with environment("solo:1,retry:2", consumer_timeout=3.0) as env:
        await env.publish("solo", [b"precious-0"])
        master = ",".join(str(a) for a in env.cluster.master_addresses)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SUPPORT_DIR / "kill_after_retry_publish.py"),
            master,
            "g-kill",
            "solo",
            "retry",
            "precious",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(child.communicate(), 60)
        events = [json.loads(line)["event"] for line in out.decode().splitlines()]
        assert (child.returncode, events) == (-signal.SIGKILL, ["nacking", "published"]), out
        survivor = await _service(env)
        instance = await _instance(survivor, "g-kill")
        got: list[DeliveredMessage] = []

        async def both() -> bool:
            got.extend(await survivor.poll("g-kill", instance, timeout=0.5))
            if got:
                await survivor.commit("g-kill", instance, [m.token for m in got])
            return len(got) >= 2

        await eventually(both, timeout=45, what="the original and the retry copy")
        assert sorted((m.message.body, m.attempt) for m in got) == [(b"precious-0", 1), (b"precious-0", 2)]
