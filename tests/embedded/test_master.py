"""The embedded master: handler answers (validation, 411, standby, V2) and real loopback flows."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.server import CallContext, RemoteFault
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import StandbyException
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.wire.meta import parse_subscribe_info
from gateway.tubemq.wire.pb import MasterService_pb2 as pb
from gateway.tubemq.wire.rpc import Method
from tests.support.files import CAPTURE_FILE
from tests.support.waiting import ManualClock, eventually

CAPTURE = CAPTURE_FILE
STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"


@dataclass
class StaticBroker:
    """A broker as the master sees it (id, address, topics, serving), without a server behind it.

    Like ``EmbeddedBroker``, it has no address while it is not serving.
    """

    broker_id: int
    listen: NodeAddress
    topics: Mapping[str, TopicSpec] = field(default_factory=dict)
    is_serving: bool = True

    @property
    def address(self) -> NodeAddress:
        if not self.is_serving:
            raise RuntimeError(f"broker {self.broker_id} is not started")
        return self.listen


def brokers(*specs: TopicSpec, count: int = 1) -> list[StaticBroker]:
    return [
        StaticBroker(i, NodeAddress("127.0.0.1", 8122 + i), {s.name: s for s in specs})
        for i in range(1, count + 1)
    ]


CTX = CallContext(
    peer=NodeAddress("127.0.0.1", 50000),
    serial=1,
    service=1,
    protocol_version=3,
    timeout=10.0,
    received_at=0.0,
    tls=False,
)


async def call(master: EmbeddedMaster, method: Method, request: Message) -> Any:
    return await master.handle(int(method), request, CTX)


def p_register(client: str = "p1", topics: tuple[str, ...] = (), **kw: Any) -> pb.RegisterRequestP2M:
    return pb.RegisterRequestP2M(
        clientId=client, topicList=topics, brokerCheckSum=-1, hostName="10.0.0.1", **kw
    )


def p_heartbeat(
    client: str = "p1", topics: tuple[str, ...] = ("demo",), checksum: int = -1
) -> pb.HeartRequestP2M:
    return pb.HeartRequestP2M(
        clientId=client,
        brokerCheckSum=checksum,
        hostName="10.0.0.1",
        topicList=topics,
        appdConfig=pb.ApprovedClientConfig(configId=-2),
    )


def c_register(client: str = "c1", group: str = "g", topics: tuple[str, ...] = ("demo",), **kw: Any) -> Any:
    return pb.RegisterRequestC2M(
        clientId=client, groupName=group, hostName="10.0.0.1", topicList=topics, **kw
    )


# --- producers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (p_register(client="  "), "Request miss necessary clientId data!"),
        (p_register(client="x" * 1025), "clientId's length over max value, allowed max length is 1024"),
        (
            pb.RegisterRequestP2M(clientId="p", brokerCheckSum=-1, hostName="h" * 257),
            "hostName's length over max value, allowed max length is 256",
        ),
        (
            p_register(topics=tuple(f"t{i}" for i in range(1025))),
            "Booked topic's count over max value, required max count is 1024",
        ),
        (
            p_register(topics=("__offset_history__",)),
            "System Topic __offset_history__ does not allow client produce data!",
        ),
    ],
)
async def test_producer_register_rejects_bad_fields(
    network: MemoryNetwork, request_: pb.RegisterRequestP2M, message: str
) -> None:
    master = EmbeddedMaster(brokers(TopicSpec("demo", 3)), start_server=network.start_server)
    answer = await call(master, Method.PRODUCER_REGISTER, request_)
    assert (answer.success, answer.errCode, answer.errMsg, answer.brokerCheckSum) == (False, 400, message, -1)
    assert not answer.brokerInfos and not answer.HasField("authorizedInfo")


async def test_producer_register_heartbeat_close_and_expiry(network: MemoryNetwork) -> None:
    clock = ManualClock()
    nodes = brokers(TopicSpec("demo", 3), TopicSpec("pub_off", 2, accept_publish=False), count=2)
    nodes[1].listen = NodeAddress("10.0.0.2", 9123)
    master = EmbeddedMaster(nodes, producer_timeout=5.0, clock=clock, start_server=network.start_server)
    answer = await call(
        master, Method.PRODUCER_REGISTER, p_register(appdConfig=pb.ApprovedClientConfig(configId=-2))
    )
    assert (answer.success, answer.errCode, answer.errMsg) == (True, 200, "OK!")
    assert list(answer.brokerInfos) == ["1:127.0.0.1: ", "2:10.0.0.2:9123"]
    assert answer.authorizedInfo.visitAuthorizedToken == master.visit_token > 0
    assert answer.appdConfig.configId == -2 and not answer.appdConfig.HasField("maxMsgSize")
    checksum = answer.brokerCheckSum
    assert checksum == master.broker_checksum > 0

    beat = await call(
        master,
        Method.PRODUCER_HEARTBEAT,
        p_heartbeat(topics=("demo", "pub_off", "nope", " "), checksum=checksum),
    )
    assert (beat.success, beat.errCode, beat.brokerCheckSum) == (True, 200, checksum)
    assert list(beat.topicInfos) == ["demo#1:3:1,2:3:1#"] and not beat.brokerInfos
    nodes[0].is_serving = False
    beat = await call(master, Method.PRODUCER_HEARTBEAT, p_heartbeat(checksum=checksum))
    assert beat.brokerCheckSum > checksum and list(beat.brokerInfos) == ["1:127.0.0.1: ", "2:10.0.0.2:9123"]
    assert list(beat.topicInfos) == ["demo#2:3:1#"]

    clock.advance(6)
    expired = await call(master, Method.PRODUCER_HEARTBEAT, p_heartbeat())
    assert (expired.success, expired.errCode, expired.brokerCheckSum) == (False, 411, -1)
    assert expired.errMsg == "Invalid node id:p1, you have to append node first!"
    await call(master, Method.PRODUCER_REGISTER, p_register())
    closed = await call(master, Method.PRODUCER_CLOSE, pb.CloseRequestP2M(clientId="p1"))
    assert (closed.success, closed.errCode, closed.errMsg) == (True, 200, "OK!")
    assert (await call(master, Method.PRODUCER_HEARTBEAT, p_heartbeat())).errCode == 411


async def test_approved_config_carries_the_max_size_when_ids_differ(network: MemoryNetwork) -> None:
    master = EmbeddedMaster(brokers(TopicSpec("demo")), start_server=network.start_server)
    plain = await call(master, Method.PRODUCER_REGISTER, p_register())  # no appdConfig: the id held reads 0
    assert (plain.appdConfig.configId, plain.appdConfig.maxMsgSize) == (-2, 1048576)
    custom = EmbeddedMaster(
        brokers(TopicSpec("demo")),
        max_msg_size=2048,
        clock_ms=lambda: 1_700_000_000_000,
        start_server=network.start_server,
    )
    held = pb.ApprovedClientConfig(configId=-2)
    answer = await call(custom, Method.PRODUCER_REGISTER, p_register(appdConfig=held))
    assert (answer.appdConfig.configId, answer.appdConfig.maxMsgSize) == (1_700_000_000_000, 2048)
    held.configId = answer.appdConfig.configId
    again = await call(custom, Method.PRODUCER_REGISTER, p_register(appdConfig=held))
    assert not again.appdConfig.HasField("maxMsgSize")


# --- consumers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (c_register(topics=()), 400, "Request miss necessary subscribed topicList data!"),
        (c_register(topics=(" ",)), 400, "Request subscribed topicList data must not Blank!"),
        (c_register(topics=("demo", "nope")), 431, "Requested topic [[nope]] not deployed!"),
        (c_register(group=""), 400, "Request miss necessary groupName data!"),
        (c_register(requireBound=True, totalCount=1), 400, "[Parameter error] blank value of sessionKey!"),
        (
            c_register(requireBound=True, sessionKey="s"),
            400,
            "[Parameter error] totalSourceCount must over zero!",
        ),
        (
            c_register(requireBound=True, sessionKey="s", totalCount=1, requiredPartition="1:demo:0"),
            400,
            "[Parameter error] unformatted Partition-Offset value : 1:demo:0 "
            "must be aa:bbb:ccc=val1,ddd:eee:ff=val2",
        ),
        (
            c_register(requireBound=True, sessionKey="s", totalCount=1, requiredPartition="1:other:0=5"),
            400,
            "[Parameter error] wrong offset reset for unsubscribed topic: reset item is 1:other:0=5, "
            "request topicList are [demo]",
        ),
        (
            c_register(requireBound=True, sessionKey="s", totalCount=1, requiredPartition="1:demo:0=x"),
            400,
            "[Parameter error] required long type value of 1:demo:0=x' Offset!",
        ),
    ],
)
async def test_consumer_register_rejects_bad_fields(
    network: MemoryNetwork, request_: pb.RegisterRequestC2M, code: int, message: str
) -> None:
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 3), TopicSpec("other")), start_server=network.start_server
    )
    answer = await call(master, Method.CONSUMER_REGISTER, request_)
    assert (answer.success, answer.errCode, answer.errMsg) == (False, code, message)
    assert not master.consumers.groups


@pytest.mark.parametrize(
    ("second", "code", "message"),
    [
        (
            c_register("c2", requireBound=True, sessionKey="s", totalCount=2),
            424,
            "[Inconsistency subscribe] c2 using bound subscribe is inconsistency with other consumers using "
            "unbound subscribe in the group",
        ),
        (
            c_register("c2", topics=("demo", "other")),
            425,
            "[Inconsistency subscribe] c2 subscribed topics [demo, other] is inconsistency with other "
            "consumers in the group, existedTopics: [demo]",
        ),
        (
            c_register("c2", topicCondition=["demo#a,b"]),
            426,
            "[Inconsistency subscribe] c2 subscribe with filter condition {demo=[a, b]} is inconsistency "
            "with other consumers in the group: topic without conditions",
        ),
    ],
)
async def test_group_members_must_agree(
    network: MemoryNetwork, second: pb.RegisterRequestC2M, code: int, message: str
) -> None:
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 3), TopicSpec("other")), start_server=network.start_server
    )
    assert (await call(master, Method.CONSUMER_REGISTER, c_register("c1"))).success
    answer = await call(master, Method.CONSUMER_REGISTER, second)
    assert (answer.success, answer.errCode, answer.errMsg) == (False, code, message)
    assert list(master.consumers.groups["g"].consumers) == ["c1"]


@pytest.mark.parametrize(
    ("changes", "code", "text"),
    [
        (
            {"sessionKey": "other"},
            427,
            "'s sessionKey is inconsistency with other consumers in the group, "
            "required is s1, request is other",
        ),
        (
            {"selectBig": False},
            428,
            "'s isSelectBig is inconsistency with other consumers in the group, "
            "required is true, request is false",
        ),
        (
            {"totalCount": 3},
            429,
            "'s sourceCount is inconsistency with other consumers in the group, required is 2, request is 3",
        ),
    ],
)
async def test_bound_members_must_agree(
    network: MemoryNetwork, changes: dict[str, Any], code: int, text: str
) -> None:
    master = EmbeddedMaster(brokers(TopicSpec("demo", 3)), start_server=network.start_server)
    bound = {"requireBound": True, "sessionKey": "s1", "totalCount": 2}
    assert (await call(master, Method.CONSUMER_REGISTER, c_register("c1", **bound))).success
    answer = await call(master, Method.CONSUMER_REGISTER, c_register("c2", **(bound | changes)))
    assert (answer.errCode, answer.errMsg) == (code, "[Inconsistency subscribe] c2" + text)


async def test_consumer_heartbeat_of_unknown_group_or_consumer_gets_411(network: MemoryNetwork) -> None:
    clock = ManualClock()
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 3)), consumer_timeout=5.0, clock=clock, start_server=network.start_server
    )
    beat = pb.HeartRequestC2M(clientId="c1", groupName="g", reportSubscribeInfo=False)
    answer = await call(master, Method.CONSUMER_HEARTBEAT, beat)
    assert (answer.success, answer.errCode, answer.errMsg) == (False, 411, "Not found groupName g in holder!")
    await call(master, Method.CONSUMER_REGISTER, c_register("c0"))
    answer = await call(master, Method.CONSUMER_HEARTBEAT, beat)
    assert answer.errCode == 411
    assert (
        answer.errMsg == "Update consumer node exception:Invalid node id:c1@g, you have to append node first!"
    )
    clock.advance(6)  # c0 expires; its group goes with it
    answer = await call(
        master,
        Method.CONSUMER_HEARTBEAT,
        pb.HeartRequestC2M(clientId="c0", groupName="g", reportSubscribeInfo=False),
    )
    assert (answer.errCode, answer.errMsg) == (411, "Not found groupName g in holder!")


async def test_close_releases_the_consumer_at_once(network: MemoryNetwork) -> None:
    master = EmbeddedMaster(brokers(TopicSpec("demo", 3)), start_server=network.start_server)
    await call(master, Method.CONSUMER_REGISTER, c_register("c1"))
    await call(master, Method.CONSUMER_REGISTER, c_register("c2"))
    answer = await call(master, Method.CONSUMER_CLOSE, pb.CloseRequestC2M(clientId="c1", groupName="g"))
    assert (answer.success, answer.errCode, answer.errMsg) == (True, 200, "OK!")
    assert list(master.consumers.groups["g"].consumers) == ["c2"]


async def test_reregistering_consumer_keeps_what_it_holds_and_gets_only_the_rest(
    network: MemoryNetwork,
) -> None:
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 4)), balance_delay=3600.0, start_server=network.start_server
    )
    held = [f"c1@g#1:127.0.0.1:8123#demo:{i}" for i in (1, 3)]
    answer = await call(master, Method.CONSUMER_REGISTER, c_register("c1", subscribeInfo=held))
    assert answer.success and answer.notAllocated is False  # it reported partitions: already allocated
    # no flow-check id in the request: no flow-control fields in the answer
    assert not answer.HasField("defFlowCheckId") and not answer.HasField("ssdStoreId")
    master.balance_now()
    beat = await call(master, Method.CONSUMER_HEARTBEAT, pb.HeartRequestC2M(clientId="c1", groupName="g"))
    assert beat.event.opType == 10 and list(beat.event.subscribeInfo) == [
        "c1@g#1:127.0.0.1:8123#demo:0",
        "c1@g#1:127.0.0.1:8123#demo:2",
    ]
    again = await call(master, Method.CONSUMER_HEARTBEAT, pb.HeartRequestC2M(clientId="c1", groupName="g"))
    assert not again.HasField("event")  # handed out once; waits for the acknowledgement


async def test_bound_consumers_get_their_requested_partitions_once_all_have_come(
    network: MemoryNetwork,
) -> None:
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 3)), balance_delay=3600.0, start_server=network.start_server
    )
    bound = {"requireBound": True, "sessionKey": "s1", "totalCount": 2, "notAllocated": True}
    first = await call(
        master, Method.CONSUMER_REGISTER, c_register("c1", requiredPartition="1:demo:2=56", **bound)
    )
    assert first.success and first.notAllocated
    master.balance_now()
    beat = pb.HeartRequestC2M(clientId="c1", groupName="g")
    assert not (await call(master, Method.CONSUMER_HEARTBEAT, beat)).HasField("event")
    await call(
        master,
        Method.CONSUMER_REGISTER,
        c_register("c2", requiredPartition="1:demo:0=0,1:demo:2=28", **bound),
    )
    master.balance_now()
    got = await call(master, Method.CONSUMER_HEARTBEAT, beat)
    assert list(got.event.subscribeInfo) == ["c1@g#1:127.0.0.1:8123#demo:2"] and got.notAllocated
    other = await call(master, Method.CONSUMER_HEARTBEAT, pb.HeartRequestC2M(clientId="c2", groupName="g"))
    assert list(other.event.subscribeInfo) == ["c2@g#1:127.0.0.1:8123#demo:0"]
    done = pb.HeartRequestC2M(
        clientId="c1", groupName="g", reportSubscribeInfo=True, subscribeInfo=got.event.subscribeInfo
    )
    done.event.CopyFrom(got.event)
    done.event.status = 2
    assert (await call(master, Method.CONSUMER_HEARTBEAT, done)).notAllocated is False


# --- standby and unsupported calls --------------------------------------------------------------------


async def test_standby_validates_fields_then_raises_standby_exception(network: MemoryNetwork) -> None:
    master = EmbeddedMaster(
        brokers(TopicSpec("demo", 3)), standby=True, port=8715, start_server=network.start_server
    )
    bad = await call(master, Method.PRODUCER_REGISTER, p_register(client=""))
    assert (bad.errCode, bad.errMsg) == (400, "Request miss necessary clientId data!")
    calls: list[tuple[Method, Message]] = [
        (Method.PRODUCER_REGISTER, p_register("p7")),
        (Method.PRODUCER_HEARTBEAT, p_heartbeat("p7")),
        (Method.PRODUCER_CLOSE, pb.CloseRequestP2M(clientId="p7")),
        (Method.CONSUMER_REGISTER, c_register("p7", topics=("undeployed",))),
        (
            Method.CONSUMER_HEARTBEAT,
            pb.HeartRequestC2M(clientId="p7", groupName="g", reportSubscribeInfo=False),
        ),
        (Method.CONSUMER_CLOSE, pb.CloseRequestC2M(clientId="p7", groupName="g")),
    ]
    for method, request in calls:
        with pytest.raises(RemoteFault) as caught:
            await call(master, method, request)
        fault = caught.value
        assert (fault.status, fault.exception_name) == (1, STANDBY)
        assert fault.message == "127.0.0.1:8715 is not master now. the connecting client id is p7"
    master.standby = False
    assert (await call(master, Method.PRODUCER_REGISTER, p_register("p7"))).success


async def test_broker_calls_are_refused(network: MemoryNetwork) -> None:
    master = EmbeddedMaster(brokers(TopicSpec("demo")), start_server=network.start_server)
    with pytest.raises(RemoteFault, match="not served by the embedded master"):
        await call(master, Method.BROKER_CLOSE, pb.CloseRequestB2M(brokerId="1"))


# --- client-balanced consumers (V2) -------------------------------------------------------------------


def v2_register(
    client: str, node: int, group: str = "cb", count: int = 2, **kw: Any
) -> pb.RegisterRequestC2MV2:
    return pb.RegisterRequestC2MV2(
        clientId=client,
        groupName=group,
        hostName="10.0.0.1",
        sourceCount=count,
        nodeId=node,
        topicList=["demo"],
        **kw,
    )


async def test_client_balanced_consumers(network: MemoryNetwork) -> None:
    now_ms = [1_800_000_000_000]
    nodes = brokers(TopicSpec("demo", 3), count=2)
    nodes[1].is_serving = False
    master = EmbeddedMaster(
        nodes, clock_ms=lambda: now_ms[0], meta_refresh_period=60.0, start_server=network.start_server
    )
    first = await call(master, Method.CONSUMER_REGISTER_V2, v2_register("v1", 0))
    assert (first.errCode, first.errMsg) == (200, "OK!") and first.HasField("opsTaskInfo")
    assert first.brokerConfigId == master.broker_checksum
    assert list(first.brokerConfigList) == ["1:127.0.0.1: "]  # broker 2 never served: no address yet
    assert first.authorizedInfo.visitAuthorizedToken == master.visit_token
    duplicate = await call(master, Method.CONSUMER_REGISTER_V2, v2_register("v2", 0))
    assert (duplicate.errCode, duplicate.errMsg) == (
        430,
        "[Inconsistency subscribe] v2's nodeId value(0) is occupied by v1's nodeId value(0) in the group!",
    )
    out_of_range = await call(master, Method.CONSUMER_REGISTER_V2, v2_register("v2", 2))
    assert (out_of_range.errCode, out_of_range.errMsg) == (
        400,
        "Request nodeId value must be between in [0, sourceCount-1]!",
    )
    mixed = await call(master, Method.CONSUMER_REGISTER, c_register("v3", group="cb"))
    assert mixed.errCode == 424

    meta = await call(
        master,
        Method.CONSUMER_GET_PART_META,
        pb.GetPartMetaRequestC2M(
            clientId="v1", groupName="cb", brokerConfigId=first.brokerConfigId, topicMetaInfoId=-2
        ),
    )
    assert (meta.errCode, list(meta.topicMetaInfoList)) == (200, ["demo#1:1:3:1,2:1:3:0"])
    assert meta.topicMetaInfoId == now_ms[0] and not meta.brokerConfigList

    report = pb.ClientSubRepInfo(
        brokerConfigId=first.brokerConfigId,
        topicMetaInfoId=meta.topicMetaInfoId,
        lstAssignedTime=now_ms[0],
        reportSubInfo=True,
        partSubInfo=["demo#1:0,1:2,9:1"],
    )
    beat = await call(
        master,
        Method.CONSUMER_HEARTBEAT_V2,
        pb.HeartRequestC2MV2(clientId="v1", groupName="cb", subRepInfo=report),
    )
    assert beat.errCode == 200 and not beat.HasField("topicMetaInfoId") and not beat.brokerConfigList
    assert set(master.consumers.holdings["v1"]["demo"]) == {"1:demo:0", "1:demo:2"}
    now_ms[0] += 61_000  # the assignment is older than meta_refresh_period: metadata is pushed again
    report.topicMetaInfoId = -2
    beat = await call(
        master,
        Method.CONSUMER_HEARTBEAT_V2,
        pb.HeartRequestC2MV2(clientId="v1", groupName="cb", subRepInfo=report),
    )
    assert beat.topicMetaInfoId == meta.topicMetaInfoId and list(beat.topicMetaInfoList) == [
        "demo#1:1:3:1,2:1:3:0"
    ]
    unknown = await call(
        master, Method.CONSUMER_HEARTBEAT_V2, pb.HeartRequestC2MV2(clientId="zz", groupName="cb")
    )
    assert (unknown.errCode, unknown.errMsg) == (411, "Not found client zz in group(cb)")


# --- over real loopback sockets -----------------------------------------------------------------------


@pytest.fixture
async def master(network: MemoryNetwork) -> AsyncIterator[EmbeddedMaster]:
    async with EmbeddedMaster(
        brokers(TopicSpec("demo", 4)),
        balance_period=0.02,
        consumer_timeout=0.5,
        rng=random.Random(1),
        start_server=network.start_server,
    ) as m:
        yield m


@pytest.fixture
async def link(network: MemoryNetwork, master: EmbeddedMaster) -> AsyncIterator[Connection]:
    conn = Connection(master.address, connector=network.create_connection)
    await conn.connect(2.0)
    try:
        yield conn
    finally:
        await conn.close()


async def test_producer_calls_over_the_wire(master: EmbeddedMaster, link: Connection) -> None:
    reg = await link.request(
        Method.PRODUCER_REGISTER, p_register(appdConfig=pb.ApprovedClientConfig(configId=-2)), 2.0
    )
    assert (
        isinstance(reg, pb.RegisterResponseM2P) and reg.success and list(reg.brokerInfos) == ["1:127.0.0.1: "]
    )
    beat = await link.request(Method.PRODUCER_HEARTBEAT, p_heartbeat(checksum=reg.brokerCheckSum), 2.0)
    assert isinstance(beat, pb.HeartResponseM2P) and list(beat.topicInfos) == ["demo#1:4:1#"]
    closed = await link.request(Method.PRODUCER_CLOSE, pb.CloseRequestP2M(clientId="p1"), 2.0)
    assert isinstance(closed, pb.CloseResponseM2P) and closed.success
    master.standby = True
    with pytest.raises(StandbyException) as caught:
        await link.request(Method.PRODUCER_REGISTER, p_register(), 2.0)
    assert caught.value.message == f"{master.address} is not master now. the connecting client id is p1"


class ToyConsumer:
    """A consumer that follows the master's events the way the Java client does (minus the brokers)."""

    def __init__(
        self, network: MemoryNetwork, master: EmbeddedMaster, client_id: str, group: str = "g"
    ) -> None:
        self.master = master
        self.client_id = client_id
        self.group = group
        self.held: dict[str, str] = {}  # partition key -> subscribeInfo string
        self.done: pb.EventProto | None = None
        self.events: list[tuple[int, int]] = []
        self.link = Connection(master.address, connector=network.create_connection)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.link.connect(2.0)
        answer = await self.link.request(Method.CONSUMER_REGISTER, self._register(), 2.0)
        assert answer.success  # type: ignore[attr-defined]
        self._task = asyncio.get_running_loop().create_task(self._beat_loop())

    def _register(self) -> pb.RegisterRequestC2M:
        return c_register(
            self.client_id, self.group, subscribeInfo=list(self.held.values()), defFlowCheckId=-2
        )

    async def _beat_loop(self) -> None:
        while True:
            request = pb.HeartRequestC2M(
                clientId=self.client_id, groupName=self.group, reportSubscribeInfo=False
            )
            if self.done is not None:
                request.event.CopyFrom(self.done)
                request.reportSubscribeInfo = True
                request.subscribeInfo.extend(self.held.values())
            answer = await self.link.request(Method.CONSUMER_HEARTBEAT, request, 2.0)
            assert isinstance(answer, pb.HeartResponseM2C)
            if answer.errCode == 411:
                await self.link.request(Method.CONSUMER_REGISTER, self._register(), 2.0)
                continue
            self.done = None
            if answer.HasField("event") and answer.event.rebalanceId > 0:
                self._apply(answer.event)
            await asyncio.sleep(0.01)

    def _apply(self, event: pb.EventProto) -> None:
        self.events.append((event.rebalanceId, event.opType))
        for text in event.subscribeInfo:
            info = parse_subscribe_info(text)
            assert (info.consumer_id, info.group) == (self.client_id, self.group)
            if event.opType in (2, 20):
                self.held.pop(info.partition.partition_key)
            else:
                self.held[info.partition.partition_key] = text
        self.done = pb.EventProto(
            rebalanceId=event.rebalanceId, opType=event.opType, status=2, subscribeInfo=event.subscribeInfo
        )

    async def stop(self, *, close: bool) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if close:
            answer = await self.link.request(
                Method.CONSUMER_CLOSE, pb.CloseRequestC2M(clientId=self.client_id, groupName=self.group), 2.0
            )
            assert answer.success  # type: ignore[attr-defined]
        await self.link.close()


async def test_two_consumers_split_a_group_and_take_over_on_close_and_expiry(
    network: MemoryNetwork, master: EmbeddedMaster
) -> None:
    a, b, c = (ToyConsumer(network, master, cid) for cid in ("a", "b", "c"))
    every = {f"1:demo:{i}" for i in range(4)}
    try:
        await a.start()
        await eventually(lambda: set(a.held) == every)
        assert a.events[0][1] == 10  # ONLY_CONNECT
        await b.start()
        await eventually(lambda: len(a.held) == len(b.held) == 2)
        assert set(a.held) | set(b.held) == every
        assert master.consumers.groups["g"].not_allocated is False
        await b.stop(close=True)
        await eventually(lambda: set(a.held) == every)
        await c.start()
        await eventually(lambda: len(a.held) == len(c.held) == 2)
        await c.stop(close=False)  # silent: released once consumer_timeout passes
        group = master.consumers.groups["g"]
        await eventually(lambda: "c" not in group.consumers and set(a.held) == every)
        ids = [rid for rid, _ in a.events]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    finally:
        for consumer in (a, b, c):
            if not consumer.link.is_closed:
                await consumer.stop(close=False)


# --- replaying the real Java client's master calls ----------------------------------------------------


def master_connections() -> Iterator[list[dict[str, Any]]]:
    data = json.loads(CAPTURE.read_text())
    for connection in data["connections"]:
        if connection["server"] == "master":
            yield connection["calls"]


def _volatile(answer: dict[str, Any]) -> dict[str, Any]:
    """Drop the time-based values (checked separately) so the rest can be compared exactly."""
    answer = json.loads(json.dumps(answer))
    for path in (("brokerCheckSum",), ("authorizedInfo", "visitAuthorizedToken"), ("event", "rebalanceId")):
        holder = answer
        for key in path[:-1]:
            holder = holder.get(key, {})
        if path[-1] in holder:
            assert int(holder.pop(path[-1])) > 0
    return answer


async def test_capture_replay_gets_the_real_masters_answers(network: MemoryNetwork) -> None:
    # The capture's broker: id 1 on 127.0.0.1:8123, topic demo with 3 partitions.
    nodes = [StaticBroker(1, NodeAddress("127.0.0.1", 8123), {"demo": TopicSpec("demo", 3)})]
    replayed = 0
    async with EmbeddedMaster(nodes, balance_delay=3600.0, start_server=network.start_server) as master:
        for calls in master_connections():
            conn = Connection(master.address, connector=network.create_connection)
            await conn.connect(2.0)
            captured_checksum: str | None = None
            try:
                for item in calls:
                    spec_type = getattr(pb, item["request_type"])
                    request = json_format.ParseDict(item["request"], spec_type())
                    if (
                        captured_checksum is not None
                        and item["request"].get("brokerCheckSum") == captured_checksum
                    ):
                        request.brokerCheckSum = master.broker_checksum
                    if "event" in item["response"]:
                        master.balance_now()
                    answer = await conn.request(item["method"], request, 2.0)
                    assert type(answer).__name__ == item["response_type"]
                    got = json_format.MessageToDict(answer)
                    assert _volatile(got) == _volatile(item["response"]), item["serial"]
                    captured_checksum = item["response"].get("brokerCheckSum", captured_checksum)
                    replayed += 1
            finally:
                await conn.close()
    assert replayed == 16  # 2 producers x (register, 2 heartbeats, close) + a consumer's 8 calls
