"""The producer's requests to the master, filled field by field as the Java client fills them (§3.3):
register (method 1), heartbeat (method 2) and close (method 3).

Pure functions: every value (ids, checksums) comes in as an argument, so the bytes can be compared with
frames captured from the Java client.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = ["build_close_request", "build_heartbeat_request", "build_register_request"]


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
