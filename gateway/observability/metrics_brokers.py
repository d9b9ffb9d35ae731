"""Which TubeMQ node or broker is bad: requests per node address, send attempts and reads per broker id,
and each broker's shield state, from the core's events (called by
:class:`~gateway.observability.metrics_events.EventMetrics`).

The labels are the node address and the broker id only (each capped at ``MAX_NODES``), with an outcome:
never multiplied by topic, group or method. A broker's series start at 0 when it is first seen (its
shielded gauge, the ``ok`` and failure outcomes of sends and reads), so per-broker ratios have data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.observability.histograms import add
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net import Outcome, RequestCompleted
from gateway.tubemq.producer import SendCompleted

if TYPE_CHECKING:
    from gateway.observability.metrics_families import MetricFamilies

__all__ = ["FETCH_FAILURES", "PUBLISH_ERROR_REASONS", "BrokerMetrics"]

#: ``SendCompleted.outcome`` values other than ``ok``.
PUBLISH_ERROR_REASONS = ("rejected", "unavailable", "transport")
#: ``FetchOutcome.outcome`` values that say the broker failed the read (not an end of data, a throttle, a
#: move or a rebalance).
FETCH_FAILURES = ("unavailable", "error", "transport")


class BrokerMetrics:
    """Per-node and per-broker series of :class:`GatewayMetrics`; label children are looked up once per
    (node or broker, outcome): requests and sends are a hot path."""

    def __init__(self, metrics: MetricFamilies) -> None:
        self.m = metrics
        self._brokers: dict[int | str, str] = {}  # broker id -> its (capped) label
        self._requests: dict[tuple[NodeAddress, Outcome], Any] = {}
        self._sends: dict[tuple[int, str], Any] = {}
        self._fetches: dict[tuple[str, str], Any] = {}

    def broker(self, broker_id: int | str) -> str:
        """The capped label of ``broker_id``; its series are zero-initialised on first sight."""
        label = self._brokers.get(broker_id)
        if label is None:
            label = self._brokers[broker_id] = self.m.broker_ids(str(broker_id))
            self.m.broker_shielded.labels(broker_id=label)
            for outcome in ("ok", *PUBLISH_ERROR_REASONS):
                self.m.broker_sends.labels(broker_id=label, outcome=outcome)
            for outcome in ("ok", *FETCH_FAILURES):
                self.m.broker_fetches.labels(broker_id=label, outcome=outcome)
        return label

    def request(self, e: RequestCompleted) -> None:
        child = self._requests.get((e.address, e.outcome))
        if child is None:
            node = self.m.nodes(str(e.address))
            for outcome in Outcome:
                self.m.node_requests.labels(node=node, outcome=outcome.value)
            child = self._requests[(e.address, e.outcome)] = self.m.node_requests.labels(
                node=node, outcome=e.outcome.value
            )
        add(child, e.count)

    def sent(self, e: SendCompleted) -> None:
        child = self._sends.get((e.broker_id, e.outcome))
        if child is None:
            outcome = e.outcome if e.outcome in ("ok", *PUBLISH_ERROR_REASONS) else "transport"
            child = self._sends[(e.broker_id, e.outcome)] = self.m.broker_sends.labels(
                broker_id=self.broker(e.broker_id), outcome=outcome
            )
        add(child, e.count)

    def fetched(self, broker_id: str, outcome: str) -> None:
        child = self._fetches.get((broker_id, outcome))
        if child is None:
            child = self._fetches[(broker_id, outcome)] = self.m.broker_fetches.labels(
                broker_id=self.broker(broker_id), outcome=outcome
            )
        child.inc()

    def shielded(self, broker_id: int, shielded: bool) -> None:
        self.m.broker_shielded.labels(broker_id=self.broker(broker_id)).set(1 if shielded else 0)
