"""What every embedded-master handler shares: the broker directory, field checks, standby and answer texts.

The master reads its brokers in-process (``BrokerView``: id, address, deployed topics, serving or not); no
broker-to-master RPC is involved. ``BrokerDirectory`` turns them into the strings clients receive (§5.1) and
keeps the broker checksum: a ms timestamp that strictly increases whenever the serving set changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.wire.meta import (
    DEFAULT_BROKER_PORT,
    DEFAULT_BROKER_TLS_PORT,
    BrokerInfo,
    Partition,
    TopicBroker,
    TopicInfo,
    format_broker_info,
    format_topic_info,
)
from gateway.tubemq.wire.pb import MasterService_pb2 as pb

SUCCESS = 200
BAD_REQUEST = 400
HB_NO_NODE = 411
TOPIC_NOT_DEPLOYED = 431
OK = "OK!"
UNDEFINED = -2  # TubeMQ's META_VALUE_UNDEFINED: "no id held" / "feature off"

MAX_CLIENT_ID_LENGTH = 1024
MAX_HOST_NAME_LENGTH = 256
MAX_GROUP_NAME_LENGTH = 1024
MAX_BOOKED_TOPICS = 1024
OFFSET_HISTORY_TOPIC = "__offset_history__"
STANDBY_EXCEPTION = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"


class BrokerView(Protocol):
    """What the master needs to know about a broker (``EmbeddedBroker`` provides it)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def address(self) -> NodeAddress: ...

    @property
    def topics(self) -> Mapping[str, TopicSpec]: ...

    @property
    def is_serving(self) -> bool: ...


class FieldError(Exception):
    """A request field failed validation; answered as ``errCode``/``errMsg`` (not an RPC exception)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_field(name: str, value: str, max_length: int) -> str:
    """TubeMQ's string-parameter rule: non-blank and at most ``max_length`` long once trimmed."""
    text = value.strip()
    if not text:
        raise FieldError(BAD_REQUEST, f"Request miss necessary {name} data!")
    if len(text) > max_length:
        raise FieldError(BAD_REQUEST, f"{name}'s length over max value, allowed max length is {max_length}")
    return text


def java_set(items: Iterable[str]) -> str:
    """A set of names written the way Java prints a ``Set<String>``."""
    return "[" + ", ".join(sorted(items)) + "]"


class NotMaster(Exception):
    """This master is a standby; answered with the RPC exception ``STANDBY_EXCEPTION`` and this text."""

    def __init__(self, address: NodeAddress, client_id: str) -> None:
        super().__init__(f"{address} is not master now. the connecting client id is {client_id}")


class SerialIds:
    """Ids that are ms timestamps and strictly increase on every ``bump`` (TubeMQ's SerialIdUtils)."""

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock_ms = clock_ms
        self.last = UNDEFINED

    def bump(self) -> int:
        self.last = max(self._clock_ms(), self.last + 1)
        return self.last


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerDirectory:
    """The master's view of its brokers: lists, checksum, publishable and subscribable partitions."""

    def __init__(self, brokers: Sequence[BrokerView], clock_ms: Callable[[], int] = wall_ms) -> None:
        self._brokers: list[BrokerView] = sorted(brokers, key=lambda b: b.broker_id)
        self._ids = SerialIds(clock_ms)
        self._signature: tuple[tuple[int, str, bool], ...] | None = None
        # a stopped broker has no address of its own: it keeps the one it last served at
        self._addresses: dict[int, NodeAddress] = {}

    def __repr__(self) -> str:
        serving = [b.broker_id for b in self._brokers if b.is_serving]
        return f"BrokerDirectory(brokers={[b.broker_id for b in self._brokers]}, serving={serving})"

    @property
    def brokers(self) -> list[BrokerView]:
        return list(self._brokers)

    def _known(self) -> list[BrokerInfo]:
        """Every broker that has an address (serving now, or served before), by id."""
        known = []
        for b in self._brokers:
            if b.is_serving:
                self._addresses[b.broker_id] = b.address
            address = self._addresses.get(b.broker_id)
            if address is not None:
                known.append(BrokerInfo(b.broker_id, address.host, address.port))
        return known

    def checksum(self) -> int:
        """The broker checksum; bumped (strictly increasing ms timestamp) when brokers changed."""
        serving = {b.broker_id for b in self._brokers if b.is_serving}
        signature = tuple((info.broker_id, str(info), info.broker_id in serving) for info in self._known())
        if signature != self._signature:
            self._signature = signature
            self._ids.bump()
        return self._ids.last

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return next((info for info in self._known() if info.broker_id == broker_id), None)

    def broker_infos(self, tls: bool) -> list[str]:
        """Every configured broker, ``brokerId:host:port`` with the default port written as a space."""
        default = DEFAULT_BROKER_TLS_PORT if tls else DEFAULT_BROKER_PORT
        return [format_broker_info(info, default) for info in self._known()]

    def deployed_topics(self) -> set[str]:
        """Topics configured on any broker, serving or not."""
        return {topic for b in self._brokers for topic in b.topics}

    def topic_infos(self, topics: Iterable[str]) -> list[str]:
        """topicInfo strings for the requested topics that serving brokers accept publishing for.

        The max-size segment stays empty: the real master fills it only for a topic whose own max message
        size differs from the cluster default, and embedded topics have no size of their own.
        """
        infos = []
        for topic in sorted(set(topics)):
            entries = [
                TopicBroker(b.broker_id, spec.partitions, spec.stores)
                for b in self._brokers
                if b.is_serving and (spec := b.topics.get(topic)) is not None and spec.accept_publish
            ]
            if entries:
                infos.append(format_topic_info(TopicInfo(topic, tuple(entries))))
        return infos

    def subscribable(self, topics: Iterable[str]) -> dict[str, Partition]:
        """Partitions of ``topics`` on serving brokers that accept subscription, by partition key, sorted."""
        wanted = set(topics)
        parts: list[Partition] = []
        for b in self._brokers:
            if not b.is_serving:
                continue
            info = BrokerInfo(b.broker_id, b.address.host, b.address.port)
            for topic in sorted(wanted & set(b.topics)):
                spec = b.topics[topic]
                if spec.accept_subscribe:
                    parts.extend(Partition(info, topic, pid) for pid in spec.partition_ids())
        return {part.partition_key: part for part in sorted(parts)}

    def topic_meta(self, topics: Iterable[str]) -> dict[str, str]:
        """V2 topicMetaInfo per topic: ``topic#brokerId:numStores:numPartitions:statusId[,...]``."""
        result = {}
        for topic in sorted(set(topics)):
            entries = [
                f"{b.broker_id}:{spec.stores}:{spec.partitions}:{int(b.is_serving and spec.accept_subscribe)}"
                for b in self._brokers
                if (spec := b.topics.get(topic)) is not None
            ]
            if entries:
                result[topic] = f"{topic}#{','.join(entries)}"
        return result


DEFAULT_MAX_MSG_SIZE = 1024 * 1024


class MasterState:
    """State every handler reads: brokers, role (active or standby), visit token and client config.

    ``config_id`` is the cluster-setting id producers echo in ``appdConfig``: -2 (as on a real master whose
    settings were never changed) while ``max_msg_size`` is the 1 MiB default, else a ms timestamp, so that
    producers holding -2 learn the other size.
    """

    def __init__(
        self, directory: BrokerDirectory, *, standby: bool, max_msg_size: int, clock_ms: Callable[[], int]
    ) -> None:
        self.directory = directory
        self.standby = standby
        self.address = NodeAddress("127.0.0.1", 0)
        self.max_msg_size = max_msg_size
        self.visit_token = clock_ms()
        self.config_id = UNDEFINED if max_msg_size == DEFAULT_MAX_MSG_SIZE else clock_ms()

    def __repr__(self) -> str:
        role = "standby" if self.standby else "active"
        return f"MasterState({self.address}, {role}, {self.directory!r})"

    def check_active(self, client_id: str) -> None:
        """Raise ``NotMaster`` when this master is a standby (called once a call's fields are valid)."""
        if self.standby:
            raise NotMaster(self.address, client_id)

    def authorized_info(self) -> pb.MasterAuthorizedInfo:
        return pb.MasterAuthorizedInfo(visitAuthorizedToken=self.visit_token)

    def approved_config(self, client_config_id: int) -> pb.ApprovedClientConfig:
        """``configId`` always; ``maxMsgSize`` only when the client holds another id (0 when it sent none)."""
        config = pb.ApprovedClientConfig(configId=self.config_id)
        if client_config_id != self.config_id:
            config.maxMsgSize = self.max_msg_size
        return config
