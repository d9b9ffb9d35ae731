"""ConsumerService against the embedded cluster over loopback: group splitting, redelivery after delete,
expiry and rollback, start offsets, filters, byte budgets, auto-commit and stream cursors."""

from __future__ import annotations

import pytest

from gateway.service.consumers import ConsumerService, InstanceSpec, Owner
from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import Gone, InvalidInput, NotFound, Unavailable
from gateway.service.instance_id import decode_instance_id, new_instance_id
from gateway.service.peers import PeerPolicy
from tests.support.consumer_support import Env, bodies, values
from tests.support.waiting import ManualClock, eventually


async def split_evenly(service: ConsumerService, group: str, ids: list[str], partitions: int = 8) -> None:
    """Poll every instance until the group's partitions are spread evenly and nothing is in flight."""

    async def check() -> bool:
        for instance_id in ids:
            await service.poll(group, instance_id, timeout=0.05)
        held = [service.describe(group, i).partitions for i in ids]
        counts = [len(h) for h in held]
        return sum(counts) == partitions and max(counts) - min(counts) <= 1

    await eventually(check, what="an even split")


async def test_two_instances_split_partitions_and_receive_everything_once(env: Env) -> None:
    service = await env.service()
    a = await service.create("g-split", InstanceSpec({"demo": None}))
    b = await service.create("g-split", InstanceSpec({"demo": None}))
    ids = [a.instance_id, b.instance_id]
    await split_evenly(service, "g-split", ids)
    held = [{p.partition_key for p in service.describe("g-split", i).partitions} for i in ids]
    assert not held[0] & held[1]

    sent = bodies("split", 200)
    await env.publish("demo", sent)
    received: dict[str, list[bytes]] = {i: [] for i in ids}

    async def drain() -> bool:
        for instance_id in ids:
            got = await service.poll("g-split", instance_id, max_messages=30, timeout=0.05)
            received[instance_id] += values(got)
            result = await service.commit("g-split", instance_id, [m.token for m in got])
            assert result.committed == len(got) and not result.stale
        return sum(len(v) for v in received.values()) >= len(sent)

    await eventually(drain, what="every message")
    everything = received[ids[0]] + received[ids[1]]
    assert sorted(everything) == sorted(sent)  # each message exactly once
    assert received[ids[0]] and received[ids[1]]


@pytest.mark.parametrize("leave", ["delete", "expire"])
async def test_other_instance_takes_over_and_gets_uncommitted_messages_again(env: Env, leave: str) -> None:
    service = await env.service(lease=1.0 if leave == "expire" else 300.0)
    group = f"g-take-{leave}"
    a = (await service.create(group, InstanceSpec({"demo": None}))).instance_id
    b = (await service.create(group, InstanceSpec({"demo": None}))).instance_id
    await split_evenly(service, group, [a, b])
    sent = bodies(leave, 80)
    await env.publish("demo", sent)

    uncommitted: list[bytes] = []

    async def b_got_some() -> bool:
        uncommitted.extend(values(await service.poll(group, b, timeout=0.05)))
        return bool(uncommitted)

    await eventually(b_got_some, what="a delivery to b")
    if leave == "delete":
        await service.delete(group, b)
    else:
        service.lease = 0.5  # a keeps polling below; b stays idle from now on

    received_a: list[bytes] = []

    async def a_has_everything() -> bool:
        got = await service.poll(group, a, timeout=0.05)
        received_a.extend(values(got))
        await service.commit(group, a, None)
        return set(received_a) >= set(sent)

    await eventually(a_has_everything, what="a receiving b's share")
    assert set(uncommitted) <= set(received_a)
    assert {p.partition_key for p in service.describe(group, a).partitions} == {
        f"1:demo:{i}" for i in range(8)
    }
    with pytest.raises(Gone, match="create a new instance") as gone:
        await service.poll(group, b, timeout=0)
    assert ("expired" if leave == "expire" else "deleted") in gone.value.message


async def test_offsets_start_where_requested(env: Env) -> None:
    results = await env.publish("solo", bodies("off", 10))
    key = results[0].partition_key
    service = await env.service()
    spec = InstanceSpec({"solo": None}, start_position="offsets", offsets={key: results[4].append_offset})
    instance = await service.create("g-offsets", spec)
    got = await service.poll("g-offsets", instance.instance_id, timeout=2.0)
    assert values(got) == bodies("off", 10)[4:]
    assert got[0].offset == results[4].append_offset
    assert [m.offset for m in got] == [r.append_offset for r in results[4:]]


async def test_stream_id_filter_delivers_only_matching_messages(env: Env) -> None:
    await env.publish("demo", bodies("a", 12), stream_id="alpha")
    await env.publish("demo", bodies("b", 12), stream_id="beta")
    await env.publish("demo", bodies("a2", 4), stream_id="alpha")
    service = await env.service()
    spec = InstanceSpec({"demo": ["alpha"]}, start_position="earliest", auto_commit=True)
    instance = (await service.create("g-filter", spec)).instance_id
    got: list[DeliveredMessage] = []

    async def all_alpha() -> bool:
        got.extend(await service.poll("g-filter", instance, timeout=0.05))
        return len(got) >= 16

    await eventually(all_alpha, what="every alpha message")
    got.extend(await service.poll("g-filter", instance, timeout=0.3))
    assert sorted(values(got)) == sorted(bodies("a", 12) + bodies("a2", 4))
    assert {m.message.stream_id for m in got} == {"alpha"}


async def test_byte_budget_buffers_the_rest_and_confirms_the_batch_when_all_is_committed(env: Env) -> None:
    sent = bodies("budget", 5, size=100)
    await env.publish("solo", sent)
    service = await env.service(prefetch_bytes=0)  # a confirmed batch leaves its partition idle
    instance = (
        await service.create("g-budget", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id

    first = await service.poll("g-budget", instance, max_bytes=250, timeout=2.0)
    assert values(first) == sent[:2]
    state = service.describe("g-budget", instance)
    assert state.buffered == 3 and state.pending == 2
    await service.commit("g-budget", instance, [m.token for m in first])
    assert service.describe("g-budget", instance).partitions[0].in_use  # 3 not delivered yet

    second = await service.poll("g-budget", instance, max_bytes=250, max_messages=1, timeout=0)
    third = await service.poll("g-budget", instance, max_bytes=250, timeout=0)
    assert values(second) == sent[2:3] and values(third) == sent[3:]
    result = await service.commit("g-budget", instance, None)
    assert result.committed == 3 and result.pending == 0
    assert not service.describe("g-budget", instance).partitions[0].in_use

    big = b"x" * 1000
    await env.publish("solo", [big, b"after"])
    alone = await service.poll("g-budget", instance, max_bytes=100, timeout=2.0)
    assert values(alone) == [big]
    await service.commit("g-budget", instance, None)
    assert values(await service.poll("g-budget", instance, max_bytes=100, timeout=2.0)) == [b"after"]


async def test_committing_everything_delivered_leaves_the_undelivered_rest_held(env: Env) -> None:
    sent = bodies("all", 6, size=10)
    await env.publish("solo", sent)
    service = await env.service(prefetch_bytes=0)  # a confirmed batch leaves its partition idle
    instance = (
        await service.create("g-all", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await service.poll("g-all", instance, max_messages=4, timeout=2.0)
    assert values(first) == sent[:4]
    result = await service.commit("g-all", instance, None)
    assert (result.committed, result.rolled_back, result.stale, result.pending) == (4, 0, [], 0)
    assert service.describe("g-all", instance).partitions[0].in_use  # 2 not delivered yet
    again = await service.commit("g-all", instance, [m.token for m in first])
    assert again.committed == 0 and again.stale == [m.token for m in first]
    rest = await service.poll("g-all", instance, timeout=0)
    assert values(rest) == sent[4:]
    result = await service.commit("g-all", instance, None)
    assert (result.committed, result.stale, result.pending) == (2, [], 0)
    assert not service.describe("g-all", instance).partitions[0].in_use


async def test_committing_everything_after_the_core_gave_the_batch_up_reports_it_stale(env: Env) -> None:
    sent = bodies("gave-up", 3, size=10)
    await env.publish("solo", sent)
    service = await env.service()
    instance_id = (
        await service.create("g-gave-up", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await service.poll("g-gave-up", instance_id, timeout=2.0)
    assert values(first) == sent
    instance = service.instance("g-gave-up", instance_id)
    # The core releases the batch (as a rebalance racing the commit would) before the instance hears of it.
    for context in list(instance._state.batches):
        await instance.consumer.confirm(context, False)
    result = await service.commit("g-gave-up", instance_id, None)
    assert (result.committed, result.stale, result.pending) == (0, [m.token for m in first], 0)
    assert values(await service.poll("g-gave-up", instance_id, timeout=2.0)) == sent  # they come again


async def test_rollback_redelivers_and_old_tokens_become_stale(env: Env) -> None:
    sent = bodies("rb", 4)
    await env.publish("solo", sent)
    service = await env.service()
    instance = (
        await service.create("g-rb", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await service.poll("g-rb", instance, timeout=2.0)
    assert values(first) == sent
    result = await service.commit("g-rb", instance, [first[0].token], consumed=False)
    assert result.rolled_back == 4 and result.pending == 0
    again = await service.poll("g-rb", instance, timeout=2.0)
    assert values(again) == sent
    assert {m.token for m in again}.isdisjoint(m.token for m in first)
    stale = await service.commit("g-rb", instance, [first[1].token, again[1].token])
    assert stale.stale == [first[1].token] and stale.committed == 1
    with pytest.raises(InvalidInput) as bad:
        await service.commit("g-rb", instance, ["x1"])
    assert bad.value.field == "tokens[0]"


async def test_commit_timeout_rolls_back_forgotten_messages(env: Env) -> None:
    await env.publish("solo", bodies("late", 3))
    clock = ManualClock()
    service = await env.service(commit_timeout=0.3, clock=clock)
    instance = (
        await service.create("g-late", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await service.poll("g-late", instance, timeout=2.0)
    assert len(first) == 3
    clock.advance(0.3)
    assert await service.poll("g-late", instance, timeout=0) == []  # not yet past the commit timeout
    clock.advance(0.1)
    again = await service.poll("g-late", instance, timeout=2.0)
    assert values(again) == values(first)
    result = await service.commit("g-late", instance, [m.token for m in first])
    assert len(result.stale) == 3 and result.pending == 3


async def test_auto_commit_counts_delivered_messages_at_the_next_poll(env: Env) -> None:
    await env.publish("solo", bodies("auto", 5))
    service = await env.service()
    spec = InstanceSpec({"solo": None}, start_position="earliest", auto_commit=True)
    first = (await service.create("g-auto", spec)).instance_id
    assert len(await service.poll("g-auto", first, timeout=2.0)) == 5
    assert await service.poll("g-auto", first, timeout=0.1) == []
    await service.delete("g-auto", first)
    second = (await service.create("g-auto", spec)).instance_id
    assert await service.poll("g-auto", second, timeout=0.3) == []


async def test_first_poll_waits_for_the_assignment(env: Env) -> None:
    await env.publish("demo", bodies("first", 16))
    service = await env.service()
    spec = InstanceSpec({"demo": None}, start_position="earliest")
    instance = (await service.create("g-first", spec)).instance_id
    assert await service.poll("g-first", instance, timeout=0)


async def test_stream_cursor_resends_pending_after_the_resume_token(env: Env) -> None:
    await env.publish("solo", bodies("sse", 3))
    service = await env.service()
    instance = (
        await service.create("g-cur", InstanceSpec({"solo": None}, start_position="earliest"))
    ).instance_id
    first = await service.poll("g-cur", instance, timeout=2.0)
    assert len(first) == 3
    cursor = service.open_stream("g-cur", instance, first[0].token)
    assert [m.token for m in await cursor.next(10, 1000, 0)] == [first[1].token, first[2].token]
    await service.commit("g-cur", instance, [first[1].token])
    newer = service.open_stream("g-cur", instance, first[0].token)
    assert cursor.superseded and not newer.superseded
    assert [m.token for m in await newer.next(10, 1000, 0)] == [first[2].token]
    from_start = service.open_stream("g-cur", instance, None)
    assert [m.token for m in await from_start.next(10, 1000, 0)] == [first[0].token, first[2].token]
    with pytest.raises(InvalidInput) as bad:
        service.open_stream("g-cur", instance, "abc")
    assert bad.value.field == "resume_after"


async def test_ids_and_limits(env: Env) -> None:
    peers = PeerPolicy.build("http://127.0.0.1:9", ["10.0.0.0/8"], [8080])
    service = await env.service(max_instances=1, peers=peers)
    instance = (await service.create("g-ids", InstanceSpec({"solo": None}))).instance_id
    assert service.locate("g-ids", instance) is None
    with pytest.raises(NotFound):
        service.locate("g-other", instance)
    with pytest.raises(NotFound):
        service.locate("g-ids", instance[:-2])
    remote = new_instance_id("g-ids", "http://10.9.9.9:8080")
    assert service.locate("g-ids", remote) == Owner("http://10.9.9.9:8080")
    for refused in ("http://10.9.9.9:8081", "https://10.9.9.9:8080", "http://192.168.9.9:8080"):
        with pytest.raises(Gone, match=r"consumers\.forward_allow"):
            service.locate("g-ids", new_instance_id("g-ids", refused))
    with pytest.raises(Unavailable, match="maximum of 1"):
        await service.create("g-ids", InstanceSpec({"solo": None}))
    with pytest.raises(InvalidInput) as bad:
        await service.poll("g-ids", instance, max_messages=0)
    assert bad.value.field == "max_messages"
    await service.delete("g-ids", instance)
    with pytest.raises(Gone, match="deleted"):
        await service.commit("g-ids", instance, None)


async def test_worker_ids_name_the_worker(env: Env) -> None:
    """In a replica of worker processes, an id names its worker; a sibling's id is located as such, and an
    id naming a worker the replica does not run (or none, or one in a single-process replica) is gone."""
    secret = b"s" * 32
    service = await env.service(worker=1, workers=3, id_secret=secret)
    instance = (await service.create("g-w", InstanceSpec({"solo": None}))).instance_id
    assert decode_instance_id("g-w", instance, secret).worker == 1
    assert service.locate("g-w", instance) is None
    own = service.advertised_url
    assert service.locate("g-w", new_instance_id("g-w", own, secret, 2)) == Owner(own, 2)
    with pytest.raises(Gone, match="worker 0 of this gateway"):
        service.instance("g-w", new_instance_id("g-w", own, secret, 0))
    for stale in (new_instance_id("g-w", own, secret, 3), new_instance_id("g-w", own, secret)):
        with pytest.raises(Gone, match="worker count"):
            service.locate("g-w", stale)
    single = await env.service(id_secret=secret)
    with pytest.raises(Gone, match="worker count"):
        single.locate("g-w", instance)
    with pytest.raises(ValueError, match="not one of the 3 workers"):
        await env.service(worker=3, workers=3)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (InstanceSpec({}), "topics"),
        (InstanceSpec({"solo": None}, start_position="middle"), "startPosition"),
        (InstanceSpec({"solo": None}, offsets={"1:solo:0": 0}), "offsets"),
        (InstanceSpec({"solo": None}, start_position="offsets"), "offsets"),
        (InstanceSpec({"solo": None}, start_position="offsets", offsets={"nonsense": 1}), "offsets"),
        (InstanceSpec({"solo": None}, start_position="offsets", offsets={"1:demo:0": 1}), "offsets"),
        (InstanceSpec({"bad,topic": None}), "topics[0]"),
        (InstanceSpec({"solo": ["a,b"]}), "filters"),
        (InstanceSpec({"solo": None}, max_bytes=0), "maxBytes"),
    ],
)
async def test_invalid_specs_name_the_field(env: Env, spec: InstanceSpec, field: str) -> None:
    service = await env.service()
    with pytest.raises(InvalidInput) as bad:
        await service.create("g-bad", spec)
    assert bad.value.field == field
    assert service.instance_count == 0


async def test_unknown_topic_is_not_found(env: Env) -> None:
    service = await env.service()
    with pytest.raises(NotFound) as missing:
        await service.create("g-missing", InstanceSpec({"nosuchtopic": None}))
    assert missing.value.field == "topics"
