"""Errors of the service layer, independent of HTTP and gRPC.

Each error has a ``kind`` that the adapters translate, in one place each, to an HTTP status or a gRPC code::

    ServiceError (kind, message, field, index, resource_name)
     ├── InvalidInput        -> 400 / INVALID_ARGUMENT   a request field is wrong; names the field
     ├── PayloadTooLarge     -> 413 / RESOURCE_EXHAUSTED a message is above the topic's limit; carries it
     ├── NotFound            -> 404 / NOT_FOUND          e.g. the topic has no publishable partitions
     ├── Gone                -> 410 / FAILED_PRECONDITION a consumer instance expired or was deleted
 ├── Conflict            -> 409 / ABORTED            one operation at a time on the resource (a seek on
 │                                                   a consumer instance); carries retry_after
     ├── AlreadyDefined      -> 409 / ALREADY_EXISTS     the name (or what must be unique) is taken, or
     │                                                   the resource is defined where the API cannot
     │                                                   change it (a push subscription of the file)
     ├── KeyReused           -> 422 / FAILED_PRECONDITION an idempotency key sent with another request
     ├── Unavailable         -> 503 / UNAVAILABLE        no broker can take it now; carries retry_after
     ├── RateLimited         -> 429 / RESOURCE_EXHAUSTED the caller is above its quota; carries retry_after
     ├── UpstreamError       -> 502 / INTERNAL           TubeMQ answered with an error we cannot fix here
     ├── Unauthenticated     -> 401 / UNAUTHENTICATED    no, malformed, unknown or expired credentials
     └── PermissionDenied    -> 403 / PERMISSION_DENIED  a known principal lacks the right; names the
                                                         principal, the action and the resource

A ``field`` is named in the service's own words: a body field by its proto3 JSON name, which REST and gRPC
share (``startPosition``, ``messages[2].streamId``); a call parameter by the service method's parameter name
(``max_messages``, ``max_bytes``, ``timeout``, ``resume_after``), which each adapter maps to its own
spelling (REST ``timeout_ms`` and ``Last-Event-ID``, gRPC ``timeoutMs`` and ``resumeToken``) with
:func:`renamed_fields`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum


class ErrorKind(Enum):
    INVALID = "invalid_argument"
    TOO_LARGE = "payload_too_large"
    NOT_FOUND = "not_found"
    GONE = "gone"
    CONFLICT = "conflict"
    ALREADY_DEFINED = "already_defined"
    UNPROCESSABLE = "unprocessable"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    UPSTREAM = "upstream_error"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"


class ServiceError(Exception):
    """Base of every error the service layer raises towards the adapters."""

    kind: ErrorKind = ErrorKind.UPSTREAM
    #: seconds after which retrying can succeed (the errors that say so); in the body as retryAfterSeconds
    retry_after: float | None = None

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        index: int | None = None,
        errno: int | None = None,
        resource_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.index = index
        self.errno = errno
        #: The missing thing a NotFound / Gone names (topic, partition key, consumer instance id), for
        #: adapters that say it apart from the message (gRPC's google.rpc.ResourceInfo).
        self.resource_name = resource_name

    def to_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.kind.value, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.index is not None:
            body["index"] = self.index
        if self.errno is not None:
            body["tubemqErrorCode"] = self.errno
        if self.retry_after is not None:
            body["retryAfterSeconds"] = self.retry_after
        return body


class InvalidInput(ServiceError):
    kind = ErrorKind.INVALID


@contextmanager
def renamed_fields(fields: Mapping[str, str]) -> Iterator[None]:
    """Rename the ``field`` of a ServiceError raised inside to an adapter's spelling (``fields``: the
    service's name -> the adapter's), and the message's leading field name with it ("max_messages must
    be..."); other fields and other exceptions pass unchanged."""
    try:
        yield
    except ServiceError as exc:
        name = exc.field
        if name is not None and name in fields:
            exc.field = fields[name]
            if exc.message.startswith(f"{name} "):
                exc.message = exc.field + exc.message[len(name) :]
                exc.args = (exc.message,)
        raise


class PayloadTooLarge(ServiceError):
    kind = ErrorKind.TOO_LARGE

    def __init__(self, message: str, *, limit: int, field: str | None = None, index: int | None = None):
        super().__init__(message, field=field, index=index)
        self.limit = limit

    def to_dict(self) -> dict[str, object]:
        body = super().to_dict()
        body["limit"] = self.limit
        return body


class NotFound(ServiceError):
    kind = ErrorKind.NOT_FOUND


class Gone(ServiceError):
    kind = ErrorKind.GONE


class Conflict(ServiceError):
    """Another operation of the same kind is still running on the resource (one seek at a time on a consumer
    instance): retry after ``retry_after`` seconds, when it has surely ended."""

    kind = ErrorKind.CONFLICT

    def __init__(self, message: str, *, retry_after: float, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after: float = retry_after


class AlreadyDefined(ServiceError):
    """What the request would define is taken (a name, a group another definition has) or is defined
    elsewhere, where this API cannot change it; the message says by what and what to do."""

    kind = ErrorKind.ALREADY_DEFINED


class KeyReused(ServiceError):
    """The idempotency key was first used for a request with another body or other options: a new request
    needs a new key."""

    kind = ErrorKind.UNPROCESSABLE


class Unavailable(ServiceError):
    kind = ErrorKind.UNAVAILABLE

    def __init__(self, message: str, *, retry_after: float = 1.0, errno: int | None = None) -> None:
        super().__init__(message, errno=errno)
        self.retry_after: float = retry_after


@dataclass(frozen=True, slots=True)
class Quota:
    """The quota a :class:`RateLimited` caller ran out of, as the adapters advertise it.

    ``name`` identifies the policy (``messages``, ``bytes``, ``instances``); ``quota`` units are allowed
    per ``window`` seconds (None: a count held at once, not a rate); ``remaining`` is what is left now;
    ``unit`` says what is counted (``requests``-like messages, ``content-bytes``, or instances).
    """

    name: str
    quota: int
    window: float | None
    remaining: int
    unit: str


class RateLimited(ServiceError):
    """The caller (its principal, or its address when anonymous) is above one of its quotas."""

    kind = ErrorKind.RATE_LIMITED

    def __init__(self, message: str, *, retry_after: float, quota: Quota) -> None:
        super().__init__(message)
        self.retry_after: float = retry_after
        self.quota = quota


class UpstreamError(ServiceError):
    kind = ErrorKind.UPSTREAM


class Unauthenticated(ServiceError):
    """The request carries no usable credentials. The message says what was wrong and what to send; it
    never repeats the credential itself."""

    kind = ErrorKind.UNAUTHENTICATED


class PermissionDenied(ServiceError):
    """An authenticated principal is not allowed ``action`` on ``resource`` (both named in the message)."""

    kind = ErrorKind.PERMISSION_DENIED

    def __init__(self, message: str, *, action: str, resource: str) -> None:
        super().__init__(message)
        self.action = action
        self.resource = resource

    def to_dict(self) -> dict[str, object]:
        body = super().to_dict()
        body["action"] = self.action
        body["resource"] = self.resource
        return body
