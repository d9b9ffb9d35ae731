"""The answers of a batch of SendMessage calls (method 13), read in one step.

A broker answers each ``SendMessageRequestP2B`` with a ``SendMessageResponseB2P``; the producer needs six of
its fields. :func:`decode_send_answers` reads every answer of a ``request_many`` batch at once, as the
``SendAnswer`` tuple ``(success, errCode, errMsg, messageId, appendTime, appendOffset)`` (the optional
three None when absent): one C call where the extension is built (``_send_answers.send_answers``), else
:func:`decode_send_answers_py`, its reference, which parses each with protobuf as strictly as every other
answer (:func:`gateway.tubemq.wire.rpc.parse_as`).

An item that is not a success answer of the method (an error, a failure) or whose data the fast reader
does not take (unknown fields, a text that is not ASCII, anything malformed) is None: the connection then
reads it the general way (``parse_response``), so its error is the one the general reader gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.tubemq.errors import ProtocolError
from gateway.tubemq.wire.frame import Frame
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import SUCCESS_PREFIX, RpcResponse, decode_response, parse_as
from gateway.tubemq.wire.speedups import compiled_or

__all__ = ["SendAnswer", "decode_send_answers", "decode_send_answers_py", "send_answer_of"]

SendAnswer = tuple[bool, int, str, int | None, int | None, int | None]
"""``(success, errCode, errMsg, messageId, appendTime, appendOffset)`` of a ``SendMessageResponseB2P``; the
last three None when the broker sent none."""


class SendAnswersLoops(Protocol):
    """What gateway/tubemq/wire/_send_answers.c holds, and its twin :class:`_Python`."""

    def send_answers(
        self, answers: Sequence[Any], method: int, response_type: type, frame_type: type, prefix: bytes, /
    ) -> list[SendAnswer | None]:
        """:func:`decode_send_answers` given the answer classes (``RpcResponse``, ``Frame``) and the usual
        success answer's headers (``SUCCESS_PREFIX``)."""


class _Python:
    """The reference of the C loop: :func:`decode_send_answers_py`, which knows those classes itself."""

    @staticmethod
    def send_answers(
        answers: Sequence[Any], method: int, response_type: type, frame_type: type, prefix: bytes, /
    ) -> list[SendAnswer | None]:
        return decode_send_answers_py(answers, method)


if TYPE_CHECKING:
    import gateway.tubemq.wire._send_answers as _send_answers

    _stub: SendAnswersLoops = _send_answers


def send_answer_of(message: broker_pb.SendMessageResponseB2P) -> SendAnswer:
    """The fields of a parsed ``SendMessageResponseB2P``."""
    return (
        message.success,
        message.errCode,
        message.errMsg,
        message.messageId if message.HasField("messageId") else None,
        message.appendTime if message.HasField("appendTime") else None,
        message.appendOffset if message.HasField("appendOffset") else None,
    )


def decode_send_answers(answers: Sequence[object], method: int) -> list[SendAnswer | None]:
    """Each answer's fields when it is an ``RpcResponse`` of ``method`` (or a ``Frame`` of one, as the
    connection files the usual answer: ``rpc.usual_answer``) that reads as a ``SendMessageResponseB2P``,
    else None (read it the general way)."""
    return _loops.send_answers(answers, method, RpcResponse, Frame, SUCCESS_PREFIX)


def decode_send_answers_py(answers: Sequence[object], method: int) -> list[SendAnswer | None]:
    """:func:`decode_send_answers` in Python: the reference of the C function."""
    decoded: list[SendAnswer | None] = []
    for item in answers:
        answer = item
        if type(item) is Frame:
            try:
                answer = decode_response(item)
            except ProtocolError:
                decoded.append(None)
                continue
        if type(answer) is not RpcResponse or answer.method != method:
            decoded.append(None)
            continue
        try:
            message = parse_as(broker_pb.SendMessageResponseB2P, answer.data)
        except ProtocolError:
            decoded.append(None)
            continue
        decoded.append(send_answer_of(message))
    return decoded


_loops: SendAnswersLoops = compiled_or("gateway.tubemq.wire._send_answers", _Python())
