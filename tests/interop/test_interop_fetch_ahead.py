"""Fetching ahead on the real TubeMQ: a tight poll loop of an auto-commit instance finds its batches fetched
ahead and gets every message once; and a batch fetched ahead, never delivered, is not committed by the real
broker (it only read it: the group's offset moves with a commit alone), so the group's next member gets it
after the instance is deleted, as a first delivery."""

from __future__ import annotations

from typing import Any

from interop_support import (
    GROUP_READY,
    GW4,
    RealGateway,
    group_name,
    real_gateway,
    require_topic,
    run_tag,
    wait_until,
)

from gateway.service.instance import ConsumerInstance

PARTITIONS = GW4[1]
COUNT = 400
STEP = 50


async def joined(gw: RealGateway, group: str, spec: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A new instance of ``group`` once it holds every partition of the topic, and what its polls got
    meanwhile."""
    created = await gw.http.post(f"/v1/consumers/{group}", json=spec)
    assert created.status_code == 201, created.text
    base = str(created.json()["baseUrl"])
    early: list[dict[str, Any]] = []

    async def holds_all() -> bool:
        answer = await gw.http.get(f"{base}/messages", params={"timeout_ms": 500, "format": "utf8"})
        early.extend(answer.json()["messages"])
        return len((await gw.http.get(base)).json()["partitions"]) == PARTITIONS

    await wait_until(holds_all, GROUP_READY + 30, "the group's partitions")
    return base, early


async def publish(gw: RealGateway, topic: str, values: list[str]) -> None:
    for i in range(0, len(values), 100):
        answer = await gw.http.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values[i : i + 100]]}
        )
        assert answer.status_code == 200, answer.text


async def collect(gw: RealGateway, base: str, tag: str, want: int, *, commit: bool) -> list[dict[str, Any]]:
    """Poll ``STEP`` at a time until ``want`` messages of ``tag`` came (others are skipped); with ``commit``
    each answer is committed by token."""
    got: list[dict[str, Any]] = []
    polls = 0
    while len(got) < want:
        answer = await gw.http.get(
            f"{base}/messages", params={"timeout_ms": 5000, "format": "utf8", "max_messages": STEP}
        )
        assert answer.status_code == 200, answer.text
        messages = answer.json()["messages"]
        assert messages, f"nothing more after {len(got)} of {want}"
        polls += 1
        if commit:
            commits = await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in messages]})
            assert commits.status_code == 200, commits.text
        got += [m for m in messages if str(m["value"]).startswith(tag)]
    print(f"{len(got)} messages of {tag} in {polls} polls")
    return got


def instance_of(gw: RealGateway, group: str, base: str) -> ConsumerInstance:
    """The instance at ``base``, which this gateway holds."""
    assert gw.runtime.consumers is not None
    return gw.runtime.consumers.instance(group, base.rstrip("/").rsplit("/", 1)[1])


async def test_a_tight_poll_loop_gets_every_message_once_fetched_ahead() -> None:
    topic = require_topic(GW4)
    tag = run_tag("ahead")
    sent = [f"{tag}-{i}" for i in range(COUNT)]
    async with real_gateway() as gw:
        group = group_name("ahead")
        base, _ = await joined(gw, group, {"topics": [topic], "autoCommit": True})  # at the end: nothing
        await publish(gw, topic, sent)
        got = await collect(gw, base, tag, COUNT, commit=False)
        assert sorted(str(m["value"]) for m in got) == sorted(sent)  # each once
        assert {m["deliveryAttempt"] for m in got} == {1}
        instance = instance_of(gw, group, base)
        print(f"fetches a poll waited for: {instance.poll_fetches}, fetched ahead: {instance.fetches_ahead}")
        assert instance.fetches_ahead > 0
        assert instance.poll_fetches < COUNT // STEP
        assert (await gw.http.delete(base)).status_code in (200, 204)


async def test_a_batch_fetched_ahead_is_not_committed_by_the_broker() -> None:
    topic = require_topic(GW4)
    tag = run_tag("aheadkept")
    sent = [f"{tag}-{i}" for i in range(COUNT)]
    async with real_gateway() as gw:
        group = group_name("aheadkept")
        base, _ = await joined(gw, group, {"topics": [topic]})  # the group starts at the end: nothing
        await publish(gw, topic, sent)
        instance = instance_of(gw, group, base)

        def one_fetched_ahead() -> bool:
            """A batch fetched ahead is in hand, none of it delivered."""
            held = instance._state.batches.values()
            return instance.fetches_ahead > 0 and any(b.undelivered == b.count for b in held)

        first: list[dict[str, Any]] = []
        while not one_fetched_ahead():
            first += await collect(gw, base, tag, 1, commit=True)
            assert len(first) < COUNT, "every message was delivered before one was fetched ahead"
        assert instance.pending_count == 0
        assert (await gw.http.delete(base)).status_code in (200, 204)

        # no start position: the group's offsets at the broker say where the next member starts
        base, early = await joined(gw, group, {"topics": [topic]})
        commits = await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in early]})
        assert commits.status_code == 200, commits.text
        rest = [m for m in early if str(m["value"]).startswith(tag)]
        rest += await collect(gw, base, tag, COUNT - len(first) - len(rest), commit=True)
        assert sorted(str(m["value"]) for m in first + rest) == sorted(sent)  # nothing lost, nothing twice
        assert {m["deliveryAttempt"] for m in rest} == {1}
        assert (await gw.http.delete(base)).status_code in (200, 204)
