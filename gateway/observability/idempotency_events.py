"""Events of idempotent publish: published by :class:`gateway.service.idempotency.Idempotency`, counted by
:class:`gateway.observability.metrics_events.EventMetrics`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IdempotencyChecked"]


@dataclass(frozen=True, slots=True)
class IdempotencyChecked:
    """One call of the idempotency store: ``step`` (reserve, renew, record, release), its ``outcome``
    (reserved, replayed, in_flight, mismatch, full, ok, lost, store_error) and how long it took
    (``seconds``)."""

    step: str
    outcome: str
    seconds: float
