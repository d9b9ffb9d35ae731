"""A consumer instance keeps what it hands out per run (consecutive messages of one batch handed out by one
poll): tokens of a run settled out of order or in part, a deadline extended or a message nacked within a
run, an expiry of a partly extended run, an SSE resume in the middle of a run, and messages delivered again
beside fresh ones in one answer, all against the embedded cluster; and what the renderers make of runs is
what they make of the same messages one by one."""

from __future__ import annotations

from gateway.api.consumer_render import render_events, render_poll
from gateway.grpc.consumed_wire import encode_consumed
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import Delivery, runs_of
from tests.support.consumer_support import Env, bodies, values
from tests.support.waiting import ManualClock, eventually

#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = "solo:1,retry:2"


async def _instance(service: ConsumerService, group: str, **spec: object) -> str:
    full = InstanceSpec({"solo": None}, start_position="earliest", **spec)  # type: ignore[arg-type]
    return (await service.create(group, full)).instance_id


async def _collect(
    service: ConsumerService,
    group: str,
    instance: str,
    count: int,
    clock: ManualClock | None = None,
    *,
    commit: bool = False,
) -> list[DeliveredMessage]:
    """Poll until ``count`` messages came (with ``commit``, committing each answer: a partition's next batch
    comes once its last is confirmed)."""
    got: list[DeliveredMessage] = []

    async def enough() -> bool:
        if clock is not None:
            clock.advance(0.01)  # retried copies come due
        answer = await service.poll(group, instance, timeout=0.2)
        _check_answer(answer)
        got.extend(answer)
        if commit and answer:
            result = await service.commit(group, instance, answer.tokens)
            assert (result.committed, result.stale) == (len(answer), [])
        return len(got) >= count

    await eventually(enough, what=f"{count} messages")
    return got


def _check_answer(answer: Delivery) -> None:
    """Tokens ascend one by one within a run and across an answer; the renderers give for the runs what
    they give for the same messages one by one."""
    tokens = [int(t) for t in answer.tokens]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert [m.seq for m in answer] == tokens
    one_by_one = runs_of(list(answer))
    for fmt in ("base64", "utf8"):
        assert render_poll(answer, fmt) == render_poll(one_by_one, fmt)
        assert render_events(answer, fmt) == render_events(one_by_one, fmt)
    assert encode_consumed(answer) == encode_consumed(one_by_one)


async def test_a_poll_hands_out_a_batch_as_one_run_with_consecutive_tokens(env: Env) -> None:
    sent = bodies("run", 10)
    await env.publish("solo", sent)
    service = await env.service()
    instance = await _instance(service, "g-run")
    first = await _collect(service, "g-run", instance, 10)
    assert values(first) == sent
    answer = await service.poll("g-run", instance, max_messages=5, timeout=0)
    assert answer == [] and answer.runs == []
    tokens = [int(m.token) for m in first]
    assert tokens == list(range(tokens[0], tokens[0] + 10))
    state = service.describe("g-run", instance)
    assert (state.pending, state.buffered) == (10, 0)


async def test_tokens_of_a_run_committed_out_of_order_and_in_parts(env: Env) -> None:
    await env.publish("solo", bodies("ooo", 10))
    service = await env.service()
    instance = await _instance(service, "g-ooo")
    first = await _collect(service, "g-ooo", instance, 10)
    tokens = [m.token for m in first]
    result = await service.commit("g-ooo", instance, [tokens[7], tokens[2], tokens[9], tokens[2]])
    # the repeated token is stale: it was committed by its first mention
    assert (result.committed, result.stale, result.pending, result.awaiting_batch) == (3, [tokens[2]], 7, 3)
    assert service.describe("g-ooo", instance).pending == 7
    result = await service.commit("g-ooo", instance, [tokens[9], tokens[0], "99999"])
    assert (result.committed, result.stale, result.pending) == (1, [tokens[9], "99999"], 6)
    rest = [t for i, t in enumerate(tokens) if i not in (0, 2, 7, 9)]
    result = await service.commit("g-ooo", instance, list(reversed(rest)))
    assert (result.committed, result.stale, result.pending, result.awaiting_batch) == (6, [], 0, 0)
    assert await service.poll("g-ooo", instance, timeout=0.3) == []  # the batch went to the broker


async def test_a_partly_committed_run_rolled_back_comes_again_with_attempts_per_message(env: Env) -> None:
    sent = bodies("part", 10)
    await env.publish("solo", sent)
    service = await env.service()
    instance = await _instance(service, "g-part")
    first = await _collect(service, "g-part", instance, 10)
    tokens = [m.token for m in first]
    assert (await service.commit("g-part", instance, tokens[:5])).committed == 5
    rolled = await service.commit("g-part", instance, tokens[5:], consumed=False)
    assert (rolled.rolled_back, rolled.pending) == (5, 0)
    # TubeMQ gives the whole batch back: those committed come again as first deliveries, the others as
    # their second, in one answer (runs split where the attempt changes)
    again = await _collect(service, "g-part", instance, 10)
    assert values(again) == sent
    assert [m.attempt for m in again] == [1] * 5 + [2] * 5
    assert min(int(m.token) for m in again) > max(int(t) for t in tokens)


async def test_an_extension_of_part_of_a_run_and_its_expiry(env: Env) -> None:
    sent = bodies("ext", 6)
    await env.publish("solo", sent)
    clock = ManualClock()
    service = await env.service(clock=clock, republisher=env.producer)
    instance = await _instance(service, "g-ext", retry_topic="retry", ack_deadline=1.0)
    first = await _collect(service, "g-ext", instance, 6, clock)
    tokens = [m.token for m in first]
    extended = service.extend_deadlines("g-ext", instance, [tokens[1], tokens[4], "123456"], seconds=30.0)
    assert (extended.extended, extended.stale) == (2, ["123456"])
    # the SSE resume shows the run in parts: the extended messages carry their own deadline
    resumed = service.open_stream("g-ext", instance, None)
    step = await resumed.next(10, 2**20, 0)
    assert step.tokens == tokens
    assert [m.deadline_ms for m in step] == [
        extended.deadline_ms if i in (1, 4) else first[0].deadline_ms for i in range(6)
    ]
    assert len(step.runs) == 5
    _check_answer(step)
    clock.advance(2.0)  # past the others' deadline: each goes to the retry topic alone
    again = await _collect(service, "g-ext", instance, 4, clock)
    assert sorted(values(again)) == sorted(sent[i] for i in (0, 2, 3, 5))
    assert all(m.attempt == 2 for m in again)
    state = service.describe("g-ext", instance)
    assert state.pending == 6  # the two extended ones and the four again
    result = await service.commit("g-ext", instance, [tokens[1], tokens[4], *(m.token for m in again)])
    assert (result.committed, result.stale, result.pending) == (6, [], 0)


async def test_a_nack_of_one_message_in_a_run(env: Env) -> None:
    sent = bodies("nack", 5)
    await env.publish("solo", sent)
    service = await env.service(republisher=env.producer)
    instance = await _instance(service, "g-nack", retry_topic="retry")
    first = await _collect(service, "g-nack", instance, 5)
    tokens = [m.token for m in first]
    nacked = await service.nack("g-nack", instance, [tokens[2]], delay=0.0)
    assert (nacked.retried, nacked.stale, nacked.pending) == (1, [], 4)
    cursor = service.open_stream("g-nack", instance, tokens[0])
    step = await cursor.next(10, 2**20, 0)
    assert step.tokens == [tokens[1], tokens[3], tokens[4]]  # the run, less the nacked message
    assert (await service.nack("g-nack", instance, [tokens[2]], delay=0.0)).stale == [tokens[2]]
    assert (await service.commit("g-nack", instance, tokens)).stale == [tokens[2]]
    [back] = await _collect(service, "g-nack", instance, 1)
    assert (back.message.body, back.attempt, back.partition_key) == (sent[2], 2, first[2].partition_key)
    assert back.offset == first[2].offset


async def test_an_sse_resume_in_the_middle_of_a_run(env: Env) -> None:
    await env.publish("solo", bodies("sse", 8))
    service = await env.service()
    instance = await _instance(service, "g-sse")
    first = await _collect(service, "g-sse", instance, 8)
    tokens = [m.token for m in first]
    cursor = service.open_stream("g-sse", instance, tokens[3])
    step = await cursor.next(10, 2**20, 0)
    assert step.tokens == tokens[4:] and len(step.runs) == 1
    assert render_events(step, "base64").count(b"id: ") == 4
    await service.commit("g-sse", instance, [tokens[5], tokens[1]])
    step = await service.open_stream("g-sse", instance, tokens[3]).next(10, 2**20, 0)
    assert step.tokens == [tokens[4], *tokens[6:]] and len(step.runs) == 2
    _check_answer(step)
    step = await service.open_stream("g-sse", instance, tokens[7]).next(10, 2**20, 0)
    assert step == []
    step = await service.open_stream("g-sse", instance, None).next(10, 2**20, 0)
    assert step.tokens == [t for i, t in enumerate(tokens) if i not in (1, 5)]


async def test_retried_messages_beside_fresh_ones(env: Env) -> None:
    sent = bodies("mix", 4)
    await env.publish("solo", sent)
    service = await env.service(republisher=env.producer)
    instance = await _instance(service, "g-mix", retry_topic="retry")
    first = await _collect(service, "g-mix", instance, 4)
    tokens = [m.token for m in first]
    assert (await service.nack("g-mix", instance, tokens[:2], delay=0.0)).retried == 2
    assert (await service.commit("g-mix", instance, tokens[2:])).committed == 2
    fresh = bodies("mix-new", 4)
    await env.publish("solo", fresh)
    rest = await _collect(service, "g-mix", instance, 6, commit=True)
    assert sorted(values(rest)) == sorted(sent[:2] + fresh)
    attempts = {m.message.body: m.attempt for m in rest}
    assert attempts == {**dict.fromkeys(sent[:2], 2), **dict.fromkeys(fresh, 1)}
    assert all(m.topic == "solo" and m.partition_key == first[0].partition_key for m in rest)
    assert service.describe("g-mix", instance).pending == 0
