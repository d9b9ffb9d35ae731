"""RPC exception answers (RspExceptionBody, §8.2): the node answered with an exception, not a response."""

from __future__ import annotations

from typing import ClassVar

from gateway.tubemq.errors.base import TubeMQError

STATUS_ERROR = 1
STATUS_FATAL = 2


class RemoteException(TubeMQError):
    """The node answered with an RPC exception instead of a response.

    ``status`` is 1 (ERROR) or 2 (FATAL), ``exception_name`` the Java class name as sent (its prefix
    depends on the protocol version), ``message`` the text the node sent (possibly empty).
    Use :func:`remote_exception` to get the most specific subclass.
    """

    #: Java's client closes the link and fails over to the next node for IOException subclasses.
    switch_node: ClassVar[bool] = False
    hint: ClassVar[str] = "the node rejected the call; see the message"

    def __init__(
        self, status: int, exception_name: str, message: str, *, retriable: bool | None = None
    ) -> None:
        self.status = status
        self.exception_name = exception_name
        if retriable is not None:
            self.retriable = retriable
        status_text = {STATUS_ERROR: "ERROR", STATUS_FATAL: "FATAL"}.get(status, f"status {status}")
        detail = f": {message}" if message else ""
        super().__init__(f"{exception_name} ({status_text}){detail}; {self.hint}")
        self.message = message

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def is_io_exception(self) -> bool:
        """True for the Java IOException subclasses: close this link and try the next node (§7.7)."""
        return self.switch_node

    @property
    def short_name(self) -> str:
        """The class name without its package, identical across protocol versions."""
        return self.exception_name.rpartition(".")[2]


class StandbyException(RemoteException):
    """The master called is a standby; close the link and resend to the next master address."""

    retriable = True
    switch_node = True
    hint = "this master is a standby: resend the call to the next master address"


class ServerNotReadyException(RemoteException):
    """The node's RPC server is not running yet."""

    retriable = True
    switch_node = True
    hint = "the node is not ready yet: try another node or retry later"


class UnknownProtocolException(RemoteException):
    """The node could not decode our frame (wrong begin token or block count)."""

    retriable = True
    switch_node = True
    hint = "the node could not decode the frame: the link is closed; reconnect before retrying"


class ServiceStoppingException(RemoteException):
    """The node is shutting down; another answer for the same request may still follow (§1.5)."""

    retriable = True
    hint = "the node is shutting down: use another node or retry later"


_REMOTE_CLASSES: dict[str, type[RemoteException]] = {
    cls.__name__: cls
    for cls in (StandbyException, ServerNotReadyException, UnknownProtocolException, ServiceStoppingException)
}

# A handler crashed on the server; the same call usually works later (§8.2).
_RETRIABLE_REMOTE_NAMES = frozenset({"InvocationTargetException"})


def remote_exception(status: int, exception_name: str, message: str) -> RemoteException:
    """Build the exception for an RspExceptionBody, matching on the class name after the last '.'."""
    short = exception_name.strip().rpartition(".")[2]
    cls = _REMOTE_CLASSES.get(short)
    if cls is not None:
        return cls(status, exception_name, message)
    return RemoteException(status, exception_name, message, retriable=short in _RETRIABLE_REMOTE_NAMES)
