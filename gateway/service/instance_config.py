"""A new consumer instance's core consumer settings from what the client asked for (topics, filters,
start position, bound offsets, byte budget), each value checked and refused naming its field."""

from __future__ import annotations

import secrets
from dataclasses import replace

from gateway.service.consume_limits import PollLimits
from gateway.service.errors import InvalidInput
from gateway.service.instance_spec import InstanceSpec
from gateway.service.names import check_text, validate_topic
from gateway.service.seek import MAX_OFFSET
from gateway.tubemq.consumer import MAX_FILTER_ITEM_LENGTH, BoundConsumption, ConsumerConfig, StartPosition
from gateway.tubemq.wire import MetaFormatError

__all__ = ["MAX_SOURCE_COUNT", "MAX_TOPICS", "instance_config"]

#: topics one instance may subscribe (the real client's META_MAX_BOOKED_TOPIC_COUNT)
MAX_TOPICS = 1024
#: instances taking part in one bound consumption (the wire field is a signed 32-bit integer)
MAX_SOURCE_COUNT = 2**31 - 1
_MAX_SESSION_KEY = 1024
_POSITIONS = {"latest": StartPosition.LATEST, "earliest": StartPosition.EARLIEST}


def instance_config(
    template: ConsumerConfig, limits: PollLimits, spec: InstanceSpec
) -> tuple[ConsumerConfig, int | None]:
    if not spec.topics:
        raise InvalidInput("subscribe at least one topic", field="topics")
    if len(spec.topics) > MAX_TOPICS:
        raise InvalidInput(f"an instance subscribes at most {MAX_TOPICS} topics", field="topics")
    for i, (topic, stream_ids) in enumerate(spec.topics.items()):
        validate_topic(topic, f"topics[{i}]")
        for stream_id in stream_ids or ():
            check_text(stream_id, f"filters.{topic}", MAX_FILTER_ITEM_LENGTH)
    max_bytes = None
    if spec.max_bytes is not None:
        max_bytes = limits.value_bytes(spec.max_bytes, field="maxBytes")
    position = spec.start_position
    if position in _POSITIONS:
        if spec.offsets:
            raise InvalidInput("offsets are only used with startPosition 'offsets'", field="offsets")
        return replace(template, start_position=_POSITIONS[position], bound=None), max_bytes
    if position != "offsets":
        raise InvalidInput(
            f"startPosition {position!r} is not one of latest, earliest, offsets", field="startPosition"
        )
    if not spec.offsets:
        raise InvalidInput("startPosition 'offsets' needs offsets {partitionKey: offset}", field="offsets")
    if not 1 <= spec.source_count <= MAX_SOURCE_COUNT:
        raise InvalidInput(f"sourceCount must be 1-{MAX_SOURCE_COUNT}", field="sourceCount")
    if spec.session_key is not None:
        check_text(spec.session_key, "sessionKey", _MAX_SESSION_KEY)
    for key, offset in spec.offsets.items():
        check_text(key, "offsets", 300)
        if not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput(f"offset of {key[:80]!r} must be 0-{MAX_OFFSET}", field="offsets")
    if spec.source_count > 1 and not spec.session_key:
        raise InvalidInput("several instances sharing bound offsets need one sessionKey", field="sessionKey")
    try:
        bound = BoundConsumption(
            session_key=spec.session_key or secrets.token_hex(8),
            source_count=spec.source_count,
            offsets=dict(spec.offsets),
        )
    except (ValueError, MetaFormatError) as exc:
        raise InvalidInput(f"offsets: {exc}", field="offsets") from None
    unknown = sorted({key.split(":")[1] for key in bound.offsets} - set(spec.topics))
    if unknown:
        raise InvalidInput(f"offsets name topics that are not subscribed: {unknown}", field="offsets")
    return replace(template, start_position=StartPosition.EARLIEST, bound=bound), max_bytes
