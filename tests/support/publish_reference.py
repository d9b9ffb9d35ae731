"""What the REST publish path gives the service for a JSON body by its reference (pure Python) steps: the
oracle the hand-read JSON batch and its C twin are held to (tests/api/test_publish_json.py,
test_publish_parse.py)."""

from __future__ import annotations

from gateway.api.publish_parse import parse_json_batch_py
from gateway.service.errors import InvalidInput
from gateway.tubemq.errors import InvalidMessage
from gateway.tubemq.wire import BatchPreparer, PreparedMessage

__all__ = ["prepared_reference"]


def prepared_reference(body: bytes, max_messages: int) -> list[PreparedMessage] | None:
    """What the reference gives the service for ``body``: its prepared messages, or None when reading or
    preparing it raises (an error the reference names) or the count is out of bounds."""
    try:
        messages = parse_json_batch_py(body)
    except InvalidInput:
        return None
    if not messages or len(messages) > max_messages:
        return None
    prepare = BatchPreparer().prepare
    try:
        return [prepare(m.value, m.attributes, m.stream_id, m.msg_time, m.key, m.partition) for m in messages]
    except InvalidMessage:
        return None
