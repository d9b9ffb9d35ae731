"""What the tests of the C twins share: the compiled module itself (skipped where no compiler is), the
outcome of a call that may raise, delivered messages with odd fields, stored publish outcomes, and a message
whose slot belongs to another class (a C reader must not take its offset on trust)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import runs_of
from gateway.service.publish import PublishOutcome
from gateway.tubemq.consumer import batch
from gateway.tubemq.consumer.batch import ConsumedMessage
from gateway.tubemq.producer import SendResult
from tests.support.build_support import compiler

__all__ = [
    "ODD_MESSAGE_CHANGES",
    "ForeignSlot",
    "delivered_message",
    "error_of",
    "extension",
    "foreign_slot_message",
    "stored_outcome",
]


def extension(name: str = "gateway.tubemq.consumer._batch") -> ModuleType:
    """The compiled module ``name`` (one of ``speedups.EXTENSIONS``), imported whatever the switch says;
    skips where no C compiler is, fails where one is but the module was not built."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        if compiler() is None:
            pytest.skip(f"no C compiler or Python headers on this machine: the pure path only ({exc})")
        raise AssertionError(
            f"a C compiler is here but the extension is not built ({exc}): run ./scripts/test.sh "
            "(or pip install -e .) to build it"
        ) from exc
    if name == "gateway.tubemq.consumer._batch":
        module.set_message_type(ConsumedMessage, batch._MESSAGE_FIELDS)
    return module


def error_of(call: Callable[[], Any]) -> tuple[type[BaseException], str] | None:
    """The type and text of what ``call`` raises; None when it returns."""
    try:
        call()
    except Exception as exc:
        return type(exc), str(exc)
    return None


def delivered_message(**changes: Any) -> DeliveredMessage:
    fields = {"message_id": 7, "body": b"v", "attributes": {"a": "b"}, "stream_id": "s", "msg_time": None}
    fields |= {k: v for k, v in changes.items() if k in fields or k in ("offset", "key")}
    message = ConsumedMessage(
        fields["message_id"],
        fields["body"],
        fields["attributes"],
        fields["stream_id"],
        fields["msg_time"],
        0,
        0,
        fields.get("offset"),
        fields.get("key"),
    )
    outer = {"seq": 1, "topic": "t", "partition_key": "1:t:0", "broker_id": 1, "partition_id": 0}
    outer |= {k: v for k, v in changes.items() if k in outer or k in ("attempt", "deadline_ms")}
    return DeliveredMessage(
        outer["seq"],
        outer["topic"],
        outer["partition_key"],
        outer["broker_id"],
        outer["partition_id"],
        message,
        outer.get("attempt", 1),
        0.0,
        outer.get("deadline_ms", 0),
    )


#: fields of a delivered message that the compiled answers hand back, or take as the references do
ODD_MESSAGE_CHANGES: list[dict[str, Any]] = [
    {},
    {"message_id": 2**64 - 1},
    {"message_id": 2**64},
    {"message_id": -(2**63) - 1},
    {"offset": -1},
    {"offset": 2**70},
    {"seq": 2**70},
    {"seq": -3},
    {"topic": "\ud800"},
    {"key": "\udfff"},
    {"key": ""},
    {"attributes": {"\ud800": "x"}},
    {"attributes": {1: "x"}},
    {"stream_id": ""},
    {"stream_id": b"s"},
    {"body": b""},
    {"body": bytearray(b"v")},
    {"topic": None},
    {"broker_id": "1"},
    {"deadline_ms": 2**64},
    {"attempt": -1},
]


class _SlotOwner:
    __slots__ = ("topic",)


class ForeignSlot:
    """A run whose ``topic`` is another class's slot descriptor: Python refuses to read it (TypeError); a C
    reader taking the descriptor's offset on trust reads this object's first slot (``a_secret``)."""

    __slots__ = (
        "a_secret",
        "attempt",
        "broker_id",
        "count",
        "deadline",
        "deadline_ms",
        "first",
        "messages",
        "partition_id",
        "partition_key",
        "start",
    )


ForeignSlot.topic = _SlotOwner.__dict__["topic"]  # type: ignore[attr-defined]


def foreign_slot_message() -> ForeignSlot:
    plain, odd = runs_of([delivered_message()]).runs[0], ForeignSlot()
    odd.a_secret = "not the topic"
    for name in ForeignSlot.__slots__[1:]:
        setattr(odd, name, getattr(plain, name))
    return odd


def stored_outcome(**changes: Any) -> PublishOutcome:
    """A publish stored by a broker, with ``changes`` to its result's fields (``index``: its place)."""
    fields: dict[str, Any] = {
        "topic": "t",
        "partition_id": 3,
        "partition_key": "1:t:3",
        "broker_id": 1,
        "message_id": 99,
        "append_time_ms": 1_700_000_000_000,
        "append_offset": 12,
        "partition_index": 3,
    }
    index = changes.pop("index", 0)
    fields.update(changes)
    return PublishOutcome(index, result=SendResult(**fields))
