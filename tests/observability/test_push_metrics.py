"""Push subscription metrics from their events: deliveries by outcome (every outcome's series from the
first sight), the attempts acked deliveries took, settle failures, and the running/paused gauge that follows
a subscription's group and goes when it is removed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.observability.metrics import GatewayMetrics
from gateway.observability.push_events import PUSH_OUTCOMES, PushDelivered, PushSubscriptionState
from gateway.tubemq.events import EventBus

P = "tubemq_gateway_"


def _metrics() -> tuple[GatewayMetrics, EventBus]:
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    bus = EventBus()
    metrics.subscribe(bus)
    return metrics, bus


def test_deliveries_attempts_and_settle_failures() -> None:
    metrics, bus = _metrics()
    value = metrics.registry.get_sample_value
    bus.emit(PushDelivered("hooks", "rejected", 0.2, 1))
    bus.emit(PushDelivered("hooks", "timeout", 2.0, 2, settled=False))
    bus.emit(PushDelivered("hooks", "acked", 0.02, 3))
    bus.emit(PushDelivered("hooks", "acked", 0.02, 1))
    bus.emit(PushDelivered("hooks", "made-up", 0.02, 1))
    counts = {
        o: value(P + "push_deliveries_total", {"subscription": "hooks", "outcome": o}) for o in PUSH_OUTCOMES
    }
    assert counts == {"acked": 2, "rejected": 1, "timeout": 1, "connect": 0, "refused": 0, "error": 1}
    assert value(P + "push_acked_attempts_total", {"subscription": "hooks"}) == 4  # attempts 3 and 1
    assert value(P + "push_settle_failures_total", {"subscription": "hooks"}) == 1
    assert value(P + "push_delivery_duration_seconds_count", {"subscription": "hooks"}) == 5


def test_the_state_gauge_follows_pause_group_and_removal() -> None:
    metrics, bus = _metrics()
    value = metrics.registry.get_sample_value
    up = P + "push_subscription_up"
    bus.emit(PushSubscriptionState("hooks", "g1", "running"))
    assert value(up, {"subscription": "hooks", "group": "g1"}) == 1
    bus.emit(PushSubscriptionState("hooks", "g1", "paused"))
    assert value(up, {"subscription": "hooks", "group": "g1"}) == 0
    bus.emit(PushSubscriptionState("hooks", "g2", "running"))
    assert value(up, {"subscription": "hooks", "group": "g1"}) is None
    assert value(up, {"subscription": "hooks", "group": "g2"}) == 1
    bus.emit(PushSubscriptionState("hooks", "g2", "removed"))
    assert value(up, {"subscription": "hooks", "group": "g2"}) is None
