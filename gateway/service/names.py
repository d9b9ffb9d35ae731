"""Topic and consumer group names, checked by TubeMQ's own rules (:mod:`gateway.tubemq.names`) before
anything travels: a broken rule is an InvalidInput (400 / INVALID_ARGUMENT) naming the field, for REST and
gRPC alike. Checking them here keeps odd names (control characters, non-Latin-1 text, megabyte names) away
from the master, from response headers and from the logs.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.service.errors import InvalidInput
from gateway.tubemq.names import (
    GROUP_RULE,
    MAX_GROUP_LENGTH,
    MAX_TOPIC_LENGTH,
    TOPIC_RULE,
    is_group_name,
    is_topic_name,
)

__all__ = ["MAX_GROUP_LENGTH", "MAX_TOPIC_LENGTH", "check_text", "validate_group", "validate_topic"]


def _shown(name: str) -> str:
    """The name as an error message repeats it: escaped, and cut short."""
    return repr(name[:80]) + ("..." if len(name) > 80 else "")


def _check(name: object, field: str, valid: Callable[[object], bool], what: str, rule: str) -> str:
    if not isinstance(name, str) or not valid(name):
        shown = _shown(name) if isinstance(name, str) else type(name).__name__
        raise InvalidInput(f"invalid {what} name {shown}: use {rule}", field=field)
    return name


def validate_topic(topic: object, field: str = "topic") -> str:
    """Return ``topic`` if it is a valid TubeMQ topic name; raises InvalidInput naming ``field``."""
    return _check(topic, field, is_topic_name, "topic", TOPIC_RULE)


def validate_group(group: object, field: str = "group") -> str:
    """Return ``group`` if it is a valid TubeMQ consumer group name; raises InvalidInput naming ``field``."""
    return _check(group, field, is_group_name, "consumer group", GROUP_RULE)


def check_text(text: object, field: str, max_length: int) -> None:
    """A name-like request value (filter item, session key, partition key): 1-``max_length`` printable
    characters that are valid Unicode (no lone surrogates), else InvalidInput naming ``field``."""
    if (
        not isinstance(text, str)
        or not text.strip()
        or len(text) > max_length
        or not text.isprintable()
        or (not text.isascii() and not _encodable(text))
    ):
        shown = repr(text[:40]) if isinstance(text, str) else type(text).__name__
        raise InvalidInput(
            f"{field} value {shown} must be 1-{max_length} printable characters of valid Unicode", field=field
        )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
