"""The one exception tree of the TubeMQ client core.

Every error the core raises is a :class:`TubeMQError`; the service layer and the REST/gRPC adapters
translate this tree once, at their boundary::

    TubeMQError                          retriable: bool (class default, some instances override)
    ├── ProtocolError                    the peer sent bytes we cannot parse; the link must close
    │                                    (frame.FrameError, rpc decode errors subclass it)
    ├── TransportError                   retriable; the link failed, the request may be resent
    │   ├── ConnectError                 could not open (or TLS-handshake) the TCP link
    │   ├── ConnectionClosed             the link closed while the request was pending
    │   └── RequestTimeout               no answer within the request's timeout
    ├── RemoteException                  an RPC ERROR/FATAL answer (RspExceptionBody, §8.2):
    │   │                                status, exception_name, message; built by remote_exception()
    │   ├── StandbyException             switch_node: the master is a standby, use another one
    │   ├── ServerNotReadyException      switch_node: the RPC server has not started yet
    │   ├── UnknownProtocolException     switch_node: the node could not decode our frames
    │   └── ServiceStoppingException     the node is shutting down; use another node or retry later
    ├── ServerError                      an errCode answer inside a SUCCESS response (§8.1):
    │   │                                errno, message, retriable; built by for_code()
    │   ├── Moved (301), BadRequest (400), Unauthorized (401), Forbidden (403), NoData (404),
    │   ├── PartitionOccupied (410), HeartbeatNoNode (411), DuplicatePartition (412),
    │   ├── CertificateFailure (415), ServerReceiveOverflow (419),
    │   ├── InconsistentConsumeType (424) ... TopicNotDeployed (431),
    │   ├── ConsumeGroupForbidden (450), ConsumeSpeedLimit (452), ConsumeContentForbidden (455),
    │   └── InternalServerError (500), ServiceUnavailable (503)
    └── ClientError                      a local check failed; nothing was sent
        ├── InvalidAttribute             also a ValueError: bad message attribute key or value
        │   └── InvalidMessage           a field of a message to publish breaks a publish rule; names it
        ├── MessageTooLarge              body + attributes exceed the topic's limit
        ├── TopicNotPublished            the producer has not published the topic
        ├── NoPartition                  the topic has no partition available for sending
        │   └── PartitionsAway           retriable: it had partitions, its brokers are offline now
        └── ClientClosed                 the producer/consumer/session was closed

``retriable`` means "the same request may succeed if sent again later (possibly to another node)".
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from gateway.tubemq.refusals import Refusal, credential_hint


class TubeMQError(Exception):
    """Base of every error raised by the TubeMQ client core."""

    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --- local protocol and transport failures ---------------------------------------------------------


class ProtocolError(TubeMQError):
    """The peer sent bytes that cannot be parsed; the byte stream is unusable and the link must close."""


class TransportError(TubeMQError):
    """The link to a node failed; the request was not answered and may be sent again."""

    retriable = True


class ConnectError(TransportError):
    """Opening the TCP (or TLS) link to a node failed."""


class ConnectionClosed(TransportError):
    """The link closed while the request was pending (or before it could be written)."""


class RequestTimeout(TransportError):
    """No answer arrived within the request's timeout."""


# --- RPC exceptions (RspExceptionBody, §8.2) -------------------------------------------------------

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


# --- errCode answers (§8.1) -------------------------------------------------------------------------


class ServerError(TubeMQError):
    """A master or broker answered with an ``errCode`` other than 200 (SUCCESS).

    ``errno`` is the code, ``message`` the ``errMsg`` text, ``retriable`` whether the same request may
    succeed later. ``retry_after`` (seconds) is the pause the Java client makes before retrying a fetch,
    or None. Use :func:`for_code` to get the subclass of a code.
    """

    errno: int = -1
    code_name: ClassVar[str] = "UNKNOWN"
    hint: ClassVar[str] = "see the server's message"
    retry_after: ClassVar[float | None] = None

    def __init__(self, message: str, errno: int | None = None, *, retriable: bool | None = None) -> None:
        if errno is not None:
            self.errno = errno
        if retriable is not None:
            self.retriable = retriable
        super().__init__(message)

    def __str__(self) -> str:
        text = self.message or "(no message)"
        return f"{text} [errCode {self.errno} {self.code_name}: {self.advice}]"

    @property
    def advice(self) -> str:
        """What to do: the class's hint (a subclass may choose one by the message)."""
        return self.hint

    def __repr__(self) -> str:
        return f"{type(self).__name__}(errno={self.errno}, message={self.message!r})"


class Moved(ServerError):
    errno = 301
    code_name = "MOVED"
    retriable = True
    retry_after = 0.2
    hint = "the requested offset is below the store's minimum; fetch again from the new position"


class BadRequest(ServerError):
    errno = 400
    code_name = "BAD_REQUEST"
    hint = "a field of the request is missing or invalid (or the data is empty or too large); fix the request"


class Unauthorized(ServerError):
    errno = 401
    code_name = "UNAUTHORIZED"
    hint = "the partition is not registered by this client; register it again"


class Forbidden(ServerError):
    errno = 403
    code_name = "FORBIDDEN"
    retry_after = 2.0
    hint = "the topic or partition does not exist, is closed or is not allowed; check the topic"


class NoData(ServerError):
    errno = 404
    code_name = "NOT_FOUND"
    retriable = True
    retry_after = 0.4
    hint = "no message is available yet; fetch again later"


class PartitionOccupied(ServerError):
    errno = 410
    code_name = "PARTITION_OCCUPIED"
    hint = "another consumer holds the partition; leave it, the master will rebalance"


class HeartbeatNoNode(ServerError):
    errno = 411
    code_name = "HB_NO_NODE"
    hint = "the node does not know this client or partition; register again"


class DuplicatePartition(ServerError):
    errno = 412
    code_name = "DUPLICATE_PARTITION"
    hint = "another consumer registered the partition; drop it"


class CertificateFailure(ServerError):
    errno = 415
    code_name = "CERTIFICATE_FAILURE"
    hint = Refusal.CREDENTIALS.value

    @property
    def advice(self) -> str:
        # missing credentials, a clock off by more than the master's window, wrong ones: each its own fix
        return credential_hint(self.message)


class ServerReceiveOverflow(ServerError):
    errno = 419
    code_name = "SERVER_RECEIVE_OVERFLOW"
    retriable = True
    hint = "the broker's write cache is full; retry later or on another partition"


class InconsistentConsumeType(ServerError):
    errno = 424
    code_name = "CLIENT_INCONSISTENT_CONSUMETYPE"
    hint = "members of the group consume in different modes; use one mode per group"


class InconsistentTopicSet(ServerError):
    errno = 425
    code_name = "CLIENT_INCONSISTENT_TOPICSET"
    hint = "members of the group subscribe to different topics; use the same topics in the group"


class InconsistentFilterSet(ServerError):
    errno = 426
    code_name = "CLIENT_INCONSISTENT_FILTERSET"
    hint = "members of the group use different filters; use the same filters in the group"


class InconsistentSessionKey(ServerError):
    errno = 427
    code_name = "CLIENT_INCONSISTENT_SESSIONKEY"
    hint = "members of the group use different session keys for bound consumption"


class InconsistentSelectBig(ServerError):
    errno = 428
    code_name = "CLIENT_INCONSISTENT_SELECTBIG"
    hint = "members of the group disagree on select-big for bound consumption"


class InconsistentSourceCount(ServerError):
    errno = 429
    code_name = "CLIENT_INCONSISTENT_SOURCECOUNT"
    hint = "members of the group declare different source counts for bound consumption"


class DuplicateIndexId(ServerError):
    errno = 430
    code_name = "CLIENT_DUPLICATE_INDEXID"
    hint = "another member of the group already uses this node id"


class TopicNotDeployed(ServerError):
    errno = 431
    code_name = "TOPIC_NOT_DEPLOYED"
    hint = "the topic is not deployed on the cluster; create it first"


class ConsumeGroupForbidden(ServerError):
    errno = 450
    code_name = "CONSUME_GROUP_FORBIDDEN"
    hint = "the consumer group is black-listed on the cluster"


class ConsumeSpeedLimit(ServerError):
    errno = 452
    code_name = "SERVER_CONSUME_SPEED_LIMIT"
    retriable = True
    hint = "the broker is throttling this group; fetch again after the advised pause"


class ConsumeContentForbidden(ServerError):
    errno = 455
    code_name = "CONSUME_CONTENT_FORBIDDEN"
    hint = "the group may not consume this topic or filter"


class InternalServerError(ServerError):
    errno = 500
    code_name = "INTERNAL_SERVER_ERROR"
    retriable = True
    hint = "the node failed internally; retry later"


class ServiceUnavailable(ServerError):
    errno = 503
    code_name = "SERVICE_UNAVAILABLE"
    retriable = True
    hint = "the broker's read or write service is stopped; retry on another broker or later"


_SERVER_ERRORS: dict[int, type[ServerError]] = {cls.errno: cls for cls in ServerError.__subclasses__()}


def for_code(code: int, message: str) -> ServerError:
    """Return the ServerError subclass instance for an ``errCode``; unknown codes give a plain ServerError.

    Unknown 5xx codes are treated as retriable (server-side trouble), other unknown codes are not.
    """
    cls = _SERVER_ERRORS.get(code)
    if cls is not None:
        return cls(message)
    return ServerError(message, code, retriable=code >= 500)


# --- local checks ----------------------------------------------------------------------------------


class ClientError(TubeMQError):
    """A local check failed before anything was sent."""


class InvalidAttribute(ClientError, ValueError):
    """A message attribute key or value cannot be encoded (reserved characters or tokens, empty key)."""


class InvalidMessage(InvalidAttribute):
    """A field of a message to publish breaks a publish rule (``payload.prepare_message``). ``field``
    names it as the gateway's API does: ``value``, ``key``, ``partition``, ``attributes``,
    ``attributes.<name>``, ``streamId`` or ``msgTime``."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class MessageTooLarge(ClientError):
    """The message (body plus attribute text) exceeds the topic's maximum size."""

    def __init__(self, size: int, limit: int, topic: str | None = None) -> None:
        self.size = size
        self.limit = limit
        self.topic = topic
        where = f" of topic {topic!r}" if topic else ""
        super().__init__(
            f"message of {size} bytes exceeds the limit{where} of {limit} bytes; "
            "send a smaller body or fewer attributes"
        )


class TopicNotPublished(ClientError):
    """The producer has not published the topic, so it knows no partition for it."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} is not published by this producer; publish it before sending")


class NoPartition(ClientError):
    """No partition of the topic is currently available for sending."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"no partition of topic {topic!r} is available: no broker accepts it now; "
            "check that the topic is deployed and its brokers are online, then retry"
        )


class PartitionsAway(NoPartition):
    """A topic that had partitions has none now while the brokers that held them are still configured: a
    broker outage (a stopped broker's partitions leave the master's answers until it registers again), so
    the same send may succeed later; a topic never seen with partitions raises plain ``NoPartition``."""

    retriable = True

    def __init__(self, topic: str, brokers: Collection[int]) -> None:
        self.brokers = tuple(sorted(brokers))
        super().__init__(topic)
        self.message = (
            f"topic {topic!r} has no publishable partition now: broker(s) {list(self.brokers)} that held its "
            "partitions are offline (stopped or restarting); retry later"
        )
        self.args = (self.message,)


class ClientClosed(ClientError):
    """The producer, consumer or session was closed; create a new one."""

    def __init__(self, message: str = "the client has been closed; create a new one") -> None:
        super().__init__(message)
