from google.protobuf import any_pb2 as _any_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    error: ErrorDetail
    def __init__(self, index: _Optional[int] = ..., stored: _Optional[_Union[Receipt, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("topic", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ("sequence", "stored", "error")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    stored: Receipt
    error: ErrorDetail
    def __init__(self, sequence: _Optional[int] = ..., stored: _Optional[_Union[Receipt, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

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

class Topic(_message.Message):
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

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "field", "index", "limit", "retry_after_seconds", "tubemq_error_code", "grpc_code")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TUBEMQ_ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    field: str
    index: int
    limit: int
    retry_after_seconds: float
    tubemq_error_code: int
    grpc_code: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., index: _Optional[int] = ..., limit: _Optional[int] = ..., retry_after_seconds: _Optional[float] = ..., tubemq_error_code: _Optional[int] = ..., grpc_code: _Optional[int] = ...) -> None: ...

class ErrorStatus(_message.Message):
    __slots__ = ("code", "message", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    details: _containers.RepeatedCompositeFieldContainer[_any_pb2.Any]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., details: _Optional[_Iterable[_Union[_any_pb2.Any, _Mapping]]] = ...) -> None: ...
