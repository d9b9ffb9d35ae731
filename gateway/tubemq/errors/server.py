"""errCode answers (§8.1): a master or broker answered a call with an error code; a class per code."""

from __future__ import annotations

from typing import ClassVar

from gateway.tubemq.errors.base import TubeMQError
from gateway.tubemq.refusals import Refusal, credential_hint


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
