"""Push subscription metrics (called by :class:`~gateway.observability.metrics_events.EventMetrics` for the
:mod:`push_events`): deliveries by outcome, their time, the attempts it took to deliver, settle failures, and
``push_subscription_up{subscription, group}`` (1 running, 0 paused), which joins a subscription to its
group's backlog (``group_lag_messages``). Subscription names pass the ``subscription`` label cap
(:data:`~gateway.observability.metric_limits.MAX_PUSH_SUBSCRIPTIONS`)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from gateway.observability.push_events import PUSH_OUTCOMES, PushDelivered, PushSubscriptionState

if TYPE_CHECKING:
    from gateway.observability.metrics_families import MetricFamilies

__all__ = ["PushMetrics"]


class PushMetrics:
    """Counts deliveries; keeps the state gauge's label set of each subscription to remove it."""

    def __init__(self, metrics: MetricFamilies) -> None:
        self.m = metrics
        self._seen: set[str] = set()
        self._groups: dict[str, str] = {}  # subscription label -> the group label of its state series

    def _subscription(self, name: str) -> str:
        label = self.m.subscriptions(name)
        if label not in self._seen:
            self._seen.add(label)
            for outcome in PUSH_OUTCOMES:  # every outcome from the start, for ratios
                self.m.push_deliveries.labels(subscription=label, outcome=outcome)
            self.m.push_acked_attempts.labels(subscription=label)
            self.m.push_settle_failures.labels(subscription=label)
        return label

    def delivered(self, e: PushDelivered) -> None:
        label = self._subscription(e.subscription)
        outcome = e.outcome if e.outcome in PUSH_OUTCOMES else "error"
        self.m.push_deliveries.labels(subscription=label, outcome=outcome).inc()
        self.m.push_delivery_duration.labels(subscription=label).observe(e.seconds)
        if outcome == "acked":
            self.m.push_acked_attempts.labels(subscription=label).inc(e.attempt)
        if not e.settled:
            self.m.push_settle_failures.labels(subscription=label).inc()

    def state(self, e: PushSubscriptionState) -> None:
        label = self._subscription(e.subscription)
        group = self.m.groups(e.group)
        old = self._groups.pop(label, None)
        if old is not None and (old != group or e.state == "removed"):
            with contextlib.suppress(KeyError):
                self.m.push_subscription_up.remove(label, old)
        if e.state != "removed":
            self._groups[label] = group
            self.m.push_subscription_up.labels(subscription=label, group=group).set(e.state == "running")
