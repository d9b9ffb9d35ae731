"""Partition registration requests a consumer sends to a broker (method 15, §6.5, §6.8).

Pure functions shared by the server-balanced consumer (``consumer_rebalance``) and the range reader: the
same ``RegisterRequestC2B`` registers a partition (``opType`` 31) or unregisters it (``opType`` 32).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.tubemq.wire.meta import Partition
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import OP_REGISTER, OP_UNREGISTER

__all__ = ["READ_PRIORITY", "build_partition_register_request", "build_partition_unregister_request"]

#: The read priority (``qryPriorityId``) a partition registration and every broker heartbeat ask for. The
#: broker takes the hundreds digit for a consumer without stream-id filters and the units digit for one with
#: filters: 1 reads the message files only, 2 also the memory block being flushed, 3 the memory cache too.
#: Left undefined, the broker applies its default (300 unless the master sets one): memory for unfiltered
#: readers but files only for filtered ones, so a filtered reader sees a message only after the broker's next
#: memory flush (10-20 s by default). 303 reads memory in both cases.
READ_PRIORITY = 303


def build_partition_register_request(
    client_id: str,
    group: str,
    partition: Partition,
    *,
    read_status: int,
    visit_token: int,
    offset: int | None = None,
    filters: Iterable[str] = (),
    read_priority: int = READ_PRIORITY,
) -> broker_pb.RegisterRequestC2B:
    """Register ``partition`` for ``group``; ``offset`` (a broker index offset) forces where reading starts.

    ``read_status`` is one of the codes of §6.8 (0 = from the stored offset); ``filters`` are the topic's
    stream-id filter items, sent sorted; ``read_priority`` the ``qryPriorityId`` (:data:`READ_PRIORITY`).
    """
    request = broker_pb.RegisterRequestC2B(
        opType=OP_REGISTER,
        clientId=client_id,
        groupName=group,
        topicName=partition.topic,
        partitionId=partition.partition_id,
        readStatus=read_status,
        filterCondStr=sorted(filters),
        qryPriorityId=read_priority,
        authInfo=broker_pb.AuthorizedInfo(visitAuthorizedToken=visit_token),
    )
    if offset is not None:
        request.currOffset = offset
    return request


def build_partition_unregister_request(
    client_id: str, group: str, partition: Partition, *, consumed: bool, visit_token: int
) -> broker_pb.RegisterRequestC2B:
    """Unregister ``partition``: ``consumed`` commits the last batch handed out (readStatus 0), else it is
    rolled back (readStatus 1)."""
    return broker_pb.RegisterRequestC2B(
        opType=OP_UNREGISTER,
        clientId=client_id,
        groupName=group,
        topicName=partition.topic,
        partitionId=partition.partition_id,
        readStatus=0 if consumed else 1,
        authInfo=broker_pb.AuthorizedInfo(visitAuthorizedToken=visit_token),
    )
