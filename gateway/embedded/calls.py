"""What a handler of the embedded :class:`~gateway.embedded.server.RpcServer` is given and may raise.

A handler is ``async def handler(method: int, request: Message, ctx: CallContext) -> Message``: it gets the
request parsed into its method's class and the :class:`CallContext` of the call, and answers with the
method's response message or raises :class:`RemoteFault` for an RPC exception answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from google.protobuf.message import Message

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import STATUS_ERROR, STATUS_FATAL
from gateway.tubemq.wire.methods import SERVICE_METHODS

__all__ = ["CallContext", "Handler", "RemoteFault", "service_offers"]


def service_offers(service: int, method: int) -> bool:
    """True when the Java server accepts ``method`` under ``service`` (services 2 and 3 share 13)."""
    methods = SERVICE_METHODS.get(service)
    return methods is not None and method in methods


class RemoteFault(Exception):
    """Raised by a handler to answer with an RPC exception instead of a response.

    ``status`` is ``errors.STATUS_ERROR`` (1) or ``errors.STATUS_FATAL`` (2); ``exception_name`` is the
    fully qualified Java class name with the ``org.apache.inlong.tubemq.`` prefix (rewritten for older
    protocol versions); ``message`` goes into ``RspExceptionBody.stackTrace``.
    """

    def __init__(self, status: int, exception_name: str, message: str = "") -> None:
        if status not in (STATUS_ERROR, STATUS_FATAL):
            raise ValueError(f"status must be ERROR (1) or FATAL (2), got {status}")
        super().__init__(f"{exception_name}: {message}" if message else exception_name)
        self.status = status
        self.exception_name = exception_name
        self.message = message


@dataclass(frozen=True, slots=True)
class CallContext:
    """What the server knows about one call besides its request message.

    ``timeout`` is the request's own timeout in seconds (0.0 when absent: the answer will be dropped);
    ``received_at`` is the server's monotonic clock when the frame was decoded.
    """

    peer: NodeAddress
    serial: int
    service: int
    protocol_version: int
    timeout: float
    received_at: float
    tls: bool

    @property
    def deadline(self) -> float:
        """Monotonic time after which the answer is dropped."""
        return self.received_at + self.timeout


Handler = Callable[[int, Message, CallContext], Awaitable[Message]]
