"""Group lag from TubeMQ's own offsets as gauges (called by
:class:`~gateway.observability.metrics_events.EventMetrics` for the :mod:`lag_events`).

``group_partition_lag_messages{group, topic, partition}`` is each partition's figure (``partition`` is
``brokerId:partitionId``); ``group_lag_messages{group, topic}`` sums the stores, each counted once with its
slowest partition (partitions of one store share its index, so each partition's figure counts the store's
entries behind its own read position); ``group_consumers{group}`` is the clients the master lists in the
group. Every process that served a group reports the same figures: aggregate them with ``max``, not
``sum``. The series stay while the group holds offsets on a broker, whether or not anyone consumes, and go
with it. A topic's partitions are the cluster's (hundreds per topic are possible), so the per-partition
series are capped at :data:`MAX_LAG_PARTITIONS` in all: a partition past it keeps no series of its own (its
lag is in its topic's ``group_lag_messages``) and ``label_overflow_total{label="partition"}`` counts it.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from gateway.observability.lag_events import GroupLagGone, GroupLagRead, topic_lags
from gateway.observability.metric_limits import MAX_LAG_PARTITIONS

if TYPE_CHECKING:
    from gateway.observability.metrics_families import MetricFamilies

__all__ = ["GroupLagMetrics"]


class GroupLagMetrics:
    """Sets and removes the group lag series; remembers which label sets each group has."""

    def __init__(self, metrics: MetricFamilies) -> None:
        self.m = metrics
        self._series: dict[str, tuple[str, set[str], set[tuple[str, str]]]] = {}
        self._partition_series = 0  # per-partition series held, over every group
        self._overflow = metrics.label_overflow.labels(label="partition")

    def read(self, e: GroupLagRead) -> None:
        group = self.m.groups(e.group)
        _, old_topics, old_partitions = self._series.get(e.group, (group, set(), set()))
        partitions: set[tuple[str, str]] = set()
        topics: set[str] = set()
        for p in e.partitions:
            topic = self.m.pairs(group, self.m.topics(p.topic))[1]
            topics.add(topic)
            partition = f"{p.broker_id}:{p.partition_id}"
            if (topic, partition) not in old_partitions and (topic, partition) not in partitions:
                if self._partition_series >= MAX_LAG_PARTITIONS:
                    self._overflow.inc()
                    continue
                self._partition_series += 1
            self.m.group_partition_lag.labels(group=group, topic=topic, partition=partition).set(
                p.lag_messages
            )
            partitions.add((topic, partition))
        totals: dict[str, int] = defaultdict(int)  # by label: topics past the label limit add up
        for name, lag in topic_lags(e.partitions).items():
            totals[self.m.pairs(group, self.m.topics(name))[1]] += lag
        for topic in topics:
            self.m.group_lag.labels(group=group, topic=topic).set(totals[topic])
        for topic, partition in old_partitions - partitions:
            self._remove(self.m.group_partition_lag, group, topic, partition)
            self._partition_series -= 1
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
        self._partition_series -= len(partitions)
        for topic, partition in partitions:
            self._remove(self.m.group_partition_lag, group, topic, partition)
        for topic in topics:
            self._remove(self.m.group_lag, group, topic)
        self._remove(self.m.group_consumers, group)

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
