"""Read every stored message of a topic straight from the brokers with raw broker calls (test helper).

Used where a test must check what the brokers hold, independently of the gateway's own consumer code.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.payload import decode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as pb


@dataclass(frozen=True)
class StoredMessage:
    broker_id: int
    partition_id: int
    message_id: int
    body: bytes
    attributes: dict[str, str]
    stream_id: str | None
    msg_time: str | None


async def read_partition(
    pool: ConnectionPool, broker: NodeAddress, broker_id: int, topic: str, partition_id: int, group: str
) -> list[StoredMessage]:
    client = f"{group}_readback"
    reg = pb.RegisterRequestC2B(
        opType=rpc.OP_REGISTER,
        clientId=client,
        groupName=group,
        topicName=topic,
        partitionId=partition_id,
        readStatus=0,
    )
    answer = await pool.request(broker, rpc.Method.CONSUMER_BROKER_REGISTER, reg, 5.0)
    assert answer.errCode == 200, answer
    out: list[StoredMessage] = []
    consumed = False
    while True:
        get = pb.GetMessageRequestC2B(
            clientId=client,
            partitionId=partition_id,
            groupName=group,
            topicName=topic,
            lastPackConsumed=consumed,
            manualCommitOffset=False,
            escFlowCtrl=False,
        )
        got = await pool.request(broker, rpc.Method.GET_MESSAGES, get, 5.0)
        if got.errCode == 404:
            break
        assert got.errCode == 200, got
        for m in got.messages:
            d = decode_payload(m.payLoadData, m.flag)
            out.append(
                StoredMessage(
                    broker_id, partition_id, m.messageId, d.body, d.attributes, d.msg_type, d.msg_time
                )
            )
        consumed = True
    unreg = pb.RegisterRequestC2B(
        opType=rpc.OP_UNREGISTER,
        clientId=client,
        groupName=group,
        topicName=topic,
        partitionId=partition_id,
        readStatus=0,
    )
    await pool.request(broker, rpc.Method.CONSUMER_BROKER_REGISTER, unreg, 5.0)
    return out


async def read_topic(
    pool: ConnectionPool, brokers: dict[int, NodeAddress], topic: str, partition_ids: list[int], group: str
) -> list[StoredMessage]:
    """Every message of ``topic`` on every broker, partition by partition, from the earliest offset."""
    out: list[StoredMessage] = []
    for broker_id, address in sorted(brokers.items()):
        for pid in partition_ids:
            out.extend(await read_partition(pool, address, broker_id, topic, pid, group))
    return out
