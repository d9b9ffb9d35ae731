"""What the embedded broker's handlers share: answer codes, request field checks, the store table.

Texts of the checks follow the Java broker (``PBParameterUtils``, ``MessageStoreManager``) so that a client
sees the same ``errCode``/``errMsg`` pairs as from a real broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from gateway.embedded.store import Retention, TopicStore, store_path
from gateway.embedded.topics import TopicSpec

__all__ = [
    "BAD_REQUEST",
    "DUPLICATE_PARTITION",
    "FORBIDDEN",
    "HB_NO_NODE",
    "INTERNAL_SERVER_ERROR",
    "NOT_FOUND",
    "PARTITION_OCCUPIED",
    "SERVICE_UNAVAILABLE",
    "SUCCESS",
    "UNAUTHORIZED",
    "BadField",
    "StoreTable",
    "WrongPartition",
    "check_client_id",
    "check_group_name",
    "check_topic",
    "check_topic_partition",
    "is_blank",
    "java_trim",
]

SUCCESS = 200
BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
PARTITION_OCCUPIED = 410
HB_NO_NODE = 411
DUPLICATE_PARTITION = 412
INTERNAL_SERVER_ERROR = 500
SERVICE_UNAVAILABLE = 503

MAX_CLIENT_ID_LENGTH = 1024
MAX_GROUP_NAME_LENGTH = 1024
MAX_TOPIC_NAME_LENGTH = 64
STORE_PARTITION_BASE = 10000


class BadField(Exception):
    """A request field failed a check; carries the answer's ``errCode`` and ``errMsg``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class WrongPartition(ValueError):
    """The partition id names no store or partition of the topic on this broker."""


def java_trim(text: str) -> str:
    """``String.trim()``: drop leading and trailing characters up to U+0020 (controls and space)."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def is_blank(text: str) -> bool:
    return not text.strip()


def _check_string(name: str, value: str, max_length: int) -> str:
    if is_blank(value):
        raise BadField(BAD_REQUEST, f"Request miss necessary {name} data!")
    value = java_trim(value)
    if len(value) > max_length:
        raise BadField(BAD_REQUEST, f"{name}'s length over max value, allowed max length is {max_length}")
    return value


def check_client_id(value: str) -> str:
    return _check_string("clientId", value, MAX_CLIENT_ID_LENGTH)


def check_group_name(value: str) -> str:
    return _check_string("groupName", value, MAX_GROUP_NAME_LENGTH)


def check_topic(value: str, topics: Mapping[str, TopicSpec]) -> TopicSpec:
    """The topic must be deployed on this broker (403 otherwise)."""
    name = _check_string("topicName", value, MAX_TOPIC_NAME_LENGTH)
    spec = topics.get(name)
    if spec is None:
        raise BadField(FORBIDDEN, f"topicName {name} not existed, please check your configure")
    return spec


def _has_partition_index(spec: TopicSpec, partition_id: int) -> bool:
    """Whether the partition index (``id % 10000``) exists in ``spec``; a negative id never does."""
    return partition_id >= 0 and partition_id % STORE_PARTITION_BASE < spec.partitions


def check_topic_partition(value: str, partition_id: int, topics: Mapping[str, TopicSpec]) -> TopicSpec:
    """As :func:`check_topic`, and the partition index (``id % 10000``) must exist (403 otherwise)."""
    spec = check_topic(value, topics)
    if not _has_partition_index(spec, partition_id):
        raise BadField(
            FORBIDDEN, f"partitionId {spec.name}-{partition_id} not existed, please check your configure"
        )
    return spec


class StoreTable:
    """Every (topic, store index) store of one broker, opened together and closed together.

    Stores live under ``data_dir/<topic>/store-<n>.log`` when ``data_dir`` is set, else in memory.
    """

    def __init__(
        self,
        topics: Iterable[TopicSpec],
        data_dir: Path | None,
        *,
        fsync: bool = False,
        clock: Callable[[], float] = time.time,
        id_clock: Callable[[], int] = time.monotonic_ns,
        retention: Retention | None = None,
    ) -> None:
        self._topics = {spec.name: spec for spec in topics}
        self._stores: dict[tuple[str, int], TopicStore] = {}
        try:
            for spec in self._topics.values():
                for index in range(spec.stores):
                    path = store_path(data_dir, spec.name, index) if data_dir is not None else None
                    self._stores[(spec.name, index)] = TopicStore(
                        spec.name,
                        index,
                        path=path,
                        fsync=fsync,
                        clock=clock,
                        id_clock=id_clock,
                        retention=retention,
                    )
        except BaseException:
            self.close()
            raise

    def for_partition(self, topic: str, partition_id: int) -> TopicStore:
        """The store holding ``partition_id``; raises :class:`WrongPartition` like the Java store manager."""
        spec = self._topics[topic]
        if not _has_partition_index(spec, partition_id):
            raise WrongPartition(
                f"Wrong partition value {partition_id},valid partitions in (0,{spec.partitions - 1})"
            )
        store = self._stores.get((topic, partition_id // STORE_PARTITION_BASE))
        if store is None:
            # The Java broker would create a store for any store index; ours are fixed by the topic spec.
            raise WrongPartition(
                f"Wrong partition value {partition_id},valid store indexes in (0,{spec.stores - 1})"
            )
        return store

    def get(self, topic: str, store_index: int) -> TopicStore:
        return self._stores[(topic, store_index)]

    def __iter__(self) -> Iterator[TopicStore]:
        return iter(self._stores.values())

    def __len__(self) -> int:
        return len(self._stores)

    def enforce_retention(self) -> int:
        """Apply every store's retention; returns the messages dropped."""
        return sum(store.enforce_retention() for store in self._stores.values())

    async def enforce_retention_async(self) -> int:
        """:meth:`enforce_retention` with the file work (compaction) off the event loop."""
        return sum([await store.enforce_retention_async() for store in self._stores.values()])

    def close(self) -> None:
        for store in self._stores.values():
            store.close()

    async def aclose(self) -> None:
        """Close every store once its queued appends were written."""
        for store in self._stores.values():
            await store.aclose()

    def __repr__(self) -> str:
        total = sum(len(store) for store in self._stores.values())
        return f"StoreTable(stores={len(self._stores)}, messages={total})"
