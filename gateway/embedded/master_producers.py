"""Producer calls of the embedded master: register, heartbeat, close (methods 1-3, §3.3, §7.2-§7.3).

A producer is known from its register until it closes or stays silent for ``timeout`` seconds; after that its
heartbeats get 411 and it must register again. Answers follow ``TMaster`` field by field: a failure carries
``brokerCheckSum = -1``; a heartbeat lists ``brokerInfos`` only when the producer's checksum is stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.embedded.master_common import (
    BAD_REQUEST,
    HB_NO_NODE,
    MAX_BOOKED_TOPICS,
    MAX_CLIENT_ID_LENGTH,
    MAX_HOST_NAME_LENGTH,
    OFFSET_HISTORY_TOPIC,
    OK,
    SUCCESS,
    FieldError,
    MasterState,
    check_field,
)
from gateway.tubemq.wire.pb import MasterService_pb2 as pb


@dataclass(slots=True)
class ProducerInfo:
    producer_id: str
    host_name: str
    topics: frozenset[str]
    over_tls: bool
    deadline: float


def check_producer_topics(topics: Iterable[str]) -> frozenset[str]:
    """Blank entries are ignored; the offset-history system topic and more than 1024 topics are refused."""
    result = set()
    for topic in topics:
        name = topic.strip()
        if not name:
            continue
        if name == OFFSET_HISTORY_TOPIC:
            raise FieldError(
                BAD_REQUEST, f"System Topic {OFFSET_HISTORY_TOPIC} does not allow client produce data!"
            )
        result.add(name)
    if len(result) > MAX_BOOKED_TOPICS:
        raise FieldError(
            BAD_REQUEST, f"Booked topic's count over max value, required max count is {MAX_BOOKED_TOPICS}"
        )
    return frozenset(result)


def _check_producer(request: pb.RegisterRequestP2M | pb.HeartRequestP2M) -> tuple[str, str, frozenset[str]]:
    """The producer id, host name and topics of a register or heartbeat; raises ``FieldError``."""
    return (
        check_field("clientId", request.clientId, MAX_CLIENT_ID_LENGTH),
        check_field("hostName", request.hostName, MAX_HOST_NAME_LENGTH),
        check_producer_topics(request.topicList),
    )


class ProducerRegistry:
    """Registered producers and their heartbeat deadlines (``timeout`` seconds, ``clock()`` time)."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self.producers: dict[str, ProducerInfo] = {}

    def __repr__(self) -> str:
        return f"ProducerRegistry(producers={sorted(self.producers)})"

    def expire(self) -> list[str]:
        now = self._clock()
        overdue = [pid for pid, info in self.producers.items() if info.deadline < now]
        for pid in overdue:
            del self.producers[pid]
        return overdue

    def register(self, producer_id: str, host_name: str, topics: frozenset[str], over_tls: bool) -> None:
        deadline = self._clock() + self.timeout
        self.producers[producer_id] = ProducerInfo(producer_id, host_name, topics, over_tls, deadline)

    def heartbeat(self, producer_id: str, host_name: str, topics: frozenset[str], over_tls: bool) -> bool:
        """Refresh a producer's deadline and topics; False when it is unknown (expired or never seen)."""
        self.expire()
        info = self.producers.get(producer_id)
        if info is None:
            return False
        info.deadline = self._clock() + self.timeout
        info.host_name, info.topics, info.over_tls = host_name, topics, over_tls
        return True

    def release(self, producer_id: str) -> None:
        self.producers.pop(producer_id, None)


class ProducerCalls:
    """Handlers for methods 1-3 over the master's shared state."""

    def __init__(self, master: MasterState, registry: ProducerRegistry) -> None:
        self._master = master
        self.registry = registry

    def register(self, request: pb.RegisterRequestP2M, tls: bool) -> pb.RegisterResponseM2P:
        answer = pb.RegisterResponseM2P(success=False, brokerCheckSum=-1)
        try:
            producer_id, host_name, topics = _check_producer(request)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        master = self._master
        master.check_active(producer_id)
        self.registry.register(producer_id, host_name, topics, tls)
        answer.brokerCheckSum = master.directory.checksum()
        answer.brokerInfos.extend(master.directory.broker_infos(tls))
        answer.authorizedInfo.CopyFrom(master.authorized_info())
        answer.appdConfig.CopyFrom(master.approved_config(request.appdConfig.configId))
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, OK
        return answer

    def heartbeat(self, request: pb.HeartRequestP2M, tls: bool) -> pb.HeartResponseM2P:
        answer = pb.HeartResponseM2P(success=False, brokerCheckSum=-1)
        try:
            producer_id, host_name, topics = _check_producer(request)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        master = self._master
        master.check_active(producer_id)
        if not self.registry.heartbeat(producer_id, host_name, topics, tls):
            answer.errCode = HB_NO_NODE
            answer.errMsg = f"Invalid node id:{producer_id}, you have to append node first!"
            return answer
        answer.authorizedInfo.CopyFrom(master.authorized_info())
        checksum = master.directory.checksum()
        answer.brokerCheckSum = checksum
        if request.brokerCheckSum != checksum:
            answer.brokerInfos.extend(master.directory.broker_infos(tls))
        answer.topicInfos.extend(master.directory.topic_infos(topics))
        answer.appdConfig.CopyFrom(master.approved_config(request.appdConfig.configId))
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, OK
        return answer

    def close(self, request: pb.CloseRequestP2M) -> pb.CloseResponseM2P:
        answer = pb.CloseResponseM2P(success=False)
        try:
            producer_id = check_field("clientId", request.clientId, MAX_CLIENT_ID_LENGTH)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        self._master.check_active(producer_id)
        self.registry.release(producer_id)
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, OK
        return answer
