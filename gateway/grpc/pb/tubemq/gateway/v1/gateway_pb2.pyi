from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    START_POSITION_UNSPECIFIED: _ClassVar[StartPosition]
    START_POSITION_LATEST: _ClassVar[StartPosition]
    START_POSITION_EARLIEST: _ClassVar[StartPosition]
    START_POSITION_OFFSETS: _ClassVar[StartPosition]
    START_POSITION_TIME: _ClassVar[StartPosition]
START_POSITION_UNSPECIFIED: StartPosition
START_POSITION_LATEST: StartPosition
START_POSITION_EARLIEST: StartPosition
START_POSITION_OFFSETS: StartPosition
START_POSITION_TIME: StartPosition

class Message(_message.Message):
    __slots__ = ("value", "key", "partition", "attributes", "stream_id", "msg_time")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VALUE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_TIME_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    key: str
    partition: int
    attributes: _containers.ScalarMap[str, str]
    stream_id: str
    msg_time: str
    def __init__(self, value: _Optional[bytes] = ..., key: _Optional[str] = ..., partition: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ..., stream_id: _Optional[str] = ..., msg_time: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("partition_key", "broker_id", "partition_id", "offset", "message_id", "append_time_ms")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    partition_key: str
    broker_id: int
    partition_id: int
    offset: int
    message_id: int
    append_time_ms: int
    def __init__(self, partition_key: _Optional[str] = ..., broker_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., offset: _Optional[int] = ..., message_id: _Optional[int] = ..., append_time_ms: _Optional[int] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ("index", "stored", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    stored: Receipt
    error: _status_pb2.Status
    def __init__(self, index: _Optional[int] = ..., stored: _Optional[_Union[Receipt, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("topic", "results", "failed")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    results: _containers.RepeatedCompositeFieldContainer[PublishResult]
    failed: int
    def __init__(self, topic: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PublishResult, _Mapping]]] = ..., failed: _Optional[int] = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ("topic", "messages", "idempotency_key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    idempotency_key: str
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ("sequence", "stored", "error", "replayed")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    stored: Receipt
    error: _status_pb2.Status
    replayed: bool
    def __init__(self, sequence: _Optional[int] = ..., stored: _Optional[_Union[Receipt, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class PublishStreamResponse(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[PublishAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[PublishAck, _Mapping]]] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("index", "broker_id", "broker", "partition_id", "partition_key")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    index: int
    broker_id: int
    broker: str
    partition_id: int
    partition_key: str
    def __init__(self, index: _Optional[int] = ..., broker_id: _Optional[int] = ..., broker: _Optional[str] = ..., partition_id: _Optional[int] = ..., partition_key: _Optional[str] = ...) -> None: ...

class GetTopicResponse(_message.Message):
    __slots__ = ("topic", "max_message_size", "partitions", "shielded_brokers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SHIELDED_BROKERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    max_message_size: int
    partitions: _containers.RepeatedCompositeFieldContainer[Partition]
    shielded_brokers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., max_message_size: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[Partition, _Mapping]]] = ..., shielded_brokers: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateConsumerRequest(_message.Message):
    __slots__ = ("group", "topics", "filters", "start_position", "offsets", "session_key", "source_count", "auto_commit", "max_bytes", "retry_topic", "dead_letter_topic", "max_delivery_attempts", "ack_deadline_ms")
    class FiltersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StreamIds
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StreamIds, _Mapping]] = ...) -> None: ...
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    filters: _containers.MessageMap[str, StreamIds]
    start_position: StartPosition
    offsets: _containers.ScalarMap[str, int]
    session_key: str
    source_count: int
    auto_commit: bool
    max_bytes: int
    retry_topic: str
    dead_letter_topic: str
    max_delivery_attempts: int
    ack_deadline_ms: int
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., filters: _Optional[_Mapping[str, StreamIds]] = ..., start_position: _Optional[_Union[StartPosition, str]] = ..., offsets: _Optional[_Mapping[str, int]] = ..., session_key: _Optional[str] = ..., source_count: _Optional[int] = ..., auto_commit: _Optional[bool] = ..., max_bytes: _Optional[int] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., ack_deadline_ms: _Optional[int] = ...) -> None: ...

class StreamIds(_message.Message):
    __slots__ = ("stream_ids",)
    STREAM_IDS_FIELD_NUMBER: _ClassVar[int]
    stream_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateConsumerResponse(_message.Message):
    __slots__ = ("instance_id", "group", "auto_commit", "client_id")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMMIT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    group: str
    auto_commit: bool
    client_id: str
    def __init__(self, instance_id: _Optional[str] = ..., group: _Optional[str] = ..., auto_commit: _Optional[bool] = ..., client_id: _Optional[str] = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("group", "instance_id", "max_messages", "max_bytes", "timeout_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    max_messages: int
    max_bytes: int
    timeout_ms: int
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ConsumedMessage(_message.Message):
    __slots__ = ("token", "topic", "partition_key", "broker_id", "partition_id", "offset", "message_id", "stream_id", "msg_time", "attributes", "value", "key", "delivery_attempt", "deadline")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    token: str
    topic: str
    partition_key: str
    broker_id: int
    partition_id: int
    offset: int
    message_id: int
    stream_id: str
    msg_time: str
    attributes: _containers.ScalarMap[str, str]
    value: bytes
    key: str
    delivery_attempt: int
    deadline: int
    def __init__(self, token: _Optional[str] = ..., topic: _Optional[str] = ..., partition_key: _Optional[str] = ..., broker_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., offset: _Optional[int] = ..., message_id: _Optional[int] = ..., stream_id: _Optional[str] = ..., msg_time: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ..., value: _Optional[bytes] = ..., key: _Optional[str] = ..., delivery_attempt: _Optional[int] = ..., deadline: _Optional[int] = ...) -> None: ...

class PollResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConsumedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ConsumedMessage, _Mapping]]] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("group", "instance_id", "tokens", "all_delivered", "rollback")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALL_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    tokens: _containers.RepeatedScalarFieldContainer[str]
    all_delivered: bool
    rollback: bool
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., tokens: _Optional[_Iterable[str]] = ..., all_delivered: _Optional[bool] = ..., rollback: _Optional[bool] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("committed", "rolled_back", "stale", "pending", "awaiting_batch")
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    AWAITING_BATCH_FIELD_NUMBER: _ClassVar[int]
    committed: int
    rolled_back: int
    stale: _containers.RepeatedScalarFieldContainer[str]
    pending: int
    awaiting_batch: int
    def __init__(self, committed: _Optional[int] = ..., rolled_back: _Optional[int] = ..., stale: _Optional[_Iterable[str]] = ..., pending: _Optional[int] = ..., awaiting_batch: _Optional[int] = ...) -> None: ...

class DeleteConsumerRequest(_message.Message):
    __slots__ = ("group", "instance_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class DeleteConsumerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("group", "instance_id", "resume_token", "max_messages", "max_bytes")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    resume_token: str
    max_messages: int
    max_bytes: int
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., resume_token: _Optional[str] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConsumedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ConsumedMessage, _Mapping]]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("group", "instance_id", "tokens", "delay_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    tokens: _containers.RepeatedScalarFieldContainer[str]
    delay_ms: int
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., tokens: _Optional[_Iterable[str]] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("retried", "dead_lettered", "stale", "failed", "error", "pending")
    RETRIED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    retried: int
    dead_lettered: int
    stale: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedScalarFieldContainer[str]
    error: str
    pending: int
    def __init__(self, retried: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., stale: _Optional[_Iterable[str]] = ..., failed: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., pending: _Optional[int] = ...) -> None: ...

class ExtendDeadlinesRequest(_message.Message):
    __slots__ = ("group", "instance_id", "tokens", "extend_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXTEND_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    tokens: _containers.RepeatedScalarFieldContainer[str]
    extend_ms: int
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., tokens: _Optional[_Iterable[str]] = ..., extend_ms: _Optional[int] = ...) -> None: ...

class ExtendDeadlinesResponse(_message.Message):
    __slots__ = ("extended", "stale", "deadline")
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    extended: int
    stale: _containers.RepeatedScalarFieldContainer[str]
    deadline: int
    def __init__(self, extended: _Optional[int] = ..., stale: _Optional[_Iterable[str]] = ..., deadline: _Optional[int] = ...) -> None: ...

class SeekRequest(_message.Message):
    __slots__ = ("group", "instance_id", "position", "offsets", "partitions", "time_ms", "time_zone")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    group: str
    instance_id: str
    position: StartPosition
    offsets: _containers.ScalarMap[str, int]
    partitions: _containers.RepeatedScalarFieldContainer[str]
    time_ms: int
    time_zone: str
    def __init__(self, group: _Optional[str] = ..., instance_id: _Optional[str] = ..., position: _Optional[_Union[StartPosition, str]] = ..., offsets: _Optional[_Mapping[str, int]] = ..., partitions: _Optional[_Iterable[str]] = ..., time_ms: _Optional[int] = ..., time_zone: _Optional[str] = ...) -> None: ...

class SeekResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[SeekedPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[SeekedPartition, _Mapping]]] = ...) -> None: ...

class SeekedPartition(_message.Message):
    __slots__ = ("partition_key", "curr_offset", "max_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    CURR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: str
    curr_offset: int
    max_offset: int
    def __init__(self, partition_key: _Optional[str] = ..., curr_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class GetGroupLagRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GetGroupLagResponse(_message.Message):
    __slots__ = ("group", "consumers", "lag", "topics", "source")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    consumers: int
    lag: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicLag]
    source: str
    def __init__(self, group: _Optional[str] = ..., consumers: _Optional[int] = ..., lag: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicLag, _Mapping]]] = ..., source: _Optional[str] = ...) -> None: ...

class TopicLag(_message.Message):
    __slots__ = ("topic", "lag", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    lag: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    def __init__(self, topic: _Optional[str] = ..., lag: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("partition_key", "broker_id", "partition_id", "committed_offset", "end_offset", "lag", "oldest_unconsumed_msg_time")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNCONSUMED_MSG_TIME_FIELD_NUMBER: _ClassVar[int]
    partition_key: str
    broker_id: int
    partition_id: int
    committed_offset: int
    end_offset: int
    lag: int
    oldest_unconsumed_msg_time: str
    def __init__(self, partition_key: _Optional[str] = ..., broker_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., committed_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., oldest_unconsumed_msg_time: _Optional[str] = ...) -> None: ...

class PushSubscriptionDefinition(_message.Message):
    __slots__ = ("name", "group", "topics", "endpoint", "retry_topic", "dead_letter_topic", "max_delivery_attempts", "payload", "value_format", "start_position", "ack_deadline_ms", "min_backoff_ms", "max_backoff_ms", "max_concurrency", "ordered_by_key", "secret", "token", "token_audience", "paused")
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StreamIds
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StreamIds, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    VALUE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    ORDERED_BY_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    group: str
    topics: _containers.MessageMap[str, StreamIds]
    endpoint: str
    retry_topic: str
    dead_letter_topic: str
    max_delivery_attempts: int
    payload: str
    value_format: str
    start_position: str
    ack_deadline_ms: int
    min_backoff_ms: int
    max_backoff_ms: int
    max_concurrency: int
    ordered_by_key: bool
    secret: str
    token: bool
    token_audience: str
    paused: bool
    def __init__(self, name: _Optional[str] = ..., group: _Optional[str] = ..., topics: _Optional[_Mapping[str, StreamIds]] = ..., endpoint: _Optional[str] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., payload: _Optional[str] = ..., value_format: _Optional[str] = ..., start_position: _Optional[str] = ..., ack_deadline_ms: _Optional[int] = ..., min_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., ordered_by_key: _Optional[bool] = ..., secret: _Optional[str] = ..., token: _Optional[bool] = ..., token_audience: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class PushSubscriptionState(_message.Message):
    __slots__ = ("status", "in_flight", "deliveries", "last_outcome", "last_delivery_at", "last_error")
    class DeliveriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    LAST_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LAST_DELIVERY_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    status: str
    in_flight: int
    deliveries: _containers.ScalarMap[str, int]
    last_outcome: str
    last_delivery_at: str
    last_error: str
    def __init__(self, status: _Optional[str] = ..., in_flight: _Optional[int] = ..., deliveries: _Optional[_Mapping[str, int]] = ..., last_outcome: _Optional[str] = ..., last_delivery_at: _Optional[str] = ..., last_error: _Optional[str] = ...) -> None: ...

class PushSubscription(_message.Message):
    __slots__ = ("definition", "has_secret", "source", "state")
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    HAS_SECRET_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    definition: PushSubscriptionDefinition
    has_secret: bool
    source: str
    state: PushSubscriptionState
    def __init__(self, definition: _Optional[_Union[PushSubscriptionDefinition, _Mapping]] = ..., has_secret: _Optional[bool] = ..., source: _Optional[str] = ..., state: _Optional[_Union[PushSubscriptionState, _Mapping]] = ...) -> None: ...

class ListSubscriptionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[PushSubscription]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[PushSubscription, _Mapping]]] = ...) -> None: ...

class GetSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscription
    def __init__(self, subscription: _Optional[_Union[PushSubscription, _Mapping]] = ...) -> None: ...

class CreateSubscriptionRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscriptionDefinition
    def __init__(self, subscription: _Optional[_Union[PushSubscriptionDefinition, _Mapping]] = ...) -> None: ...

class CreateSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscription
    def __init__(self, subscription: _Optional[_Union[PushSubscription, _Mapping]] = ...) -> None: ...

class ReplaceSubscriptionRequest(_message.Message):
    __slots__ = ("name", "subscription")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    subscription: PushSubscriptionDefinition
    def __init__(self, name: _Optional[str] = ..., subscription: _Optional[_Union[PushSubscriptionDefinition, _Mapping]] = ...) -> None: ...

class ReplaceSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscription
    def __init__(self, subscription: _Optional[_Union[PushSubscription, _Mapping]] = ...) -> None: ...

class DeleteSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscription
    def __init__(self, subscription: _Optional[_Union[PushSubscription, _Mapping]] = ...) -> None: ...

class ResumeSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: PushSubscription
    def __init__(self, subscription: _Optional[_Union[PushSubscription, _Mapping]] = ...) -> None: ...
