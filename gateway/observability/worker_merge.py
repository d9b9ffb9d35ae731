"""One exposition of a replica's worker processes (``serve --workers N``): each worker's metrics with a
``worker`` label, so that ``sum`` over it gives the replica's totals, and ``tubemq_gateway_worker_up``.

Every worker keeps its own in-memory registry (nothing shared on the hot path); the worker answering a scrape
reads its siblings' expositions over their private listeners and merges them here. Counters and histograms of
a restarted worker start again from zero, which Prometheus reads as a counter reset of that worker's series.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["WORKER_LABEL", "WORKER_UP", "merge_worker_metrics"]

WORKER_LABEL = "worker"
WORKER_UP = "tubemq_gateway_worker_up"


class _Merged:
    """A collector yielding the merged families (the registry only renders them)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def merge_worker_metrics(expositions: Sequence[tuple[int, str | None]]) -> bytes:
    """The exposition text of every worker's metrics, from ``(worker index, its exposition text or None
    when it did not answer)``; a family keeps the help and type of its first worker."""
    merged: dict[str, Metric] = {}
    up = GaugeMetricFamily(
        WORKER_UP, "1 when the worker process answered this scrape, else 0.", labels=[WORKER_LABEL]
    )
    for worker, text in expositions:
        up.add_metric([str(worker)], 0.0 if text is None else 1.0)
        if text is None:
            continue
        label = str(worker)
        for family in text_string_to_metric_families(text):
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            target.samples.extend(
                Sample(s.name, {**s.labels, WORKER_LABEL: label}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged([up, *merged.values()]))
    return generate_latest(registry)
