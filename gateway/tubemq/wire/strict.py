"""Protobuf parsing as strict as the Java peers: required fields checked, string fields UTF-8 (§1.8).

Protobuf's Python parser enforces neither: it leaves ``required`` fields unset and hands a proto2
``string`` field holding bytes that are not UTF-8 out as ``bytes`` (Java would decode them with
replacement characters). :func:`parse_strict` refuses both, naming the problem, so every reader above
can expect complete messages and ``str`` text. Which fields of a type can hold text is worked out once
per type (its "text plan").
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = ["parse_strict"]

_MessageT = TypeVar("_MessageT", bound=Message)


def parse_strict(message_type: type[_MessageT], data: bytes) -> _MessageT:
    """Parse ``data``; raise ``ValueError`` naming the problem (corrupt bytes or missing fields)."""
    message = message_type()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise ValueError(f"{message_type.__name__}: {exc}") from exc
    if not message.IsInitialized():
        # Same wording as Java's UninitializedMessageException, which peers report back.
        missing = ", ".join(cast(Any, message).FindInitializationErrors())
        raise ValueError(f"Message missing required fields: {missing}")
    plan = _text_plans.get(message_type)
    if plan is None:
        plan = _text_plan(message_type)
    if plan is not _NO_TEXT:
        _check_text(message, plan, message_type.__name__)
    return message


# (string fields, message fields) of a message type, each as (name, repeated); built once per type
_TextPlan = tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]
_text_plans: dict[type[Message], _TextPlan] = {}
_NO_TEXT: _TextPlan = ((), ())


def _text_plan(message_type: type[Message]) -> _TextPlan:
    fields = message_type.DESCRIPTOR.fields
    strings = tuple((f.name, _repeated(f)) for f in fields if f.type == FieldDescriptor.TYPE_STRING)
    # Only message fields whose type can hold a string somewhere: a GetMessage answer's thousand
    # TransferedMessages (no strings) are then not visited one by one.
    nested = tuple(
        (f.name, _repeated(f))
        for f in fields
        if f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)
        and _may_hold_text(f.message_type, set())
    )
    plan = _text_plans[message_type] = (strings, nested) if strings or nested else _NO_TEXT
    return plan


def _may_hold_text(descriptor: Any, seen: set[str]) -> bool:
    """Whether a message type has a string field, itself or in a message field at any depth."""
    if descriptor.full_name in seen:
        return False  # a cycle: that type's fields are being looked at already
    seen.add(descriptor.full_name)
    return any(
        f.type == FieldDescriptor.TYPE_STRING
        or (
            f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)
            and _may_hold_text(f.message_type, seen)
        )
        for f in descriptor.fields
    )


def _repeated(field: object) -> bool:
    # ``label`` is gone from protobuf 7's descriptors, ``is_repeated`` missing from older ones.
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def _check_text(message: Message, plan: _TextPlan, path: str) -> None:
    """Raise ValueError when a string field holds bytes that are not UTF-8.

    Protobuf's Python parser accepts such bytes in proto2 ``string`` fields and hands them out as
    ``bytes`` (Java would decode them with replacement characters); every reader here expects ``str``."""
    strings, nested = plan
    for name, repeated in strings:
        value = getattr(message, name)
        if repeated:
            for item in value:
                if type(item) is not str:
                    raise ValueError(f"{path}.{name} holds bytes that are not UTF-8")
        elif type(value) is not str:
            raise ValueError(f"{path}.{name} holds bytes that are not UTF-8")
    for name, repeated in nested:
        if repeated:
            for item in getattr(message, name):
                _check_text(item, _plan_of(item), f"{path}.{name}")
        elif message.HasField(name):
            item = getattr(message, name)
            _check_text(item, _plan_of(item), f"{path}.{name}")


def _plan_of(message: Message) -> _TextPlan:
    plan = _text_plans.get(type(message))
    return plan if plan is not None else _text_plan(type(message))
