"""Group lag from TubeMQ's own offsets as gauges (called by
:class:`~gateway.observability.metrics_events.EventMetrics` for the :mod:`lag_events`).

``group_partition_lag_messages{group, topic, partition}`` is each partition's figure (``partition`` is
``brokerId:partitionId``); ``group_lag_messages{group, topic}`` sums the stores, each counted once with its
slowest partition (partitions of one store share its index, so each partition's figure counts the store's
entries behind its own read position); ``group_consumers{group}`` is the clients the master lists in the
group. Every process that served a group reports the same figures: aggregate them with ``max``, not
``sum``. The series stay while the group holds offsets on a broker, whether or not anyone consumes, and go
with it.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from gateway.observability.lag_events import GroupLagGone, GroupLagRead, topic_lags

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics

__all__ = ["GroupLagMetrics"]


class GroupLagMetrics:
    """Sets and removes the group lag series; remembers which label sets each group has."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.m = metrics
        self._series: dict[str, tuple[str, set[str], set[tuple[str, str]]]] = {}

    def read(self, e: GroupLagRead) -> None:
        group = self.m.groups(e.group)
        _, old_topics, old_partitions = self._series.get(e.group, (group, set(), set()))
        partitions: set[tuple[str, str]] = set()
        topics: set[str] = set()
        for p in e.partitions:
            topic = self.m.pairs(group, self.m.topics(p.topic))[1]
            partition = f"{p.broker_id}:{p.partition_id}"
            self.m.group_partition_lag.labels(group=group, topic=topic, partition=partition).set(
                p.lag_messages
            )
            partitions.add((topic, partition))
            topics.add(topic)
        totals: dict[str, int] = defaultdict(int)  # by label: topics past the label limit add up
        for name, lag in topic_lags(e.partitions).items():
            totals[self.m.pairs(group, self.m.topics(name))[1]] += lag
        for topic in topics:
            self.m.group_lag.labels(group=group, topic=topic).set(totals[topic])
        for topic, partition in old_partitions - partitions:
            self._remove(self.m.group_partition_lag, group, topic, partition)
        for topic in old_topics - topics:
            self._remove(self.m.group_lag, group, topic)
        if e.consumers >= 0:
            self.m.group_consumers.labels(group=group).set(e.consumers)
        self._series[e.group] = (group, topics, partitions)

    def gone(self, e: GroupLagGone) -> None:
        found = self._series.pop(e.group, None)
        if found is None:
            return
        group, topics, partitions = found
        for topic, partition in partitions:
            self._remove(self.m.group_partition_lag, group, topic, partition)
        for topic in topics:
            self._remove(self.m.group_lag, group, topic)
        self._remove(self.m.group_consumers, group)

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
