"""TubeMQ's rules for topic and consumer group names, the one place they live.

The rules are the real servers' and client's (``TBaseConstants`` and ``RegexDef`` of tubemq-core, applied by
the master's and brokers' ``WebParameterUtils`` and the client's ``ConsumerConfig``): a topic matches
``^[a-zA-Z]\\w+$`` and has at most 64 characters, a group ``^[a-zA-Z][\\w-]+$`` and at most 1024, with
``\\w`` meaning ASCII letters, digits and ``_`` as in Java. The service layer turns a broken rule into a 400
naming the field (``gateway.service.names``); the range reader and the Spark options check the prefixes they
build group names from here too.
"""

from __future__ import annotations

import re

__all__ = [
    "GROUP_RULE",
    "MAX_GROUP_LENGTH",
    "MAX_GROUP_PREFIX_LENGTH",
    "MAX_TOPIC_LENGTH",
    "TOPIC_RULE",
    "check_group_prefix",
    "is_group_name",
    "is_topic_name",
]

MAX_TOPIC_LENGTH = 64
MAX_GROUP_LENGTH = 1024
#: a prefix the gateway builds group names from leaves this many characters for what it appends
GROUP_SUFFIX_ROOM = 64
MAX_GROUP_PREFIX_LENGTH = MAX_GROUP_LENGTH - GROUP_SUFFIX_ROOM
_TOPIC_RE = re.compile(r"[a-zA-Z]\w+", re.ASCII)
_GROUP_RE = re.compile(r"[a-zA-Z][\w-]+", re.ASCII)
_GROUP_PREFIX_RE = re.compile(r"[a-zA-Z][\w-]*", re.ASCII)

TOPIC_RULE = f"2-{MAX_TOPIC_LENGTH} ASCII letters, digits or '_', starting with a letter"
GROUP_RULE = f"2-{MAX_GROUP_LENGTH} ASCII letters, digits, '_' or '-', starting with a letter"


def is_topic_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_TOPIC_LENGTH and _TOPIC_RE.fullmatch(name) is not None


def is_group_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_GROUP_LENGTH and _GROUP_RE.fullmatch(name) is not None


def check_group_prefix(prefix: str, what: str = "group prefix") -> None:
    """A prefix of generated group names: ValueError naming ``what`` unless it keeps them valid."""
    if len(prefix) > MAX_GROUP_PREFIX_LENGTH or _GROUP_PREFIX_RE.fullmatch(prefix) is None:
        raise ValueError(
            f"{what} {prefix[:80]!r} must be 1-{MAX_GROUP_PREFIX_LENGTH} ASCII letters, digits, '_' or '-', "
            "starting with a letter (TubeMQ's consumer group name rule, with room for the generated suffix)"
        )
