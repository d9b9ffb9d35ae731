"""Events of per-message redelivery: published by a consumer instance's redeliverer
(:mod:`gateway.service.instance_redelivery`), counted by
:class:`gateway.observability.metrics_events.EventMetrics`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RedeliveryCounted"]


@dataclass(frozen=True, slots=True)
class RedeliveryCounted:
    """What one nack call or one deadline check of an instance of ``group`` did: ``nacked`` messages a
    client gave back, ``expired`` delivered messages whose deadline passed, ``retried`` and
    ``dead_lettered`` copies a broker stored in the retry and the dead-letter topic, and messages of the retry
    topic ``set_aside`` (not retry copies the gateway signed for the group: never delivered)."""

    group: str
    nacked: int = 0
    expired: int = 0
    retried: int = 0
    dead_lettered: int = 0
    set_aside: int = 0
