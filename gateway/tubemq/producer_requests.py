"""The producer's request messages, filled field by field as the Java client fills them (§3.3, §3.6, §7).

Pure functions: every value (ids, tokens, checksums) comes in as an argument, so the bytes can be compared
with frames captured from the Java client.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.tubemq.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.pb import MasterService_pb2 as master_pb

__all__ = [
    "NO_CHECKSUM",
    "build_close_request",
    "build_heartbeat_request",
    "build_register_request",
    "build_send_request",
]

NO_CHECKSUM = -1
"""``SendMessageRequestP2B.checkSum`` meaning "do not verify"; every client sends it (§4.3)."""


def build_register_request(
    client_id: str,
    host_name: str,
    *,
    broker_checksum: int,
    config_id: int,
    topics: Iterable[str] = (),
    jdk_version: str | None = None,
) -> master_pb.RegisterRequestP2M:
    """RegisterRequestP2M (method 1): ``jdk_version`` is informational (Java sends its JVM version)."""
    request = master_pb.RegisterRequestP2M(
        clientId=client_id,
        topicList=list(topics),
        brokerCheckSum=broker_checksum,
        hostName=host_name,
    )
    if jdk_version is not None:
        request.jdkVersion = jdk_version
    request.appdConfig.configId = config_id
    return request


def build_heartbeat_request(
    client_id: str,
    host_name: str,
    *,
    broker_checksum: int,
    config_id: int,
    topics: Iterable[str],
) -> master_pb.HeartRequestP2M:
    """HeartRequestP2M (method 2) carrying every published topic."""
    request = master_pb.HeartRequestP2M(
        clientId=client_id,
        brokerCheckSum=broker_checksum,
        hostName=host_name,
        topicList=list(topics),
    )
    request.appdConfig.configId = config_id
    return request


def build_close_request(client_id: str) -> master_pb.CloseRequestP2M:
    """CloseRequestP2M (method 3)."""
    return master_pb.CloseRequestP2M(clientId=client_id)


def build_send_request(
    client_id: str,
    topic: str,
    partition_id: int,
    data: bytes,
    flag: int,
    *,
    sent_addr: int,
    visit_token: int,
    auth_token: str | None = None,
    msg_type: str | None = None,
    msg_time: str | None = None,
) -> broker_pb.SendMessageRequestP2B:
    """SendMessageRequestP2B (method 13): ``data``/``flag`` from ``payload.encode_payload``; ``msg_type``
    and ``msg_time`` repeat the payload's ``$msgType$``/``$msgTime$`` (the broker filters on field 8)."""
    request = broker_pb.SendMessageRequestP2B(
        clientId=client_id,
        topicName=topic,
        partitionId=partition_id,
        data=data,
        flag=flag,
        checkSum=NO_CHECKSUM,
        sentAddr=sent_addr,
    )
    if msg_type:
        request.msgType = msg_type
    if msg_time:
        request.msgTime = msg_time
    request.authInfo.visitAuthorizedToken = visit_token
    if auth_token:
        request.authInfo.authAuthorizedToken = auth_token
    return request
