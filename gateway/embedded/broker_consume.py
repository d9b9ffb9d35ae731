"""Consumer side of the embedded broker: register/unregister (15), heartbeat (16), fetch (17), commit (18).

A partition of a group is registered by one consumer at a time (key ``group:topic:partitionId``). A
registration lives ``consumer_timeout`` seconds past the last register, heartbeat or fetch; then it is
dropped with its pending advance (``expire``, run periodically by the broker, and checked lazily on every
call). Answers follow the Java broker (``BrokerServiceServer``) and the real capture, including its quirks:
an unregister answers ``currOffset = -1``; "no data" is ``success=false, errCode=404`` with
``minLimitTime = -1`` when the offset reached the end; a register that meets a timed-out holder removes it
but still answers 410.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gateway.embedded.broker_common import (
    BAD_REQUEST,
    DUPLICATE_PARTITION,
    HB_NO_NODE,
    INTERNAL_SERVER_ERROR,
    NOT_FOUND,
    PARTITION_OCCUPIED,
    SERVICE_UNAVAILABLE,
    SUCCESS,
    UNAUTHORIZED,
    BadField,
    StoreTable,
    WrongPartition,
    check_client_id,
    check_group_name,
    check_topic,
    check_topic_partition,
    is_blank,
    java_trim,
)
from gateway.embedded.offsets import OffsetManager
from gateway.embedded.store import DEFAULT_READ_BYTES, PendingRead, ReadResult, TopicStore
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.wire.meta import FailureInfo, parse_partition
from gateway.tubemq.wire.payload import java_string_hash
from gateway.tubemq.wire.pb import BrokerService_pb2 as pb
from gateway.tubemq.wire.rpc import OP_REGISTER, OP_UNREGISTER

__all__ = ["ConsumerService", "Registration", "index_read_entries"]


def index_read_entries(partitions: int) -> int:
    """Index entries one fetch examines: 1 000 per partition of the store, kept within 6 000..10 000."""
    return min(max(1000 * partitions, 6000), 10000)


@dataclass(slots=True)
class Registration:
    """Who holds a group's partition; ``deadline`` is on the broker's monotonic clock (seconds)."""

    client_id: str
    filter_hashes: frozenset[int]
    deadline: float


class ConsumerService:
    """Registrations plus the four consumer calls; every handler returns the answer message."""

    def __init__(
        self,
        broker_id: int,
        topics: Mapping[str, TopicSpec],
        stores: StoreTable,
        offsets: OffsetManager,
        *,
        consumer_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        host: str = "127.0.0.1",
    ) -> None:
        self.broker_id = broker_id
        self.topics = topics
        self.stores = stores
        self.offsets = offsets
        self.consumer_timeout = consumer_timeout
        self.host = host
        self._clock = clock
        self._registrations: dict[tuple[str, str, int], Registration] = {}
        self.serving = True

    @property
    def registrations(self) -> Mapping[tuple[str, str, int], Registration]:
        """(group, topic, partition id) -> registration, timed-out ones included until expired."""
        return self._registrations

    # -- registration lifetime -----------------------------------------------------------------------

    def expire(self) -> int:
        """Drop every timed-out registration and its pending advance; returns how many were dropped."""
        now = self._clock()
        stale = [key for key, reg in self._registrations.items() if now >= reg.deadline]
        for key in stale:
            self._drop(key)
        return len(stale)

    def _drop(self, key: tuple[str, str, int]) -> None:
        del self._registrations[key]
        self.offsets.discard(*key)

    def _live(self, key: tuple[str, str, int]) -> Registration | None:
        reg = self._registrations.get(key)
        if reg is not None and self._clock() >= reg.deadline:
            self._drop(key)
            return None
        return reg

    def _refresh(self, reg: Registration) -> None:
        reg.deadline = self._clock() + self.consumer_timeout

    # -- method 15 -----------------------------------------------------------------------------------

    def register(self, request: pb.RegisterRequestC2B) -> pb.RegisterResponseB2C:
        answer = pb.RegisterResponseB2C(success=False, currOffset=-1)
        if not self.serving:
            return _fail(answer, SERVICE_UNAVAILABLE, "StoreService temporary unavailable!")
        try:
            client_id = check_client_id(request.clientId)
            spec = check_topic(request.topicName, self.topics)
            group = check_group_name(request.groupName)
        except BadField as bad:
            return _fail(answer, bad.code, bad.message)
        key = (group, spec.name, request.partitionId)
        if request.opType == OP_REGISTER:
            return self._register(answer, request, client_id, key)
        if request.opType == OP_UNREGISTER:
            return self._unregister(answer, request, client_id, key)
        return _fail(answer, BAD_REQUEST, f"Invalid request:{request.opType}")

    def _register(
        self,
        answer: pb.RegisterResponseB2C,
        request: pb.RegisterRequestC2B,
        client_id: str,
        key: tuple[str, str, int],
    ) -> pb.RegisterResponseB2C:
        group, topic, partition_id = key
        part_str = _part_str(key)
        holder = self._registrations.get(key)
        if holder is not None and holder.client_id != client_id:
            if self._clock() >= holder.deadline:
                self._drop(key)
                message = (
                    f"[Duplicated Register] Remove Invalid Consumer Register {holder.client_id}#{part_str}"
                )
            else:
                message = (
                    f"[Duplicated Register] Partition {self.broker_id}#{part_str} "
                    f"has been registered by {holder.client_id}"
                )
            return _fail(answer, PARTITION_OCCUPIED, message)
        filters = {java_trim(item) for item in request.filterCondStr if not is_blank(item)}
        self._registrations[key] = Registration(
            client_id,
            frozenset(java_string_hash(item) for item in filters),
            self._clock() + self.consumer_timeout,
        )
        try:
            store = self.stores.for_partition(topic, partition_id)
        except WrongPartition as exc:
            # Like the Java broker, the registration above stays recorded although the call fails.
            return _fail(answer, INTERNAL_SERVER_ERROR, f"Register broker failure!, exception is {exc}")
        requested = request.currOffset if request.HasField("currOffset") else -1
        offset = self.offsets.load(
            group, topic, partition_id, request.readStatus, requested, store.min_offset, store.max_offset
        )
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, "OK!"
        answer.currOffset, answer.maxOffset = offset, store.max_offset
        return answer

    def _unregister(
        self,
        answer: pb.RegisterResponseB2C,
        request: pb.RegisterRequestC2B,
        client_id: str,
        key: tuple[str, str, int],
    ) -> pb.RegisterResponseB2C:
        holder = self._live(key)
        if holder is None:
            message = f"UnRegistered Consumer {client_id}, you have to register firstly!"
            return _fail(answer, HB_NO_NODE, message)
        if holder.client_id != client_id:
            message = (
                f"[Duplicated Request]Partition {_part_str(key)} has been consumed by {holder.client_id}"
                f";Current consumer {client_id}, broker={self.host}"
            )
            return _fail(answer, DUPLICATE_PARTITION, message)
        self.offsets.commit(*key, consumed=request.readStatus == 0)
        del self._registrations[key]
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, "OK!"
        return answer

    # -- method 16 -----------------------------------------------------------------------------------

    def heartbeat(self, request: pb.HeartBeatRequestC2B) -> pb.HeartBeatResponseB2C:
        answer = pb.HeartBeatResponseB2C(success=False)
        if not self.serving:
            return _fail(answer, SERVICE_UNAVAILABLE, "StoreService temporary unavailable!")
        try:
            client_id = check_client_id(request.clientId)
            group = check_group_name(request.groupName)
        except BadField as bad:
            return _fail(answer, bad.code, bad.message)
        failures: list[str] = []
        for text in request.partitionInfo:
            partition = parse_partition(text)
            holder = self._live((group, partition.topic, partition.partition_id))
            if holder is None:
                failures.append(str(FailureInfo(HB_NO_NODE, partition)))
            elif holder.client_id != client_id:
                failures.append(str(FailureInfo(DUPLICATE_PARTITION, partition)))
            else:
                self._refresh(holder)
        answer.requireAuth = False
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, "OK!"
        answer.hasPartFailure = bool(failures)
        answer.failureInfo.extend(failures)
        return answer

    # -- method 17 -----------------------------------------------------------------------------------

    def get_message(self, request: pb.GetMessageRequestC2B) -> pb.GetMessageResponseB2C:
        """Method 17, a file store's payloads read on the calling thread (tests, tools)."""
        answer = self._get_message(request)
        return answer.fill(answer.pending.load()) if isinstance(answer, _Reading) else answer

    async def get_message_async(self, request: pb.GetMessageRequestC2B) -> pb.GetMessageResponseB2C:
        """Method 17 for the event loop: a file store's payloads are read in a worker thread. Everything
        else (checks, the read position, booking the advance) happens before the first ``await``."""
        answer = self._get_message(request)
        return answer.fill(await answer.pending.load_async()) if isinstance(answer, _Reading) else answer

    def _get_message(self, request: pb.GetMessageRequestC2B) -> pb.GetMessageResponseB2C | _Reading:
        answer = pb.GetMessageResponseB2C(
            success=False, currOffset=-1, escFlowCtrl=False, currDataDlt=-1, minLimitTime=0
        )
        if not self.serving:
            return _fail(answer, SERVICE_UNAVAILABLE, "Read StoreService temporary unavailable!")
        try:
            client_id = check_client_id(request.clientId)
            group = check_group_name(request.groupName)
            spec = check_topic(request.topicName, self.topics)
        except BadField as bad:
            return _fail(answer, bad.code, bad.message)
        key = (group, spec.name, request.partitionId)
        holder = self._live(key)
        if holder is None:
            return _fail(
                answer, HB_NO_NODE, f"UnRegistered Consumer:{client_id}, you have to register firstly!"
            )
        if holder.client_id != client_id:
            message = (
                f"[Duplicated Request] Partition={_part_str(key)} of Broker={self.broker_id} "
                f"has been consumed by {holder.client_id};Current consumer {client_id}"
            )
            return _fail(answer, DUPLICATE_PARTITION, message)
        self._refresh(holder)
        try:
            store = self.stores.for_partition(spec.name, request.partitionId)
        except WrongPartition:
            message = f"Get the store of topic {spec.name} in partition {request.partitionId} failure!"
            return _fail(answer, INTERNAL_SERVER_ERROR, message)
        return self._read(answer, request, key, holder, store, spec)

    def _read(
        self,
        answer: pb.GetMessageResponseB2C,
        request: pb.GetMessageRequestC2B,
        key: tuple[str, str, int],
        holder: Registration,
        store: TopicStore,
        spec: TopicSpec,
    ) -> pb.GetMessageResponseB2C | _Reading:
        manual = request.manualCommitOffset
        offset = self.offsets.fetch_offset(
            *key, request.lastPackConsumed, store.min_offset, store.max_offset, manual=manual
        )
        if offset >= store.max_offset:
            if offset > 0:
                answer.minLimitTime = -1
                return _fail(answer, NOT_FOUND, "The request offset reached maxOffset!")
            # An empty store: the Java broker answers from its write cache, with another text.
            answer.minLimitTime = _int32(store.data_max_offset)
            return _fail(answer, NOT_FOUND, "Request offset reached cache maxOffset")
        pending = store.start_read(
            request.partitionId,
            offset,
            max_bytes=DEFAULT_READ_BYTES,
            max_entries=index_read_entries(spec.partitions),
            filter_hashes=holder.filter_hashes,
        )
        result = pending.result
        # Booked now, before any payload is read: reads of the partition are ordered as they came in.
        self.offsets.book(*key, result.advance, batch_empty=pending.empty, manual=manual)
        if pending.empty and result.next_offset >= result.max_offset:
            # Java reports the whole data size here (its "wait time" field is data left unread).
            answer.minLimitTime = _int32(store.data_max_offset)
            return _fail(answer, NOT_FOUND, "Can't found Message by index!")
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, "OK!"
        answer.currOffset = result.start_offset
        answer.currDataDlt = result.lag_bytes
        answer.requireSlow = False
        answer.maxOffset = result.max_offset
        return _Reading(answer, pending)

    # -- method 18 -----------------------------------------------------------------------------------

    def commit(self, request: pb.CommitOffsetRequestC2B) -> pb.CommitOffsetResponseB2C:
        answer = pb.CommitOffsetResponseB2C(success=False, currOffset=-1)
        if not self.serving:
            return _fail(answer, SERVICE_UNAVAILABLE, "StoreService temporary unavailable!")
        try:
            client_id = check_client_id(request.clientId)
            group = check_group_name(request.groupName)
            spec = check_topic_partition(request.topicName, request.partitionId, self.topics)
        except BadField as bad:
            return _fail(answer, bad.code, bad.message)
        key = (group, spec.name, request.partitionId)
        holder = self._live(key)
        if holder is None:
            return _fail(answer, UNAUTHORIZED, "The partition not registered by consumers")
        if holder.client_id != client_id:
            message = f"The partition has been registered by other consumer: {holder.client_id}"
            return _fail(answer, UNAUTHORIZED, message)
        consumed = request.lastPackConsumed if request.HasField("lastPackConsumed") else True
        offset = self.offsets.commit(*key, consumed=consumed)
        try:
            store = self.stores.for_partition(spec.name, request.partitionId)
        except WrongPartition as exc:
            return _fail(answer, INTERNAL_SERVER_ERROR, str(exc))
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, "OK!"
        answer.currOffset, answer.maxOffset = offset, store.max_offset
        return answer

    def __repr__(self) -> str:
        return (
            f"ConsumerService(broker={self.broker_id}, registrations={len(self._registrations)}, "
            f"timeout={self.consumer_timeout}s{'' if self.serving else ', stopped'})"
        )


def _part_str(key: tuple[str, str, int]) -> str:
    return f"{key[0]}:{key[1]}:{key[2]}"


def _int32(value: int) -> int:
    """Java's ``(int)`` cast of a long."""
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


_Answer = TypeVar(
    "_Answer",
    pb.RegisterResponseB2C,
    pb.HeartBeatResponseB2C,
    pb.GetMessageResponseB2C,
    pb.CommitOffsetResponseB2C,
)


def _fail(answer: _Answer, code: int, message: str) -> _Answer:
    answer.errCode = code
    answer.errMsg = message
    return answer


class _Reading:
    """A successful GetMessage answer waiting for the payloads of its read."""

    __slots__ = ("answer", "pending")

    def __init__(self, answer: pb.GetMessageResponseB2C, pending: PendingRead) -> None:
        self.answer = answer
        self.pending = pending

    def fill(self, result: ReadResult) -> pb.GetMessageResponseB2C:
        answer = self.answer
        answer.messages.extend(
            pb.TransferedMessage(messageId=m.message_id, checkSum=m.checksum, payLoadData=m.data, flag=m.flag)
            for m in result.messages
        )
        return answer
