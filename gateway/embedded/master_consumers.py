"""Consumer calls of the embedded master (§3.4-§3.5, §6.2-§6.4, §6.9, §6.12, §6.14).

Server-balanced consumers (methods 4-6) register into a group, get their partitions as rebalance events in
heartbeat answers (one at a time, see ``ConsumerRegistry``) and are released on close or after ``timeout``
seconds of silence. Client-balanced consumers (methods 20-22) pick partitions themselves; the master only
keeps their membership and hands out broker lists and per-topic partition metadata.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.embedded.consumer_groups import (
    ConsumeGroup,
    ConsumerInfo,
    ConsumerRegistry,
    ConsumeType,
    GroupError,
)
from gateway.embedded.master_common import (
    BAD_REQUEST,
    HB_NO_NODE,
    MAX_CLIENT_ID_LENGTH,
    MAX_GROUP_NAME_LENGTH,
    MAX_HOST_NAME_LENGTH,
    OK,
    SUCCESS,
    FieldError,
    MasterState,
    SerialIds,
    check_field,
)
from gateway.embedded.rebalance_queues import ConsumerEvent
from gateway.embedded.register_fields import (
    SubscriptionReport,
    check_consumer_topics,
    flow_control_defaults,
    parse_conditions,
    parse_report,
    parse_required_parts,
    parse_subscribed,
)
from gateway.tubemq.wire.meta import SubscribeInfo
from gateway.tubemq.wire.pb import MasterService_pb2 as pb

V2Answer = pb.RegisterResponseM2CV2 | pb.HeartResponseM2CV2 | pb.GetPartMetaResponseM2C


class ConsumerCalls:
    """Handlers for methods 4-6 and 20-22 over the master's shared state and its consumer registry.

    ``meta_refresh_period`` (seconds) is how old a client-balanced consumer's last assignment must be before
    its heartbeat answers carry the group's partition metadata again.
    """

    def __init__(
        self,
        state: MasterState,
        registry: ConsumerRegistry,
        *,
        meta_refresh_period: float,
        clock_ms: Callable[[], int],
    ) -> None:
        self._state = state
        self.registry = registry
        self._meta_refresh_ms = int(meta_refresh_period * 1000)
        self._clock_ms = clock_ms
        self._meta_ids = SerialIds(clock_ms)

    def __repr__(self) -> str:
        return f"ConsumerCalls({self.registry!r})"

    def _identify(self, client_id: str, group: str, host_name: str | None = None) -> tuple[str, str]:
        cid = check_field("clientId", client_id, MAX_CLIENT_ID_LENGTH)
        if host_name is not None:
            check_field("hostName", host_name, MAX_HOST_NAME_LENGTH)
        name = check_field("groupName", group, MAX_GROUP_NAME_LENGTH)
        self._state.check_active(cid)
        self.registry.expire()
        return cid, name

    # --- server-balanced consumers --------------------------------------------------------------------

    def register(self, request: pb.RegisterRequestC2M, tls: bool) -> pb.RegisterResponseM2C:
        answer = pb.RegisterResponseM2C(success=False)
        try:
            cid, group = self._identify(request.clientId, request.groupName, request.hostName)
            topics = check_consumer_topics(request.topicList, self._state.directory.deployed_topics())
            conditions = parse_conditions(request.topicCondition)
            bound = request.HasField("requireBound") and request.requireBound
            required = parse_required_parts(request.requiredPartition, topics) if bound else {}
            info = ConsumerInfo(
                cid,
                group,
                topics,
                ConsumeType.BOUND if bound else ConsumeType.NORMAL,
                conditions,
                over_tls=tls,
                session_key=request.sessionKey.strip() if bound else request.sessionKey,
                source_count=request.totalCount if request.HasField("totalCount") else -1,
                select_big=not request.HasField("selectBig") or request.selectBig,
                required_parts=required,
            )
            if bound:
                _check_bound(info)
            reported = parse_subscribed(request.subscribeInfo)
            not_allocated = not reported and not (
                request.HasField("notAllocated") and not request.notAllocated
            )
            group_state = self.registry.add(info, not_allocated, reported)
        except (FieldError, GroupError) as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        self._accept(answer, request, group_state.not_allocated)
        return answer

    def heartbeat(self, request: pb.HeartRequestC2M) -> pb.HeartResponseM2C:
        answer = pb.HeartResponseM2C(success=False)
        try:
            cid, group_name = self._identify(request.clientId, request.groupName)
            group = self._live_group(cid, group_name)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        registry = self.registry
        registry.holdings.setdefault(cid, {})
        if request.reportSubscribeInfo:
            registry.report(cid, parse_subscribed(request.subscribeInfo))
        if request.HasField("event") and request.event.rebalanceId > 0:
            registry.acknowledge(cid, group_name)
        event = registry.next_event(cid)
        if event is not None:
            answer.event.CopyFrom(_event_proto(cid, group_name, event))
        self._accept(answer, request, group.not_allocated)
        return answer

    def _accept(
        self,
        answer: pb.RegisterResponseM2C | pb.HeartResponseM2C,
        request: pb.RegisterRequestC2M | pb.HeartRequestC2M,
        not_allocated: bool,
    ) -> None:
        """Fill the success part that register and heartbeat answers (methods 4-5) share."""
        if request.HasField("defFlowCheckId") or request.HasField("groupFlowCheckId"):
            flow_control_defaults(answer)
        answer.authorizedInfo.CopyFrom(self._state.authorized_info())
        answer.notAllocated = not_allocated
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, OK

    def close(self, request: pb.CloseRequestC2M) -> pb.CloseResponseM2C:
        answer = pb.CloseResponseM2C(success=False)
        try:
            cid, group = self._identify(request.clientId, request.groupName)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        self.registry.release(cid, group)
        answer.success, answer.errCode, answer.errMsg = True, SUCCESS, OK
        return answer

    def _live_group(self, cid: str, group_name: str, *, member: bool = False) -> ConsumeGroup:
        group = self.registry.groups.get(group_name)
        if group is None:
            raise FieldError(HB_NO_NODE, f"Not found groupName {group_name} in holder!")
        if member and cid not in group.consumers:
            raise FieldError(HB_NO_NODE, f"Not found client {cid} in group({group_name})")
        if not self.registry.touch(cid, group_name):
            raise FieldError(
                HB_NO_NODE,
                f"Update consumer node exception:Invalid node id:{cid}@{group_name}, "
                "you have to append node first!",
            )
        return group

    # --- client-balanced consumers (V2) ---------------------------------------------------------------

    def register_v2(self, request: pb.RegisterRequestC2MV2, tls: bool) -> pb.RegisterResponseM2CV2:
        answer = pb.RegisterResponseM2CV2()
        try:
            cid, group = self._identify(request.clientId, request.groupName, request.hostName)
            topics = check_consumer_topics(request.topicList, self._state.directory.deployed_topics())
            conditions = parse_conditions(request.topicCondition)
            if request.sourceCount > 0 and not 0 <= request.nodeId <= request.sourceCount - 1:
                raise FieldError(BAD_REQUEST, "Request nodeId value must be between in [0, sourceCount-1]!")
            report = self._report(request.subRepInfo if request.HasField("subRepInfo") else None)
            info = ConsumerInfo(
                cid,
                group,
                topics,
                ConsumeType.CLIENT_BALANCE,
                conditions,
                over_tls=tls,
                source_count=request.sourceCount,
                node_id=request.nodeId,
                last_assigned_ms=report.last_assigned_ms,
                topic_meta_id=report.topic_meta_id,
            )
            self.registry.add(info, not_allocated=False)
        except (FieldError, GroupError) as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        self.registry.holdings[cid] = {}
        if report.reported:
            self.registry.report(cid, report.partitions)
        self._broker_config(answer, report.broker_config_id, tls)
        answer.opsTaskInfo.SetInParent()
        answer.authorizedInfo.CopyFrom(self._state.authorized_info())
        answer.errCode, answer.errMsg = SUCCESS, OK
        return answer

    def heartbeat_v2(self, request: pb.HeartRequestC2MV2, tls: bool) -> pb.HeartResponseM2CV2:
        answer = pb.HeartResponseM2CV2()
        try:
            cid, group_name = self._identify(request.clientId, request.groupName)
            report = self._report(request.subRepInfo if request.HasField("subRepInfo") else None)
            group = self._live_group(cid, group_name, member=True)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        info = group.consumers[cid]
        ConsumeGroup.update_report(info, report.last_assigned_ms, report.topic_meta_id)
        if report.reported:
            self.registry.holdings[cid] = {}
            self.registry.report(cid, report.partitions)
        self._broker_config(answer, report.broker_config_id, tls)
        held = self.registry.holdings.get(cid)
        stale = self._clock_ms() - info.last_assigned_ms > self._meta_refresh_ms
        if info.last_assigned_ms >= 0 and held and stale:
            self._topic_meta(answer, group, report.topic_meta_id)
        answer.opsTaskInfo.SetInParent()
        answer.authorizedInfo.CopyFrom(self._state.authorized_info())
        answer.errCode, answer.errMsg = SUCCESS, OK
        return answer

    def part_meta(self, request: pb.GetPartMetaRequestC2M, tls: bool) -> pb.GetPartMetaResponseM2C:
        answer = pb.GetPartMetaResponseM2C()
        try:
            cid, group_name = self._identify(request.clientId, request.groupName)
            group = self._live_group(cid, group_name, member=True)
        except FieldError as exc:
            answer.errCode, answer.errMsg = exc.code, exc.message
            return answer
        if group.topic_meta_id == -2:
            self.refresh_topic_meta(group)
        self._topic_meta(answer, group, request.topicMetaInfoId)
        self._broker_config(answer, request.brokerConfigId, tls)
        answer.errCode, answer.errMsg = SUCCESS, OK
        return answer

    def refresh_topic_meta(self, group: ConsumeGroup) -> None:
        """Re-read the group's topic metadata from the brokers; a change gets a new (larger) id."""
        fresh = self._state.directory.topic_meta(group.topics)
        if fresh and fresh != group.topic_meta:
            group.topic_meta.update(fresh)
            group.topic_meta_id = self._meta_ids.bump()

    def refresh_client_balance_groups(self) -> None:
        for name in self.registry.client_balance_groups():
            self.refresh_topic_meta(self.registry.groups[name])

    def _report(self, info: pb.ClientSubRepInfo | None) -> SubscriptionReport:
        return parse_report(info, self._state.directory.broker_info)

    def _broker_config(self, answer: V2Answer, client_id: int, tls: bool) -> None:
        checksum = self._state.directory.checksum()
        answer.brokerConfigId = checksum
        if client_id != checksum:
            answer.brokerConfigList.extend(self._state.directory.broker_infos(tls))

    @staticmethod
    def _topic_meta(
        answer: pb.HeartResponseM2CV2 | pb.GetPartMetaResponseM2C, group: ConsumeGroup, client_id: int
    ) -> None:
        answer.topicMetaInfoId = group.topic_meta_id
        if group.topic_meta_id != client_id:
            answer.topicMetaInfoList.extend(v for _, v in sorted(group.topic_meta.items()) if v.strip())


def _check_bound(info: ConsumerInfo) -> None:
    if not info.session_key:
        raise FieldError(BAD_REQUEST, "[Parameter error] blank value of sessionKey!")
    if info.source_count <= 0:
        raise FieldError(BAD_REQUEST, "[Parameter error] totalSourceCount must over zero!")


def _event_proto(consumer_id: str, group: str, event: ConsumerEvent) -> pb.EventProto:
    return pb.EventProto(
        rebalanceId=event.rebalance_id,
        opType=int(event.op_type),
        subscribeInfo=[str(SubscribeInfo(consumer_id, group, part)) for part in event.partitions],
    )
