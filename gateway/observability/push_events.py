"""Events of push subscriptions: published by a subscription's runner (:mod:`gateway.service.push_runner`)
and the push service (:mod:`gateway.service.push`), counted by
:class:`gateway.observability.metrics_push.PushMetrics`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["PUSH_OUTCOMES", "PushDelivered", "PushSubscriptionState"]

#: how one delivery ended: a 2xx, another status, no answer within the ack deadline, no connection (refused,
#: reset, TLS failed), an address push.allow refused, another failure of the request
PUSH_OUTCOMES: Final = ("acked", "rejected", "timeout", "connect", "refused", "error")


@dataclass(frozen=True, slots=True)
class PushDelivered:
    """One delivery of ``subscription``: its ``outcome`` (:data:`PUSH_OUTCOMES`), the request's time, the
    message's delivery ``attempt``, and whether the commit or nack that followed went through (``settled``
    False: the message comes back when its deadline passes)."""

    subscription: str
    outcome: str
    seconds: float
    attempt: int
    settled: bool = True


@dataclass(frozen=True, slots=True)
class PushSubscriptionState:
    """A subscription of ``group`` started (``running``), defined but ``paused``, or ``removed`` here."""

    subscription: str
    group: str
    state: str
