"""Per-broker shielding for the producer: which brokers may receive sends right now (§7.6).

A broker is CLOSED (usable), OPEN (shielded) or HALF_OPEN (cooldown over; one trial send may go through).
Three rules open a broker:

* ``unavailable``: the broker answered 503. Shielded for ``unavailable_cooldown`` (Java: 50 s). Not capped:
  the broker itself says it does not accept writes.
* ``quality``: the Java client's response-quality rule (``DefaultBrokerRcvQltyStats``). Every
  ``check_interval`` the per-broker deltas of sends (counted when a send starts) and successful answers are
  compared; a broker whose successes fall below a fifth of the others' average and below a tenth of its own
  sends is shielded for ``quality_cooldown``, but never more than ``round((N + F) * 0.15) - F`` brokers
  (N = brokers not shielded by this rule, F = brokers shielded by it; Java's ``Math.rint`` rounding). With
  fewer than 4 brokers the share is 0 and this rule never acts.
* ``failures`` (ours, not Java's): ``failure_threshold`` consecutive transport failures (connect refused,
  connection lost, timeout) within ``failure_window`` seconds shield a broker for ``failure_cooldown``. A
  gateway usually runs against 1-3 brokers, where the quality rule is inert and Java would keep sending into
  a stopped broker until its 5-per-minute connect-failure rule fires; we want a stopped broker out of the
  rotation after a few failed sends. To keep the cluster usable this rule only opens a broker while fewer
  than ``max(1, round(N * max_shielded_share))`` brokers are shielded (any rule; N = tracked brokers), so
  with 2 brokers one may be shielded, with 10 brokers three.

When a cooldown ends the broker goes HALF_OPEN: ``is_available`` admits one trial send (``begin_attempt``
claims it); an answer closes the breaker, a transport failure re-opens it for ``failure_cooldown``, a 503
for ``unavailable_cooldown``. A trial that reports nothing within ``trial_timeout`` seconds frees the slot.

The breaker does no I/O and never sleeps; time comes from the injected ``clock`` (seconds) and transitions
are evaluated lazily on every call (cheaply: it keeps the earliest cooldown end and the number of brokers
that are not CLOSED, because every send asks). ``on_change`` is called synchronously with a
``BreakerTransition``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class ShieldReason(StrEnum):
    UNAVAILABLE = "unavailable"
    QUALITY = "quality"
    FAILURES = "failures"


@dataclass(frozen=True, slots=True)
class BreakerTransition:
    """A state change of one broker, handed to ``on_change``."""

    broker_id: int
    old: BreakerState
    new: BreakerState
    reason: ShieldReason | None


@dataclass(frozen=True, slots=True)
class BrokerHealth:
    """One broker in ``BrokerBreaker.snapshot()``; ``open_for`` is the remaining cooldown in seconds."""

    broker_id: int
    state: BreakerState
    reason: ShieldReason | None
    open_for: float
    consecutive_failures: int
    sends: int
    successes: int


@dataclass(slots=True)
class _Broker:
    state: BreakerState = BreakerState.CLOSED
    reason: ShieldReason | None = None
    open_until: float = 0.0
    trial_started: float | None = None
    failures: int = 0
    failures_since: float = 0.0
    sends: int = 0
    successes: int = 0
    checked_sends: int = 0
    checked_successes: int = 0


class BrokerBreaker:
    """Shielding state of every broker a producer sends to; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        unavailable_cooldown: float = 50.0,
        check_interval: float = 30.0,
        quality_cooldown: float = 30.0,
        quality_share: float = 0.15,
        failure_threshold: int = 3,
        failure_window: float = 10.0,
        failure_cooldown: float = 10.0,
        max_shielded_share: float = 0.3,
        trial_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerTransition], None] | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, got {failure_threshold}")
        self._unavailable_cooldown = unavailable_cooldown
        self._check_interval = check_interval
        self._quality_cooldown = quality_cooldown
        self._quality_share = quality_share
        self._failure_threshold = failure_threshold
        self._failure_window = failure_window
        self._failure_cooldown = failure_cooldown
        self._max_shielded_share = max_shielded_share
        self._trial_timeout = trial_timeout
        self._clock = clock
        self._on_change = on_change
        self._brokers: dict[int, _Broker] = {}
        self._next_check = clock() + check_interval
        self._next_expiry = math.inf  # no OPEN broker's cooldown ends before this
        self._not_closed = 0  # tracked brokers that are OPEN or HALF_OPEN

    def __repr__(self) -> str:
        self._tick()
        shielded = [
            f"{bid}:{b.state.value}:{b.reason.value if b.reason else '-'}"
            for bid, b in sorted(self._brokers.items())
            if b.state is not BreakerState.CLOSED
        ]
        return f"<BrokerBreaker brokers={len(self._brokers)} shielded=[{', '.join(shielded)}]>"

    # -- queries ---------------------------------------------------------------------------------------

    def all_closed(self) -> bool:
        """Whether every tracked broker is CLOSED, i.e. ``is_available`` is true for any broker id."""
        self._tick()
        return self._not_closed == 0

    def is_available(self, broker_id: int) -> bool:
        """Whether a send may go to ``broker_id`` now (unknown brokers are available). Claims nothing."""
        self._tick()
        broker = self._brokers.get(broker_id)
        if broker is None or broker.state is BreakerState.CLOSED:
            return True
        if broker.state is BreakerState.OPEN:
            return False
        return broker.trial_started is None or self._clock() - broker.trial_started >= self._trial_timeout

    def snapshot(self) -> list[BrokerHealth]:
        """The state and counters of every tracked broker, ordered by broker id."""
        self._tick()
        now = self._clock()
        return [
            BrokerHealth(
                broker_id=bid,
                state=b.state,
                reason=b.reason,
                open_for=max(0.0, b.open_until - now) if b.state is BreakerState.OPEN else 0.0,
                consecutive_failures=b.failures,
                sends=b.sends,
                successes=b.successes,
            )
            for bid, b in sorted(self._brokers.items())
        ]

    # -- membership ------------------------------------------------------------------------------------

    def track(self, broker_ids: Iterable[int]) -> None:
        """Make the tracked set exactly ``broker_ids`` (the brokers currently in the metadata)."""
        wanted = set(broker_ids)
        for bid in [bid for bid in self._brokers if bid not in wanted]:
            if self._brokers.pop(bid).state is not BreakerState.CLOSED:
                self._not_closed -= 1
        for bid in wanted:
            self._brokers.setdefault(bid, _Broker())

    # -- outcomes --------------------------------------------------------------------------------------

    def begin_attempt(self, broker_id: int, count: int = 1) -> None:
        """Count a send (``count`` sends) about to go to ``broker_id``; in HALF_OPEN it is the trial send."""
        self._tick()
        broker = self._broker(broker_id)
        broker.sends += count
        if broker.state is BreakerState.HALF_OPEN:
            broker.trial_started = self._clock()

    def record_success(self, broker_id: int, count: int = 1) -> None:
        """The broker answered 200 (to ``count`` sends, with nothing else in between)."""
        broker = self._broker(broker_id)
        broker.successes += count
        self._answered(broker_id, broker)

    def record_rejected(self, broker_id: int) -> None:
        """The broker answered with an error other than 503: reachable, but the send did not succeed."""
        self._answered(broker_id, self._broker(broker_id))

    def record_unavailable(self, broker_id: int) -> None:
        """The broker answered 503: shield it for ``unavailable_cooldown`` whatever its state."""
        broker = self._broker(broker_id)
        broker.failures = 0
        self._open(broker_id, broker, ShieldReason.UNAVAILABLE, self._unavailable_cooldown)

    def record_failure(self, broker_id: int) -> None:
        """A transport failure (connect, lost connection, timeout) on a send to ``broker_id``."""
        self._tick()
        broker = self._broker(broker_id)
        now = self._clock()
        if broker.state is BreakerState.OPEN:
            return  # a send that started before the breaker opened; the cooldown stands
        if broker.state is BreakerState.HALF_OPEN:
            self._open(broker_id, broker, ShieldReason.FAILURES, self._failure_cooldown)
            return
        if broker.failures == 0 or now - broker.failures_since > self._failure_window:
            broker.failures, broker.failures_since = 0, now
        broker.failures += 1
        if broker.failures >= self._failure_threshold and self._shielded_count() < self._shield_cap():
            self._open(broker_id, broker, ShieldReason.FAILURES, self._failure_cooldown)

    # -- internals -------------------------------------------------------------------------------------

    def _broker(self, broker_id: int) -> _Broker:
        broker = self._brokers.get(broker_id)
        if broker is None:  # (not setdefault: that would build a record per send only to drop it)
            broker = self._brokers[broker_id] = _Broker()
        return broker

    def _answered(self, broker_id: int, broker: _Broker) -> None:
        broker.failures = 0
        if broker.state is BreakerState.HALF_OPEN:
            self._set(broker_id, broker, BreakerState.CLOSED, None)

    def _shield_cap(self) -> int:
        return max(1, round(len(self._brokers) * self._max_shielded_share))

    def _shielded_count(self) -> int:
        return self._not_closed

    def _open(self, broker_id: int, broker: _Broker, reason: ShieldReason, cooldown: float) -> None:
        broker.open_until = self._clock() + cooldown
        self._next_expiry = min(self._next_expiry, broker.open_until)
        broker.trial_started = None
        broker.failures = 0
        self._set(broker_id, broker, BreakerState.OPEN, reason)

    def _set(self, broker_id: int, broker: _Broker, state: BreakerState, reason: ShieldReason | None) -> None:
        old = broker.state
        broker.state, broker.reason = state, reason
        if (old is BreakerState.CLOSED) != (state is BreakerState.CLOSED):
            self._not_closed += 1 if old is BreakerState.CLOSED else -1
        if state is not BreakerState.HALF_OPEN:
            broker.trial_started = None
        if old is not state and self._on_change is not None:
            self._on_change(BreakerTransition(broker_id, old, state, reason))

    def _tick(self) -> None:
        now = self._clock()
        if now >= self._next_expiry:
            self._expire(now)
        if now >= self._next_check:
            self._next_check = now + self._check_interval
            self._check_quality()

    def _expire(self, now: float) -> None:
        """Move OPEN brokers whose cooldown is over to HALF_OPEN; note when the next one ends."""
        expired: list[tuple[int, _Broker]] = []
        next_expiry = math.inf
        for bid, b in self._brokers.items():
            if b.state is BreakerState.OPEN:
                if now >= b.open_until:
                    expired.append((bid, b))
                else:
                    next_expiry = min(next_expiry, b.open_until)
        self._next_expiry = next_expiry
        for bid, broker in expired:
            self._set(bid, broker, BreakerState.HALF_OPEN, broker.reason)

    def _check_quality(self) -> None:
        deltas: list[tuple[int, int, int]] = []  # (successes, sends, broker id) since the last check
        held = 0
        for bid, b in self._brokers.items():
            d_send, d_ok = b.sends - b.checked_sends, b.successes - b.checked_successes
            b.checked_sends, b.checked_successes = b.sends, b.successes
            if b.reason is ShieldReason.QUALITY and b.state is not BreakerState.CLOSED:
                held += 1
            else:
                deltas.append((d_ok, d_send, bid))
        hold = round((len(deltas) + held) * self._quality_share) - held
        if hold <= 0 or len(deltas) < 2:
            return
        deltas.sort(key=lambda item: item[0])
        oks = [d_ok for d_ok, _, _ in deltas]
        if len(oks) <= 3:
            threshold = int((sum(oks) - oks[0]) // (len(oks) - 1) * 0.2)
        else:
            threshold = int((sum(oks) - oks[0] - oks[1] - oks[-1]) // (len(oks) - 3) * 0.2)
        picked = 0
        for d_ok, d_send, bid in deltas:
            send_floor = int(d_send * 0.1)
            if d_ok < threshold and send_floor > 2 and d_ok < send_floor:
                broker = self._brokers[bid]
                if broker.state is BreakerState.CLOSED:
                    self._open(bid, broker, ShieldReason.QUALITY, self._quality_cooldown)
                picked += 1
            if picked >= hold or d_ok >= threshold:
                break
