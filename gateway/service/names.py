"""Topic and consumer group names, checked by TubeMQ's own rules before anything travels.

The rules are the real client's (``TBaseConstants`` of tubemq-core: a topic matches ``^[a-zA-Z]\\w+$`` and
has at most 64 characters, a group ``^[a-zA-Z][\\w-]+$`` and at most 1024), with ``\\w`` meaning ASCII
letters, digits and ``_`` as in Java. Checking them here keeps odd names (control characters, non-Latin-1
text, megabyte names) away from the master, from response headers and from the logs.
"""

from __future__ import annotations

import re

from gateway.service.errors import InvalidInput

__all__ = ["MAX_GROUP_LENGTH", "MAX_TOPIC_LENGTH", "check_text", "validate_group", "validate_topic"]

MAX_TOPIC_LENGTH = 64
MAX_GROUP_LENGTH = 1024
_TOPIC_RE = re.compile(r"[a-zA-Z]\w+", re.ASCII)
_GROUP_RE = re.compile(r"[a-zA-Z][\w-]+", re.ASCII)


def _shown(name: str) -> str:
    """The name as an error message repeats it: escaped, and cut short."""
    return repr(name[:80]) + ("..." if len(name) > 80 else "")


def _check(name: object, field: str, pattern: re.Pattern[str], max_length: int, what: str, rule: str) -> str:
    if not isinstance(name, str) or len(name) > max_length or pattern.fullmatch(name) is None:
        shown = _shown(name) if isinstance(name, str) else type(name).__name__
        raise InvalidInput(f"invalid {what} name {shown}: use {rule}", field=field)
    return name


_TOPIC_RULE = f"2-{MAX_TOPIC_LENGTH} ASCII letters, digits or '_', starting with a letter"
_GROUP_RULE = f"2-{MAX_GROUP_LENGTH} ASCII letters, digits, '_' or '-', starting with a letter"


def validate_topic(topic: object, field: str = "topic") -> str:
    """Return ``topic`` if it is a valid TubeMQ topic name; raises InvalidInput naming ``field``."""
    return _check(topic, field, _TOPIC_RE, MAX_TOPIC_LENGTH, "topic", _TOPIC_RULE)


def validate_group(group: object, field: str = "group") -> str:
    """Return ``group`` if it is a valid TubeMQ consumer group name; raises InvalidInput naming ``field``."""
    return _check(group, field, _GROUP_RE, MAX_GROUP_LENGTH, "consumer group", _GROUP_RULE)


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
