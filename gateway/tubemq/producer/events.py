"""Events the producer emits on its ``EventBus`` (``MasterSwitched`` comes from ``master.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.events import Event

__all__ = [
    "BrokerShielded",
    "BrokerUnshielded",
    "ProducerHeartbeatFailed",
    "ProducerRegistered",
    "RegisterFailed",
    "SendCompleted",
]


@dataclass(frozen=True, slots=True)
class ProducerRegistered(Event):
    """The master accepted the producer; ``again`` is True for a re-registration."""

    client_id: str
    master: NodeAddress
    brokers: int
    again: bool


@dataclass(frozen=True, slots=True)
class RegisterFailed(Event):
    """A registration attempt failed; the next one follows after ``retry_in`` seconds."""

    client_id: str
    error: str
    failures: int
    retry_in: float


@dataclass(frozen=True, slots=True)
class ProducerHeartbeatFailed(Event):
    """A producer's heartbeat to the master failed; ``reregister`` tells whether it registers again next.

    Not one event with :class:`~gateway.tubemq.consumer.events.ConsumerHeartbeatFailed`: the consumer's
    covers broker heartbeats too and counts failures in a row, the producer's says whether the session is
    lost; logs name each by its class, metrics count both in ``master_heartbeat_failures`` by role."""

    client_id: str
    error: str
    reregister: bool


@dataclass(frozen=True, slots=True)
class BrokerShielded(Event):
    """Sends stop going to ``broker_id`` for a while; ``reason`` is a ``breaker.ShieldReason`` value."""

    broker_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class BrokerUnshielded(Event):
    """``broker_id`` receives sends again (a trial send succeeded)."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class SendCompleted(Event):
    """``count`` send attempts (one, or those of a batch round that ended alike) ended after ``seconds``.

    ``outcome`` is ``"ok"``, ``"rejected"`` (an errCode answer, see ``error_code``), ``"unavailable"``
    (503) or ``"transport"`` (no answer: connect failure, lost link, timeout, RPC exception).
    ``bytes`` is the size of the stored payloads (body and attributes) when ``ok``, else 0.
    """

    topic: str
    broker_id: int
    outcome: str
    seconds: float
    error_code: int | None = None
    bytes: int = 0
    count: int = 1
