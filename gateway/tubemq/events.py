"""A tiny synchronous event bus: the client core emits, metrics and logs subscribe.

Events are small frozen dataclasses defined next to the code that emits them (subclass :class:`Event`).
``emit`` calls every subscriber in subscription order, in the emitter's thread and task; a subscriber
that raises is logged and skipped, so observers can never break the core. Subscribers must be quick and
must not block: they run inline on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "EventBus", "Subscriber", "Subscription"]

_log = logging.getLogger(__name__)

#: Called with each delivered event; the return value is ignored.
Subscriber = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class Event:
    """Base class of core events (frozen, slotted dataclasses)."""


class Subscription:
    """Handle returned by :meth:`EventBus.subscribe`; call it (or ``cancel()``) to unsubscribe.

    Cancelling twice is harmless. Also a context manager that unsubscribes on exit.
    """

    __slots__ = ("_bus", "callback", "event_types")

    def __init__(self, bus: EventBus, callback: Subscriber, event_types: tuple[type, ...]) -> None:
        self._bus: EventBus | None = bus
        self.callback = callback
        self.event_types = event_types

    @property
    def active(self) -> bool:
        return self._bus is not None

    def cancel(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            bus._remove(self)

    def __call__(self) -> None:
        self.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        types = ", ".join(t.__name__ for t in self.event_types) or "all events"
        state = "active" if self.active else "cancelled"
        return f"<Subscription {self.callback!r} to {types} ({state})>"


class EventBus:
    """Synchronous publish/subscribe; safe to (un)subscribe from inside a subscriber."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        # A tuple replaced on every change: emit() iterates without copying or locking, and a
        # subscriber that unsubscribes during emit() does not disturb the ongoing delivery.
        self._subscriptions: tuple[Subscription, ...] = ()
        self._log = logger or _log

    @property
    def has_subscribers(self) -> bool:
        """False when nobody listens; emitters may then skip building the event."""
        return bool(self._subscriptions)

    def subscribe(self, callback: Subscriber, *event_types: type) -> Subscription:
        """Deliver events to ``callback``: all of them, or only instances of ``event_types``."""
        subscription = Subscription(self, callback, event_types)
        self._subscriptions = (*self._subscriptions, subscription)
        return subscription

    def emit(self, event: object) -> None:
        """Deliver ``event`` to the matching subscribers; their exceptions are logged, never raised."""
        for subscription in self._subscriptions:
            if subscription.event_types and not isinstance(event, subscription.event_types):
                continue
            try:
                subscription.callback(event)
            except Exception:
                self._log.exception(
                    "event subscriber %r failed on %r; the event was skipped for it",
                    subscription.callback,
                    event,
                )

    def _remove(self, subscription: Subscription) -> None:
        self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)

    def __repr__(self) -> str:
        return f"<EventBus subscribers={len(self._subscriptions)}>"
