"""Core -> service: the one translation of the TubeMQ client core's errors into service errors.

:data:`RULES` is the table; the first row whose class matches (and whose condition holds) decides. Every use
case (publish, a consumer joining its group, commit, exact range reads) goes through :func:`service_error`
and names what it was doing with an :class:`Doing`, which only words the message (and, for joining, the
field and the retry delay)::

    core error                 service error     REST/gRPC   why
    MessageTooLarge            PayloadTooLarge   413         the client's message is above the topic's limit
    TopicNotPublished          NotFound topic    404         the topic is not (yet) published
    TopicNotDeployed (431)     NotFound topic    404         the master does not know the topic
    CertificateFailure (415)   UpstreamError     502         the gateway's own credentials: operator's fault
    ClientClosed               Unavailable       503         the gateway is stopping; another replica can
    NoPartition                Unavailable       503         no partition can take it now (PartitionsAway:
                                                             a broker outage; Retry-After 5 s)
    other ClientError          InvalidInput      400         a local check of the client's input failed
    ServerError, joining,      InvalidInput      400         the master refused the group's settings (e.g.
      not retriable                                          members disagree on topics or filters)
    retriable TubeMQError      Unavailable       503         "may succeed if sent again later": a timeout,
      (transport, 5xx, ...)                                  a closed link, a busy or standby node
    other TubeMQError          UpstreamError     502         TubeMQ refused it or answered garbage: retrying
                                                             the same request will not help
    TimeoutError               Unavailable       503         the gateway's own deadline passed

The rule that settles the rest is the core's ``retriable`` flag: retriable means 503 with Retry-After (the
client should retry), not retriable means 502 (TubeMQ's answer, ``tubemqErrorCode``, says why). So a commit
that timed out is 503 like a publish that timed out, and a link that answered bytes we cannot parse is 502
on every path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from gateway.service.errors import (
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    ServiceError,
    Unavailable,
    UpstreamError,
)
from gateway.tubemq import errors as core


class Doing(Enum):
    """What the gateway was doing when the core failed; it words the message."""

    PUBLISH = "publish"
    JOIN = "join"
    COMMIT = "commit"
    READ = "read"


@dataclass(frozen=True, slots=True)
class Failure:
    """One core failure and what it happened to."""

    exc: BaseException
    doing: Doing
    topic: str | None = None
    group: str | None = None
    index: int | None = None

    @property
    def what(self) -> str:
        """The failed action in words, e.g. ``publishing to topic 'demo'``."""
        if self.doing is Doing.PUBLISH:
            return f"publishing to topic {self.topic!r}"
        if self.doing is Doing.JOIN:
            return f"joining consumer group {self.group!r}"
        if self.doing is Doing.COMMIT:
            return f"committing for consumer group {self.group!r}"
        return f"reading topic {self.topic!r}" if self.topic else "reading from TubeMQ"

    @property
    def errno(self) -> int | None:
        return self.exc.errno if isinstance(self.exc, core.ServerError) else None

    @property
    def retry_after(self) -> float:
        # Joining a group takes the master a balance round; ask for a little more patience.
        return 2.0 if self.doing is Doing.JOIN else 1.0


def _too_large(f: Failure) -> ServiceError:
    assert isinstance(f.exc, core.MessageTooLarge)
    return PayloadTooLarge(str(f.exc), limit=f.exc.limit, field="value", index=f.index)


def _topic_missing(f: Failure) -> ServiceError:
    if f.doing is Doing.JOIN:
        return NotFound(f"a subscribed topic is not deployed: {f.exc}", field="topics", errno=f.errno)
    return NotFound(str(f.exc), field="topic", errno=f.errno, resource_name=f.topic)


def _credentials(f: Failure) -> ServiceError:
    return UpstreamError(
        f"the TubeMQ master refused the gateway's credentials: {f.exc}; the gateway's operator must fix "
        "this (its tubemq.auth settings, or its clock when the timestamp is out of period)",
        errno=f.errno,
    )


def _closing(f: Failure) -> ServiceError:
    return Unavailable(
        f"{f.what} stopped: the gateway is closing its TubeMQ client ({f.exc}); retry, another replica or "
        "the restarted gateway will take it",
        retry_after=f.retry_after,
    )


#: Retry-After of a broker outage: the master lists a stopped broker's partitions again only once it has
#: registered and reported its topics, seconds after it starts
OUTAGE_RETRY_AFTER = 5.0


def _no_partition(f: Failure) -> ServiceError:
    retry_after = OUTAGE_RETRY_AFTER if isinstance(f.exc, core.PartitionsAway) else f.retry_after
    return Unavailable(str(f.exc), retry_after=retry_after)


def _bad_input(f: Failure) -> ServiceError:
    return InvalidInput(str(f.exc), index=f.index)


def _group_refused(f: Failure) -> ServiceError:
    return InvalidInput(
        f"the TubeMQ master refused group {f.group!r}: {f.exc} (members of one group must subscribe the same "
        "topics, filters and start settings)",
        field="topics",
        errno=f.errno,
    )


def _retry_later(f: Failure) -> ServiceError:
    if isinstance(f.exc, core.TransportError):
        message = f"TubeMQ cannot be reached for {f.what} now ({f.exc}); retry later"
    else:
        message = f"TubeMQ could not serve {f.what} now ({f.exc}); retry later"
    return Unavailable(message, retry_after=f.retry_after, errno=f.errno)


def _refused(f: Failure) -> ServiceError:
    return UpstreamError(f"TubeMQ refused {f.what}: {f.exc}", errno=f.errno, index=f.index)


def _timed_out(f: Failure) -> ServiceError:
    return Unavailable(f"{f.what} timed out; retry later", retry_after=f.retry_after)


def _retriable(f: Failure) -> bool:
    return isinstance(f.exc, core.TubeMQError) and f.exc.retriable


def _joining(f: Failure) -> bool:
    return f.doing is Doing.JOIN and not _retriable(f)


def _always(f: Failure) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Rule:
    error: type[BaseException]
    when: Callable[[Failure], bool]
    to: Callable[[Failure], ServiceError]


#: The table (see the module docstring); order matters: the first matching row wins.
RULES: tuple[Rule, ...] = (
    Rule(core.MessageTooLarge, _always, _too_large),
    Rule(core.TopicNotPublished, _always, _topic_missing),
    Rule(core.TopicNotDeployed, _always, _topic_missing),
    Rule(core.CertificateFailure, _always, _credentials),
    Rule(core.ClientClosed, _always, _closing),
    Rule(core.NoPartition, _always, _no_partition),
    Rule(core.ClientError, _always, _bad_input),
    Rule(core.ServerError, _joining, _group_refused),
    Rule(core.TubeMQError, _retriable, _retry_later),
    Rule(core.TubeMQError, _always, _refused),
    Rule(TimeoutError, _always, _timed_out),
)


def service_error(
    exc: BaseException,
    doing: Doing,
    *,
    topic: str | None = None,
    group: str | None = None,
    index: int | None = None,
) -> ServiceError:
    """``exc`` as a service error; a ServiceError passes through. Raises ``exc`` itself when no row matches
    (a bug, not a TubeMQ failure: the adapters answer it as an internal error)."""
    if isinstance(exc, ServiceError):
        return exc
    failure = Failure(exc, doing, topic, group, index)
    for rule in RULES:
        if isinstance(exc, rule.error) and rule.when(failure):
            return rule.to(failure)
    raise exc
