"""Which partitions a topic has, for readers that choose partitions themselves (range reads, Spark).

The master tells it through the client-balance calls (§3.5, §6.12), the way a ``ClientBalanceConsumer``
learns its metadata: a private consumer registers for the one topic (method 20, which answers the broker
list), asks for the partition metadata (method 22: ``topic#brokerId:numStores:numPartitions:statusId``,
§5.1), and closes again (method 6) so that the master forgets it at once. Unlike a producer heartbeat's
``topicInfos`` this also lists partitions that accept no publishing, and it marks brokers whose partitions
cannot be subscribed now (``statusId`` 0): those are left out. Partition ids are
``store * 10000 + index``; entries naming a broker the master did not list are skipped.

How far each partition reaches (its store's minimum and maximum index offset) is a broker question:
:meth:`gateway.tubemq.ranges.reader.RangeReader.bounds`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.tubemq.errors import TubeMQError, for_code
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.wire.meta import (
    STORE_PARTITION_BASE,
    BrokerInfo,
    MetaFormatError,
    Partition,
    default_broker_port,
    parse_broker_info,
)
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method

__all__ = ["TopicLayout", "discover_partitions", "offline_brokers", "parse_topic_meta"]

_UNDEFINED_ID = -2
_SUCCESS = 200


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """A topic's subscribable partitions, sorted by ``(broker, partition id)``, and the master's
    ``visitAuthorizedToken`` that broker calls carry (-2 when the master sent none)."""

    topic: str
    partitions: tuple[Partition, ...]
    visit_token: int = _UNDEFINED_ID
    offline_brokers: tuple[int, ...] = ()
    """Brokers the topic is deployed on whose partitions cannot be subscribed now (``statusId`` 0: the
    broker is stopped or restarting, or the topic does not accept subscription there)."""

    def by_key(self) -> dict[str, Partition]:
        """Partitions by partition key ``brokerId:topic:partitionId``."""
        return {p.partition_key: p for p in self.partitions}


def parse_topic_meta(text: str, brokers: Mapping[int, BrokerInfo]) -> tuple[str, list[Partition]]:
    """Read one V2 ``topicMetaInfo`` string into its subscribable partitions (module docstring).

    Raises :class:`MetaFormatError` when the text is not ``topic#brokerId:stores:partitions:status,...``.
    """
    kind = "topicMetaInfo"
    topic, sep, rest = text.strip().partition("#")
    if not sep or not topic:
        raise MetaFormatError(kind, text, "expected topic#brokerId:numStores:numPartitions:statusId[,...]")
    partitions: list[Partition] = []
    for item in rest.split(","):
        if not item.strip():
            continue
        fields = item.strip().split(":")
        if len(fields) != 4:
            raise MetaFormatError(
                kind, text, f"entry {item!r} is not brokerId:numStores:numPartitions:status"
            )
        try:
            broker_id, stores, count, status = (int(f) for f in fields)
        except ValueError:
            raise MetaFormatError(kind, text, f"entry {item!r} holds a non-integer") from None
        broker = brokers.get(broker_id)
        if broker is None or status != 1:
            continue
        partitions.extend(
            Partition(broker, topic, store * STORE_PARTITION_BASE + index)
            for store in range(stores)
            for index in range(count)
        )
    return topic, partitions


def offline_brokers(text: str) -> list[int]:
    """The broker ids a ``topicMetaInfo`` string lists with ``statusId`` 0 (entries it cannot read are
    skipped: :func:`parse_topic_meta` reports those)."""
    _, _, rest = text.strip().partition("#")
    found = []
    for item in rest.split(","):
        fields = item.strip().split(":")
        if len(fields) == 4 and fields[0].strip().isdigit() and fields[3].strip() == "0":
            found.append(int(fields[0]))
    return found


def _brokers(infos: Iterable[str], default_port: int) -> dict[int, BrokerInfo]:
    brokers: dict[int, BrokerInfo] = {}
    for text in infos:
        try:
            broker = parse_broker_info(text, default_port)
        except MetaFormatError:
            continue
        brokers[broker.broker_id] = broker
    return brokers


def _check(answer: master_pb.RegisterResponseM2CV2 | master_pb.GetPartMetaResponseM2C) -> None:
    # V2 answers have no success flag: only errCode 200 means success (§3.5).
    if answer.errCode != _SUCCESS:
        raise for_code(answer.errCode, answer.errMsg)


async def discover_partitions(
    master: MasterClient,
    topic: str,
    *,
    client_id: str,
    group: str,
    host_name: str,
    default_port: int | None = None,
) -> TopicLayout:
    """Ask the master for ``topic``'s subscribable partitions as the private consumer ``client_id`` of
    ``group`` (module docstring). Raises the master's :class:`ServerError` (e.g. ``TopicNotDeployed``)
    or a transport error. ``default_port``: the port of a broker listed with a blank one (None: 8124 when
    the master is reached over TLS, else 8123)."""
    if default_port is None:
        default_port = default_broker_port(master.tls)
    register = master_pb.RegisterRequestC2MV2(
        clientId=client_id,
        groupName=group,
        hostName=host_name,
        sourceCount=1,
        nodeId=0,
        topicList=[topic],
    )
    register.subRepInfo.brokerConfigId = _UNDEFINED_ID
    register.subRepInfo.topicMetaInfoId = _UNDEFINED_ID
    answer = await master.call(Method.CONSUMER_REGISTER_V2, register)
    assert isinstance(answer, master_pb.RegisterResponseM2CV2)
    _check(answer)
    try:
        brokers = _brokers(answer.brokerConfigList, default_port)
        token = (
            answer.authorizedInfo.visitAuthorizedToken if answer.HasField("authorizedInfo") else _UNDEFINED_ID
        )
        meta_request = master_pb.GetPartMetaRequestC2M(
            clientId=client_id,
            groupName=group,
            brokerConfigId=answer.brokerConfigId if brokers else _UNDEFINED_ID,
            topicMetaInfoId=_UNDEFINED_ID,
        )
        meta = await master.call(Method.CONSUMER_GET_PART_META, meta_request)
        assert isinstance(meta, master_pb.GetPartMetaResponseM2C)
        _check(meta)
        if meta.brokerConfigList:
            brokers = _brokers(meta.brokerConfigList, default_port)
        partitions: list[Partition] = []
        offline: list[int] = []
        for text in meta.topicMetaInfoList:
            name, found = parse_topic_meta(text, brokers)
            if name == topic:
                partitions.extend(found)
                offline.extend(offline_brokers(text))
    finally:
        # If the close is lost the master expires the consumer after its heartbeat timeout.
        with contextlib.suppress(TubeMQError):
            close = master_pb.CloseRequestC2M(clientId=client_id, groupName=group)
            await master.call(Method.CONSUMER_CLOSE, close)
    return TopicLayout(topic, tuple(sorted(partitions)), token, tuple(sorted(set(offline))))
