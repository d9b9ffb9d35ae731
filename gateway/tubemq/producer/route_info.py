"""The view of a published topic's route that callers ask for (``Producer.topic_route``): partitions with
their brokers and availability, and the max message size, as a :class:`TopicRouteInfo`.

The gateway asks on every publish request, so a view is kept per topic while it cannot change: while no
broker is shielded every partition is available, and the view then only changes with the route (a new
``TopicRoute`` object after every heartbeat that carries topics).
"""

from __future__ import annotations

from gateway.tubemq.net.breaker import BrokerBreaker
from gateway.tubemq.producer.config import PartitionRoute, TopicRouteInfo
from gateway.tubemq.producer.routes import TopicRoute

__all__ = ["RouteViews"]


class RouteViews:
    """The :class:`TopicRouteInfo` of each topic, built from its route and the breaker's state."""

    __slots__ = ("_breaker", "_views")

    def __init__(self, breaker: BrokerBreaker) -> None:
        self._breaker = breaker
        self._views: dict[str, tuple[TopicRoute, TopicRouteInfo]] = {}  # topic -> (built from, view)

    def view(self, topic: str, route: TopicRoute) -> TopicRouteInfo:
        """``topic``'s view under ``route`` (its current route)."""
        breaker = self._breaker
        cacheable = breaker.all_closed()
        if cacheable and (cached := self._views.get(topic)) is not None and cached[0] is route:
            return cached[1]
        partitions = tuple(
            PartitionRoute(
                index=i,
                partition_key=ref.key(topic),
                broker_id=ref.broker_id,
                partition_id=ref.partition_id,
                broker_address=route.brokers[ref.broker_id],
                available=breaker.is_available(ref.broker_id),
            )
            for i, ref in enumerate(route.partitions)
        )
        info = TopicRouteInfo(topic, route.max_msg_size, partitions)
        if cacheable:
            self._views[topic] = (route, info)
        return info

    def forget(self, topic: str) -> None:
        self._views.pop(topic, None)
