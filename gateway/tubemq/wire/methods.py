"""The TubeMQ RPC method table (protocol doc §2, §1.5): method ids, their services and message types.

Every served method id maps to a :class:`MethodSpec` in :data:`METHODS`; :data:`SERVICE_METHODS` says which
ids each service accepts. :mod:`gateway.tubemq.wire.rpc` frames calls of these methods and re-exports
these names (``rpc.Method``, ``rpc.METHODS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import Message

from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = [
    "METHODS",
    "OP_REGISTER",
    "OP_UNREGISTER",
    "SERVICE_METHODS",
    "Method",
    "MethodSpec",
    "Service",
]

OP_REGISTER = 31
"""``RegisterRequestC2B.opType`` to register at a broker (method 15)."""
OP_UNREGISTER = 32
"""``RegisterRequestC2B.opType`` to unregister from a broker (method 15)."""


class Service(IntEnum):
    """``RequestHeader.serviceType`` (Java ``RpcConstants``)."""

    MASTER = 1
    BROKER_READ = 2
    BROKER_WRITE = 3


class Method(IntEnum):
    """``RequestBody.method`` ids (§2). 11, 12, 14 and 19 are declared but never served."""

    PRODUCER_REGISTER = 1
    PRODUCER_HEARTBEAT = 2
    PRODUCER_CLOSE = 3
    CONSUMER_REGISTER = 4
    CONSUMER_HEARTBEAT = 5
    CONSUMER_CLOSE = 6
    BROKER_REGISTER = 7
    BROKER_HEARTBEAT = 8
    BROKER_CLOSE = 9
    PRODUCER_BROKER_REGISTER = 11
    PRODUCER_BROKER_HEARTBEAT = 12
    SEND_MESSAGE = 13
    PRODUCER_BROKER_CLOSE = 14
    CONSUMER_BROKER_REGISTER = 15
    CONSUMER_BROKER_HEARTBEAT = 16
    GET_MESSAGES = 17
    CONSUMER_COMMIT = 18
    CONSUMER_BROKER_CLOSE = 19
    CONSUMER_REGISTER_V2 = 20
    CONSUMER_HEARTBEAT_V2 = 21
    CONSUMER_GET_PART_META = 22


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One served method: its Java name, the service it is sent to, and its message types."""

    method: Method
    name: str
    service: Service
    request_type: type[Message]
    response_type: type[Message]


# id, Java name, service, request type, response type (types in MasterService for service 1, else in
# BrokerService). Java and C++ send method 13 to the write service, Go to the read one; both are served.
_TABLE = """
 1 producerRegisterP2M        1 RegisterRequestP2M    RegisterResponseM2P
 2 producerHeartbeatP2M       1 HeartRequestP2M       HeartResponseM2P
 3 producerCloseClientP2M     1 CloseRequestP2M       CloseResponseM2P
 4 consumerRegisterC2M        1 RegisterRequestC2M    RegisterResponseM2C
 5 consumerHeartbeatC2M       1 HeartRequestC2M       HeartResponseM2C
 6 consumerCloseClientC2M     1 CloseRequestC2M       CloseResponseM2C
 7 brokerRegisterB2M          1 RegisterRequestB2M    RegisterResponseM2B
 8 brokerHeartbeatB2M         1 HeartRequestB2M       HeartResponseM2B
 9 brokerCloseClientB2M       1 CloseRequestB2M       CloseResponseM2B
13 sendMessageP2B             3 SendMessageRequestP2B SendMessageResponseB2P
15 consumerRegisterC2B        2 RegisterRequestC2B    RegisterResponseB2C
16 consumerHeartbeatC2B       2 HeartBeatRequestC2B   HeartBeatResponseB2C
17 getMessagesC2B             2 GetMessageRequestC2B  GetMessageResponseB2C
18 consumerCommitC2B          2 CommitOffsetRequestC2B CommitOffsetResponseB2C
20 consumerRegisterC2MV2      1 RegisterRequestC2MV2  RegisterResponseM2CV2
21 consumerHeartbeatC2MV2     1 HeartRequestC2MV2     HeartResponseM2CV2
22 consumerGetPartMetaInfoC2M 1 GetPartMetaRequestC2M GetPartMetaResponseM2C
"""


def _build_methods() -> dict[int, MethodSpec]:
    table: dict[int, MethodSpec] = {}
    for line in _TABLE.strip().splitlines():
        method, name, service, request, response = line.split()
        module = master_pb if int(service) == Service.MASTER else broker_pb
        request_type: type[Message] = getattr(module, request)
        response_type: type[Message] = getattr(module, response)
        spec = MethodSpec(Method(int(method)), name, Service(int(service)), request_type, response_type)
        table[spec.method] = spec
    return table


METHODS: dict[int, MethodSpec] = _build_methods()
"""Every served method id -> its spec (11, 12, 14 and 19 are absent: the Java server rejects them)."""

SERVICE_METHODS: dict[int, frozenset[int]] = {
    Service.MASTER: frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22}),
    Service.BROKER_READ: frozenset(range(11, 20)),
    Service.BROKER_WRITE: frozenset({11, 12, 13, 14}),
}
"""Method ids each service accepts (Java ``PbEnDecoder.isValidServiceTypeAndMethod``, §1.5 rule 3)."""
