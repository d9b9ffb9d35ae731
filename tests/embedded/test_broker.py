"""Embedded broker handlers, called directly: every answer path of send, register, heartbeat, get, commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf.message import Message

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.server import CallContext, RemoteFault
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.wire.payload import crc32_checksum, java_string_hash
from gateway.tubemq.wire.pb import BrokerService_pb2 as pb
from gateway.tubemq.wire.rpc import Method
from tests.support.waiting import ManualClock

TOPICS = [TopicSpec("demo", 3), TopicSpec("multi", 2, 2)]
TIMEOUT = 30.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def broker(network: MemoryNetwork, clock: ManualClock) -> AsyncIterator[EmbeddedBroker]:
    b = EmbeddedBroker(
        1, TOPICS, consumer_timeout=TIMEOUT, clock=clock, max_msg_size=1000, start_server=network.start_server
    )
    await b.start()
    yield b
    await b.stop()


async def send(
    b: EmbeddedBroker,
    pid: int = 0,
    data: bytes = b"payload",
    *,
    topic: str = "demo",
    msg_type: str | None = None,
    checksum: int = -1,
    client: str = "producer-1",
    flag: int = 0,
) -> pb.SendMessageResponseB2P:
    request = pb.SendMessageRequestP2B(
        clientId=client, topicName=topic, partitionId=pid, data=data, flag=flag, checkSum=checksum, sentAddr=7
    )
    if msg_type is not None:
        request.msgType = msg_type
    return await b.send_message(request)


def register(
    b: EmbeddedBroker,
    client: str,
    pid: int = 0,
    *,
    group: str = "g",
    topic: str = "demo",
    read_status: int = 0,
    filters: tuple[str, ...] = (),
    curr_offset: int | None = None,
    op: int = 31,
) -> pb.RegisterResponseB2C:
    request = pb.RegisterRequestC2B(
        opType=op,
        clientId=client,
        groupName=group,
        topicName=topic,
        partitionId=pid,
        readStatus=read_status,
        filterCondStr=filters,
    )
    if curr_offset is not None:
        request.currOffset = curr_offset
    return b.consumers.register(request)


def unregister(
    b: EmbeddedBroker, client: str, pid: int = 0, *, read_status: int = 1, group: str = "g"
) -> pb.RegisterResponseB2C:
    return register(b, client, pid, group=group, read_status=read_status, op=32)


def get(
    b: EmbeddedBroker,
    client: str,
    pid: int = 0,
    consumed: bool = False,
    *,
    group: str = "g",
    topic: str = "demo",
) -> pb.GetMessageResponseB2C:
    request = pb.GetMessageRequestC2B(
        clientId=client,
        partitionId=pid,
        groupName=group,
        topicName=topic,
        lastPackConsumed=consumed,
        manualCommitOffset=False,
        escFlowCtrl=False,
    )
    return b.consumers.get_message(request)


def commit(
    b: EmbeddedBroker,
    client: str,
    pid: int = 0,
    consumed: bool | None = None,
    *,
    group: str = "g",
    topic: str = "demo",
) -> pb.CommitOffsetResponseB2C:
    request = pb.CommitOffsetRequestC2B(clientId=client, topicName=topic, partitionId=pid, groupName=group)
    if consumed is not None:
        request.lastPackConsumed = consumed
    return b.consumers.commit(request)


def heartbeat(
    b: EmbeddedBroker, client: str, pids: list[int], *, group: str = "g"
) -> pb.HeartBeatResponseB2C:
    parts = [f"1:127.0.0.1:8123#demo:{pid}" for pid in pids]
    request = pb.HeartBeatRequestC2B(clientId=client, groupName=group, readStatus=0, partitionInfo=parts)
    return b.consumers.heartbeat(request)


def present(message: Message) -> set[str]:
    return {field.name for field, _ in message.ListFields()}


# --- send (13) ----------------------------------------------------------------------------------


async def test_send_answers_like_the_capture(broker: EmbeddedBroker) -> None:
    first = await send(broker, 2, b"abc", msg_type="s-cap")
    second = await send(broker, 0, b"def")
    assert (first.success, first.errCode, first.requireAuth) == (True, 200, False)
    assert first.errMsg == str(first.messageId)
    assert (first.appendOffset, second.appendOffset) == (0, 28)
    assert first.messageId != second.messageId  # not ordered: tests/embedded/test_msgid.py
    assert first.appendTime > 1_600_000_000_000
    assert present(first) == {
        "success", "errCode", "errMsg", "requireAuth", "messageId", "appendTime", "appendOffset"
    }  # fmt: skip
    (stored,) = broker.store("demo").read(2, 0).messages
    assert (stored.msg_type_hash, stored.checksum, stored.sent_addr) == (
        java_string_hash("s-cap"),
        crc32_checksum(b"abc"),
        7,
    )


async def test_send_hashes_the_trimmed_msg_type_and_blank_means_none(broker: EmbeddedBroker) -> None:
    await send(broker, 0, msg_type="  typeA ")
    await send(broker, 0, msg_type="   ")
    await send(broker, 0)
    hashes = [m.msg_type_hash for m in broker.store("demo").read(0, 0).messages]
    assert hashes == [110843975, -1, -1]


@pytest.mark.parametrize(
    ("kwargs", "code", "message"),
    [
        ({"topic": "nope"}, 403, "topicName nope not existed, please check your configure"),
        ({"pid": 3}, 403, "partitionId demo-3 not existed, please check your configure"),
        ({"pid": -1}, 403, "partitionId demo--1 not existed, please check your configure"),
        ({"data": b""}, 400, "data length is zero!"),
        ({"client": "  "}, 400, "Request miss necessary clientId data!"),
        ({"topic": " "}, 400, "Request miss necessary topicName data!"),
        (
            {"data": b"x" * 11241},
            400,
            "data length over max length, allowed max length is 11240, data length is 11241",
        ),
        (
            {"data": b"hello", "checksum": 5},
            403,
            "Checksum msg data failure: 5 of demo not equal to the data's checksum of 907060870",
        ),
    ],
)
async def test_send_refusals(
    broker: EmbeddedBroker, kwargs: dict[str, object], code: int, message: str
) -> None:
    answer = await send(broker, **kwargs)  # type: ignore[arg-type]
    assert (answer.success, answer.errCode, answer.errMsg) == (False, code, message)
    assert present(answer) == {"success", "errCode", "errMsg"}
    assert broker.store("demo").max_offset == 0


async def test_send_limits_and_checksum_that_pass(broker: EmbeddedBroker) -> None:
    assert (await send(broker, data=b"x" * 11240)).success  # max_msg_size 1000 + 10240 slack
    assert (await send(broker, data=b"hello", checksum=907060870)).success


async def test_send_to_a_store_index_the_topic_does_not_have_is_an_internal_error(
    broker: EmbeddedBroker,
) -> None:
    answer = await send(broker, 20001, topic="multi")
    assert (answer.success, answer.errCode) == (False, 500)
    assert answer.errMsg.startswith("Put message failed from 127.0.0.1 Wrong partition value 20001")
    assert (await send(broker, 10001, topic="multi")).appendOffset == 0  # store 1 has its own index
    assert broker.store("multi", 1).max_offset == 28 and broker.store("multi", 0).max_offset == 0


# --- register / unregister (15) --------------------------------------------------------------------


async def test_register_offsets_follow_read_status(broker: EmbeddedBroker) -> None:
    for pid in (0, 1, 2):
        await send(broker, pid)
    latest = register(broker, "c1", 0, read_status=1)
    assert (latest.success, latest.errCode, latest.errMsg) == (True, 200, "OK!")
    assert (latest.currOffset, latest.maxOffset) == (84, 84)
    first = register(broker, "c1", 1, read_status=0, group="other")
    assert (first.currOffset, first.maxOffset) == (0, 84)
    forced = register(broker, "c1", 2, read_status=0, curr_offset=30, group="third")
    assert forced.currOffset == 28


async def test_register_same_client_again_succeeds_and_drops_the_pending_batch(
    broker: EmbeddedBroker,
) -> None:
    await send(broker, 0)
    register(broker, "c1", read_status=0)
    assert len(get(broker, "c1").messages) == 1
    assert register(broker, "c1", read_status=0).currOffset == 0
    assert broker.offsets.pending("g", "demo", 0) == 0


async def test_register_held_by_a_live_consumer_is_410(broker: EmbeddedBroker) -> None:
    register(broker, "c1")
    answer = register(broker, "c2")
    assert (answer.success, answer.errCode, answer.currOffset) == (False, 410, -1)
    assert answer.errMsg == "[Duplicated Register] Partition 1#g:demo:0 has been registered by c1"
    assert present(answer) == {"success", "errCode", "errMsg", "currOffset"}
    assert register(broker, "c2", group="another").success  # other groups are independent


async def test_register_over_a_timed_out_holder_removes_it_but_still_answers_410(
    broker: EmbeddedBroker, clock: ManualClock
) -> None:
    register(broker, "c1")
    clock.advance(TIMEOUT)
    answer = register(broker, "c2")
    assert answer.errCode == 410
    assert answer.errMsg == "[Duplicated Register] Remove Invalid Consumer Register c1#g:demo:0"
    assert register(broker, "c2").success


@pytest.mark.parametrize(
    ("kwargs", "code", "message"),
    [
        ({"topic": "nope"}, 403, "topicName nope not existed, please check your configure"),
        ({"group": ""}, 400, "Request miss necessary groupName data!"),
        ({"op": 33}, 400, "Invalid request:33"),
    ],
)
async def test_register_refusals(
    broker: EmbeddedBroker, kwargs: dict[str, object], code: int, message: str
) -> None:
    answer = register(broker, "c1", **kwargs)  # type: ignore[arg-type]
    assert (answer.success, answer.errCode, answer.errMsg, answer.currOffset) == (False, code, message, -1)


async def test_register_a_partition_index_out_of_range_fails_but_stays_recorded(
    broker: EmbeddedBroker,
) -> None:
    answer = register(broker, "c1", 7)
    assert (answer.success, answer.errCode) == (False, 500)
    assert (
        answer.errMsg
        == "Register broker failure!, exception is Wrong partition value 7,valid partitions in (0,2)"
    )
    assert heartbeat(broker, "c1", [7]).hasPartFailure is False


async def test_unregister_answers_and_offsets(broker: EmbeddedBroker) -> None:
    missing = unregister(broker, "c1")
    assert (missing.errCode, missing.errMsg) == (
        411,
        "UnRegistered Consumer c1, you have to register firstly!",
    )
    for _ in range(2):
        await send(broker, 0)
    register(broker, "c1", read_status=0)
    other = unregister(broker, "c2")
    assert other.errCode == 412
    assert other.errMsg == (
        "[Duplicated Request]Partition g:demo:0 has been consumed by c1;Current consumer c2, broker=127.0.0.1"
    )
    assert len(get(broker, "c1").messages) == 2
    rolled_back = unregister(broker, "c1", read_status=1)
    assert (rolled_back.success, rolled_back.errCode, rolled_back.errMsg) == (True, 200, "OK!")
    assert rolled_back.currOffset == -1 and not rolled_back.HasField("maxOffset")
    assert broker.offsets.committed("g", "demo", 0) == 0
    register(broker, "c1")
    get(broker, "c1")
    assert unregister(broker, "c1", read_status=0).success
    assert broker.offsets.committed("g", "demo", 0) == 56
    assert get(broker, "c1").errCode == 411


# --- heartbeat (16) -----------------------------------------------------------------------------


async def test_heartbeat_reports_failed_partitions(broker: EmbeddedBroker) -> None:
    register(broker, "c1", 0)
    register(broker, "c2", 1)
    answer = heartbeat(broker, "c1", [0, 1, 2])
    assert (answer.success, answer.errCode, answer.errMsg) == (True, 200, "OK!")
    assert answer.hasPartFailure is True
    assert list(answer.failureInfo) == ["412:1:127.0.0.1:8123#demo:1", "411:1:127.0.0.1:8123#demo:2"]
    clean = heartbeat(broker, "c1", [0])
    assert (clean.hasPartFailure, list(clean.failureInfo), clean.requireAuth) == (False, [], False)
    assert present(clean) == {"success", "errCode", "errMsg", "hasPartFailure", "requireAuth"}
    assert heartbeat(broker, "", [0]).errCode == 400


async def test_heartbeat_and_fetch_keep_a_registration_alive(
    broker: EmbeddedBroker, clock: ManualClock
) -> None:
    register(broker, "c1", 0)
    register(broker, "c1", 1)
    for _ in range(3):
        clock.advance(TIMEOUT * 0.6)
        heartbeat(broker, "c1", [0])
        get(broker, "c1", 1)
    assert broker.expire_registrations() == 0
    clock.advance(TIMEOUT)
    assert broker.expire_registrations() == 2
    assert list(heartbeat(broker, "c1", [0]).failureInfo) == ["411:1:127.0.0.1:8123#demo:0"]


async def test_timeout_discards_the_pending_batch(broker: EmbeddedBroker, clock: ManualClock) -> None:
    await send(broker, 0)
    register(broker, "c1", read_status=0)
    assert len(get(broker, "c1").messages) == 1
    clock.advance(TIMEOUT)
    assert get(broker, "c1").errCode == 411  # checked lazily, before any sweep ran
    assert broker.offsets.pending("g", "demo", 0) == 0
    register(broker, "c2", read_status=0)
    assert len(get(broker, "c2").messages) == 1  # delivered again


# --- get (17) -------------------------------------------------------------------------------------


async def test_get_refusals(broker: EmbeddedBroker) -> None:
    answer = get(broker, "c1")
    assert (answer.success, answer.errCode) == (False, 411)
    assert answer.errMsg == "UnRegistered Consumer:c1, you have to register firstly!"
    assert (answer.currOffset, answer.currDataDlt, answer.minLimitTime, answer.escFlowCtrl) == (
        -1,
        -1,
        0,
        False,
    )
    register(broker, "c1")
    taken = get(broker, "c2")
    assert taken.errCode == 412
    assert (
        taken.errMsg
        == "[Duplicated Request] Partition=g:demo:0 of Broker=1 has been consumed by c1;Current consumer c2"
    )
    unknown = get(broker, "c1", topic="nope")
    assert (unknown.errCode, unknown.errMsg) == (
        403,
        "topicName nope not existed, please check your configure",
    )


async def test_get_on_an_empty_store(broker: EmbeddedBroker) -> None:
    register(broker, "c1", read_status=1)
    answer = get(broker, "c1")
    assert (answer.success, answer.errCode, answer.errMsg) == (
        False,
        404,
        "Request offset reached cache maxOffset",
    )
    assert (answer.currOffset, answer.minLimitTime, answer.currDataDlt) == (-1, 0, -1)


async def test_get_at_the_end_answers_no_data_as_captured(broker: EmbeddedBroker) -> None:
    await send(broker, 0)
    register(broker, "c1", read_status=1)
    answer = get(broker, "c1")
    assert (answer.success, answer.errCode, answer.errMsg) == (
        False,
        404,
        "The request offset reached maxOffset!",
    )
    assert (answer.currOffset, answer.minLimitTime, answer.escFlowCtrl, answer.currDataDlt) == (
        -1,
        -1,
        False,
        -1,
    )
    assert present(answer) == {
        "success",
        "errCode",
        "errMsg",
        "currOffset",
        "minLimitTime",
        "escFlowCtrl",
        "currDataDlt",
    }


async def test_get_skips_siblings_and_the_commit_moves_past_them(broker: EmbeddedBroker) -> None:
    register(broker, "c1", 0, read_status=1)
    for pid in (2, 0, 1):
        await send(broker, pid, b"m" * 55, flag=1)
    answer = get(broker, "c1", 0)
    assert (answer.success, answer.errCode, answer.errMsg) == (True, 200, "OK!")
    (message,) = answer.messages
    assert (message.payLoadData, message.flag, message.checkSum) == (b"m" * 55, 1, crc32_checksum(b"m" * 55))
    assert present(message) == {"messageId", "checkSum", "payLoadData", "flag"}
    assert (answer.currOffset, answer.maxOffset, answer.currDataDlt, answer.minLimitTime) == (0, 84, 107, 0)
    assert (answer.requireSlow, answer.escFlowCtrl) == (False, False)
    done = commit(broker, "c1", 0, True)
    assert (done.success, done.errCode, done.errMsg, done.currOffset, done.maxOffset) == (
        True,
        200,
        "OK!",
        84,
        84,
    )


async def test_last_pack_consumed_false_redelivers_and_true_moves_on(broker: EmbeddedBroker) -> None:
    register(broker, "c1", read_status=0)
    await send(broker, 0, b"one")
    assert [m.payLoadData for m in get(broker, "c1").messages] == [b"one"]
    assert [m.payLoadData for m in get(broker, "c1", consumed=False).messages] == [b"one"]
    await send(broker, 0, b"two")
    assert [m.payLoadData for m in get(broker, "c1", consumed=True).messages] == [b"two"]
    assert get(broker, "c1", consumed=True).errMsg == "The request offset reached maxOffset!"
    assert broker.offsets.committed("g", "demo", 0) == 56


async def test_only_siblings_ahead_answers_404_and_commits_the_skip(broker: EmbeddedBroker) -> None:
    register(broker, "c1", 0, read_status=0)
    await send(broker, 1)
    await send(broker, 2)
    answer = get(broker, "c1", 0)
    assert (answer.errCode, answer.errMsg, answer.currOffset) == (404, "Can't found Message by index!", -1)
    assert answer.minLimitTime == 2 * (52 + 7)  # Java puts its whole data size here
    assert broker.offsets.committed("g", "demo", 0) == 56


async def test_filters_from_the_registration_select_message_types(broker: EmbeddedBroker) -> None:
    register(broker, "c1", 0, read_status=0, filters=(" order ", "", "refund"))
    for msg_type in ("order", "other", None, "refund"):
        await send(broker, 0, (msg_type or "none").encode(), msg_type=msg_type)
    answer = get(broker, "c1", 0)
    assert [m.payLoadData for m in answer.messages] == [b"order", b"refund"]
    assert commit(broker, "c1", 0).currOffset == 112


async def test_topic_with_two_stores_keeps_separate_indexes(broker: EmbeddedBroker) -> None:
    await send(broker, 1, b"a", topic="multi")
    await send(broker, 10001, b"b", topic="multi")
    register(broker, "c1", 10001, topic="multi", read_status=0)
    answer = get(broker, "c1", 10001, topic="multi")
    assert [m.payLoadData for m in answer.messages] == [b"b"]
    assert (answer.currOffset, answer.maxOffset) == (0, 28)


async def test_fetch_of_a_partition_registered_out_of_range_is_500(broker: EmbeddedBroker) -> None:
    register(broker, "c1", 7)
    answer = get(broker, "c1", 7)
    assert (answer.errCode, answer.errMsg) == (500, "Get the store of topic demo in partition 7 failure!")


# --- commit (18) -----------------------------------------------------------------------------------


async def test_commit_refusals(broker: EmbeddedBroker) -> None:
    missing = commit(broker, "c1")
    assert (missing.success, missing.errCode, missing.currOffset) == (False, 401, -1)
    assert missing.errMsg == "The partition not registered by consumers"
    register(broker, "c1")
    other = commit(broker, "c2")
    assert (other.errCode, other.errMsg) == (401, "The partition has been registered by other consumer: c1")
    bad = commit(broker, "c1", 5)
    assert (bad.errCode, bad.errMsg) == (403, "partitionId demo-5 not existed, please check your configure")


async def test_commit_false_rolls_back_and_absent_means_true(broker: EmbeddedBroker) -> None:
    register(broker, "c1", read_status=0)
    await send(broker, 0)
    get(broker, "c1")
    assert commit(broker, "c1", 0, False).currOffset == 0
    get(broker, "c1")
    assert commit(broker, "c1", 0).currOffset == 28


# --- dispatch, lifecycle -------------------------------------------------------------------------------


def ctx() -> CallContext:
    return CallContext(
        peer=NodeAddress("127.0.0.1", 1),
        serial=1,
        service=2,
        protocol_version=3,
        timeout=10.0,
        received_at=0.0,
        tls=False,
    )


async def test_handle_dispatches_by_method_and_refuses_others(broker: EmbeddedBroker) -> None:
    request = pb.SendMessageRequestP2B(
        clientId="p", topicName="demo", partitionId=0, data=b"x", flag=0, checkSum=-1, sentAddr=0
    )
    answer = await broker.handle(Method.SEND_MESSAGE, request, ctx())
    assert isinstance(answer, pb.SendMessageResponseB2P) and answer.success
    with pytest.raises(RemoteFault) as fault:
        await broker.handle(Method.PRODUCER_REGISTER, request, ctx())
    assert fault.value.exception_name == "java.lang.Exception"


async def test_stopped_broker_answers_503(network: MemoryNetwork, clock: ManualClock) -> None:
    b = EmbeddedBroker(1, TOPICS, clock=clock, start_server=network.start_server)
    await b.start()
    consumers = b.consumers
    await b.stop()
    assert not b.is_serving
    assert (await send(b)).errMsg == "Write StoreService temporary unavailable!"
    assert ((await send(b)).errCode, get(b, "c").errCode, register(b, "c").errCode) == (503, 503, 503)
    assert get(b, "c").errMsg == "Read StoreService temporary unavailable!"
    assert (
        consumers.commit(
            pb.CommitOffsetRequestC2B(clientId="c", topicName="demo", partitionId=0, groupName="g")
        ).errCode
        == 503
    )
    assert heartbeat(b, "c", []).errCode == 503


async def test_memory_broker_keeps_messages_across_restart_on_the_same_port(
    network: MemoryNetwork, clock: ManualClock
) -> None:
    b = EmbeddedBroker(1, TOPICS, clock=clock, start_server=network.start_server)
    await b.start()
    port = b.address.port
    await send(b, 0, b"kept")
    register(b, "c1", read_status=0)
    await b.stop()
    await b.start()
    try:
        assert b.address.port == port
        assert get(b, "c1").errCode == 411  # registrations do not survive
        register(b, "c1", read_status=0)
        assert [m.payLoadData for m in get(b, "c1").messages] == [b"kept"]
    finally:
        await b.stop()


async def test_file_broker_restart_keeps_every_acknowledged_message_and_committed_offsets(
    network: MemoryNetwork,
    tmp_path: Path,
) -> None:
    b = EmbeddedBroker(1, TOPICS, data_dir=tmp_path, start_server=network.start_server)
    await b.start()
    acks = [await send(b, i % 3, f"m{i}".encode()) for i in range(6)]
    acks.append(await send(b, 10000, b"s1", topic="multi"))
    register(b, "c1", 0, read_status=0)
    get(b, "c1", 0)
    commit(b, "c1", 0, True)
    await b.stop()
    assert (tmp_path / "demo" / "store-0.log").exists() and (tmp_path / "offsets.json").exists()
    again = EmbeddedBroker(1, TOPICS, data_dir=tmp_path, start_server=network.start_server)
    await again.start()
    try:
        store = again.store("demo")
        got = {m.message_id: m.data for pid in range(3) for m in store.read(pid, 0).messages}
        assert got == {a.messageId: f"m{i}".encode() for i, a in enumerate(acks[:6])}
        assert again.store("multi", 1).read(10000, 0).messages[0].message_id == acks[6].messageId
        assert register(again, "c1", 0, read_status=0).currOffset == 168  # committed offset is back
        assert (await send(again, 0)).appendOffset == 168
    finally:
        await again.stop()


async def test_constructor_checks_and_repr(network: MemoryNetwork, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        EmbeddedBroker(1, [TopicSpec("demo"), TopicSpec("demo")], start_server=network.start_server)
    with pytest.raises(ValueError, match="consumer_timeout"):
        EmbeddedBroker(1, TOPICS, consumer_timeout=0, start_server=network.start_server)
    b = EmbeddedBroker(3, TOPICS, data_dir=tmp_path, start_server=network.start_server)
    with pytest.raises(RuntimeError, match="not started"):
        _ = b.address
    assert repr(b) == f"<EmbeddedBroker 3 127.0.0.1:? stopped topics=2 {tmp_path}>"
    async with b:
        assert repr(b) == f"<EmbeddedBroker 3 127.0.0.1:{b.address.port} serving topics=2 {tmp_path}>"
        with pytest.raises(RuntimeError, match="already started"):
            await b.start()


async def test_sweeper_drops_timed_out_registrations_in_the_background(network: MemoryNetwork) -> None:
    async with EmbeddedBroker(1, TOPICS, consumer_timeout=0.05, start_server=network.start_server) as b:
        register(b, "c1")
        for _ in range(200):
            if not b.consumers.registrations:
                break
            await asyncio.sleep(0.01)
        assert not b.consumers.registrations
        assert register(b, "c2").success  # no stale holder left to refuse it
