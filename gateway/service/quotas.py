"""Abuse limits per caller: token buckets for publishing and a cap on consumer instances held at once.

A caller is the request's principal (:func:`~gateway.service.principal.current_caller`); anonymous
callers (open mode) are told apart by their network address, which the adapters hand down with the principal
(:func:`~gateway.service.principal.enter_caller`), so one anonymous client cannot spend another's quota.

* **Publishing**: two token buckets per caller, messages and payload bytes. A bucket holds up to
  ``rate * burst_seconds`` tokens and refills at ``rate`` per second; a request (a whole batch, checked
  once) passes when both buckets hold its cost, and then spends it. A request costing more than a bucket
  can ever hold passes when the bucket is full and leaves it in debt, so a limit never blocks a request for
  good and the long-run rate still holds. A refused request spends nothing and is answered with
  :class:`~gateway.service.errors.RateLimited`, saying when the tokens will be there.
* **Consumer instances**: at most ``max_instances`` held by one caller on this replica, whatever its worker
  count (:mod:`gateway.service.instance_counts`: with ``serve --workers N`` the workers share the count).

Limits are per replica (each replica counts its own traffic). With ``serve --workers N`` every worker holds
each caller's whole buckets and takes from them what the caller spent on the other workers
(:mod:`gateway.service.shared_spending`, :meth:`Quotas.share_spending`), so a caller is held to the
replica's rate on whatever workers its connections reached. Bucket state is bounded: buckets are kept in
least-recently-used order, at most ``max_callers`` of them; a bucket left alone long enough to be full again
is the same as a new one, so dropping it loses nothing. 0 or None means unlimited.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.service.errors import Quota, RateLimited
from gateway.service.instance_counts import InstanceCounts, LocalInstanceCounts
from gateway.service.principal import Caller, Principal, current_caller
from gateway.service.shared_spending import SharedSpending

__all__ = ["Quotas", "RateLimits", "caller_key"]

log = logging.getLogger("gateway.quotas")


def caller_key(principal: Principal | None = None) -> str:
    """Whose quota a request spends: the principal's identity (method-qualified: ``api_key:alice`` and
    ``jwt:alice@<issuer>`` are two callers), or ``anonymous@<address>`` for anonymous ones (the current
    caller's address; ``principal`` defaults to the current caller's)."""
    caller = current_caller()
    if principal is None or principal is caller.principal:
        return caller.key
    return principal.identity if not principal.anonymous else Caller(principal, caller.address).key


@dataclass(frozen=True, slots=True)
class RateLimits:
    """One caller's limits; None or 0 = unlimited. Rates are per second, ``burst_seconds`` sizes buckets."""

    publish_messages_per_second: float | None = None
    publish_bytes_per_second: float | None = None
    burst_seconds: float = 1.0
    max_instances: int | None = None
    #: whether publishing is limited at all (derived)
    limits_publish: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.burst_seconds <= 0:
            raise ValueError("burst_seconds must be > 0")
        for name in ("publish_messages_per_second", "publish_bytes_per_second", "max_instances"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited)")
        limited = bool(self.publish_messages_per_second) or bool(self.publish_bytes_per_second)
        object.__setattr__(self, "limits_publish", limited)


class _Buckets:
    """The two publish buckets of one caller (tokens may go below zero: debt from a very large request)."""

    __slots__ = ("bytes", "capacity_bytes", "capacity_messages", "limits", "messages", "updated")

    def __init__(self, limits: RateLimits, now: float) -> None:
        self.limits = limits
        self.messages = self.capacity_messages = _capacity(limits.publish_messages_per_second, limits)
        self.bytes = self.capacity_bytes = _capacity(limits.publish_bytes_per_second, limits)
        self.updated = now

    def refill(self, now: float) -> None:
        elapsed = now - self.updated
        if elapsed <= 0:
            return
        self.updated = now
        lim = self.limits
        if lim.publish_messages_per_second:
            cap = lim.publish_messages_per_second * lim.burst_seconds
            self.messages = min(cap, self.messages + elapsed * lim.publish_messages_per_second)
        if lim.publish_bytes_per_second:
            cap = lim.publish_bytes_per_second * lim.burst_seconds
            self.bytes = min(cap, self.bytes + elapsed * lim.publish_bytes_per_second)

    def full_at(self) -> float:
        """When both buckets will be full again (the moment this state equals a fresh one)."""
        lim = self.limits
        wait = 0.0
        for rate, tokens in (
            (lim.publish_messages_per_second, self.messages),
            (lim.publish_bytes_per_second, self.bytes),
        ):
            if rate:
                wait = max(wait, (rate * lim.burst_seconds - tokens) / rate)
        return self.updated + wait


def _capacity(rate: float | None, limits: RateLimits) -> float:
    return rate * limits.burst_seconds if rate else math.inf


def _shortfall(tokens: float, cost: int, rate: float | None, limits: RateLimits) -> float:
    """Seconds until ``tokens`` cover ``cost`` (capped at a full bucket), 0 when they already do."""
    if not rate:
        return 0.0
    need = min(float(cost), rate * limits.burst_seconds)
    return 0.0 if tokens >= need else (need - tokens) / rate


class Quotas:
    """Every caller's publish buckets and instance counts on this replica.

    ``default`` applies to every caller not named in ``overrides`` (principal label, ``api_key:alice``,
    ``jwt:<subject>``, ``mtls:<subject>`` -> limits; ``anonymous`` sets the limits of each anonymous
    address). ``max_callers`` bounds the buckets kept;
    ``clock`` (seconds, monotonic) is injectable for tests.
    """

    def __init__(
        self,
        default: RateLimits,
        overrides: Mapping[str, RateLimits] | None = None,
        *,
        max_callers: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        instances: InstanceCounts | None = None,
        spending: SharedSpending | None = None,
    ) -> None:
        if max_callers < 1:
            raise ValueError("max_callers must be >= 1")
        self.default = default
        self.overrides = dict(overrides or {})
        self.max_callers = max_callers
        self._clock = clock
        self._buckets: OrderedDict[str, _Buckets] = OrderedDict()
        #: consumer instances per caller: this process's, or (serve --workers N) the replica's
        self._instances: InstanceCounts = instances if instances is not None else LocalInstanceCounts()
        #: serve --workers N: what callers spend here, and what they spent on the sibling workers
        self._spending = spending
        self._exchange_failed = False
        #: caller -> (messages, bytes, when) spent on sibling workers by callers without a bucket here
        self._elsewhere: dict[str, tuple[float, float, float]] = {}
        self._longest_burst = max(limits.burst_seconds for limits in (default, *self.overrides.values()))
        every = (default, *self.overrides.values())
        self.limits_publish = any(limits.limits_publish for limits in every)
        self.limits_instances = any(limits.max_instances for limits in every)

    def __repr__(self) -> str:
        return (
            f"<Quotas callers={len(self._buckets)}/{self.max_callers} overrides={len(self.overrides)} "
            f"instances={self._instances!r}>"
        )

    def limits_for(self, principal: Principal) -> RateLimits:
        return self.overrides.get(principal.label, self.default)

    @property
    def tracked_callers(self) -> int:
        """How many callers' publish buckets are held now (bounded by ``max_callers``)."""
        return len(self._buckets)

    # --- publishing ---------------------------------------------------------------------------------

    def charge_publish(self, messages: int, payload_bytes: int) -> None:
        """Spend ``messages`` and ``payload_bytes`` from the current caller's buckets, or raise
        RateLimited (spending nothing) when they do not hold that much yet."""
        if not self.limits_publish:
            return
        caller = current_caller()
        principal = caller.principal
        limits = self.overrides.get(principal.label, self.default)
        if not limits.limits_publish:
            return
        key = caller.key
        now = self._clock()
        buckets = self._buckets.get(key)
        if buckets is None or buckets.limits is not limits:
            buckets = self._new_buckets(key, limits, now)
        else:
            self._buckets.move_to_end(key)
            buckets.refill(now)
        if not (buckets.messages >= messages and buckets.bytes >= payload_bytes):  # usually they do
            # Short of tokens: refused, unless the request is above a full bucket and the bucket is full.
            wait_messages = _shortfall(buckets.messages, messages, limits.publish_messages_per_second, limits)
            wait_bytes = _shortfall(buckets.bytes, payload_bytes, limits.publish_bytes_per_second, limits)
            if wait_messages or wait_bytes:
                raise self._refusal(principal, key, buckets, wait_messages, wait_bytes)
        buckets.messages -= messages
        buckets.bytes -= payload_bytes
        spending = self._spending
        if spending is not None:
            unshared = spending.spent(key, messages, payload_bytes)
            # more than 1/(2N) of a bucket spent here unknown to the siblings: exchange now, not at the
            # next interval, so that a fast burst on every worker cannot take a bucket on each
            share = 2 * spending.workers
            if (
                unshared[0] * share >= buckets.capacity_messages
                or unshared[1] * share >= buckets.capacity_bytes
            ):
                self.take_siblings_spending()

    def take_siblings_spending(self) -> None:
        """Publish what this worker's callers spent, and take from their buckets here what they spent on
        the sibling workers since the last call (no-op in a replica of one process). What a caller without
        a bucket here spent is kept until its first request here (its bucket then starts with that taken)
        or until a bucket would be full again, so hopping from worker to worker gains nothing."""
        if self._spending is None:
            return
        try:
            spent = self._spending.exchange()
        except OSError as exc:  # the private directory: full, or gone while the replica stops
            if not self._exchange_failed:
                log.warning(
                    "cannot share what callers spent of their publish rates with the sibling workers; each "
                    "worker holds them to the replica's rate on its own meanwhile",
                    extra={"error": repr(exc)},
                )
            self._exchange_failed = True
            return
        self._exchange_failed = False
        now = self._clock()
        pending = self._elsewhere
        for key, messages, payload_bytes in spent:
            buckets = self._buckets.get(key)
            if buckets is not None:
                buckets.refill(now)
                buckets.messages -= messages
                buckets.bytes -= payload_bytes
            else:
                before = pending.pop(key, None)
                if before is not None:
                    messages += before[0]
                    payload_bytes += before[1]
                pending[key] = (messages, payload_bytes, now)  # the newest last: dropped last
        forgotten = now - self._longest_burst
        while pending:
            key, oldest = next(iter(pending.items()))
            if oldest[2] > forgotten and len(pending) <= self.max_callers:
                break
            del pending[key]

    async def share_spending(self, interval: float) -> None:
        """:meth:`take_siblings_spending` every ``interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.take_siblings_spending()
            except Exception:  # a bug: logged, and the next interval tries again
                log.exception("sharing what callers spent of their publish rates failed")

    def _new_buckets(self, key: str, limits: RateLimits, now: float) -> _Buckets:
        buckets = self._buckets[key] = _Buckets(limits, now)
        elsewhere = self._elsewhere.pop(key, None) if self._elsewhere else None
        if elsewhere is not None:  # spent on the siblings meanwhile (take_siblings_spending)
            buckets.messages -= elsewhere[0]
            buckets.bytes -= elsewhere[1]
            buckets.updated = elsewhere[2]
            buckets.refill(now)
        self._buckets.move_to_end(key)
        # Drop the least recently used buckets that are full again (they equal fresh ones), and beyond
        # max_callers the least recently used ones whatever their state.
        while self._buckets:
            oldest_key, oldest = next(iter(self._buckets.items()))
            if oldest is buckets:
                break
            if len(self._buckets) <= self.max_callers:
                oldest.refill(now)
                if oldest.full_at() > now:
                    break
            del self._buckets[oldest_key]
        return buckets

    def _refusal(
        self, principal: Principal, key: str, buckets: _Buckets, wait_messages: float, wait_bytes: float
    ) -> RateLimited:
        lim = buckets.limits
        if wait_messages >= wait_bytes:
            rate, tokens, wait, what, unit = (
                lim.publish_messages_per_second,
                buckets.messages,
                wait_messages,
                "messages",
                "messages",
            )
        else:
            rate, tokens, wait, what, unit = (
                lim.publish_bytes_per_second,
                buckets.bytes,
                wait_bytes,
                "bytes",
                "content-bytes",
            )
        assert rate
        capacity = rate * lim.burst_seconds
        quota = Quota(what, int(capacity), lim.burst_seconds, max(0, math.floor(tokens)), unit)
        return RateLimited(
            f"{_who(principal, key)} is above its publish limit of {rate:g} {what} per second "
            f"(bursts up to {capacity:g}); retry in {wait:.2f} s, send less, or ask the operator for a "
            "higher limit (rate_limits.overrides)",
            retry_after=wait,
            quota=quota,
        )

    # --- consumer instances -------------------------------------------------------------------------

    def claim_instance(self, retry_after: float) -> str | None:
        """Count one more consumer instance for the current caller, or raise RateLimited when it holds its
        maximum. Returns the key to :meth:`release_instance` with (None: nothing was counted)."""
        if not self.limits_instances:
            return None
        caller = current_caller()
        principal = caller.principal
        cap = self.limits_for(principal).max_instances
        if not cap:
            return None
        key = caller.key
        if not self._instances.claim(key, cap):
            raise RateLimited(
                f"{_who(principal, key)} holds its maximum of {cap} consumer instances on this gateway; "
                "delete instances it no longer uses (DELETE /v1/consumers/{group}/instances/{id}), let idle "
                "ones expire, or ask the operator for a higher limit (rate_limits.overrides)",
                retry_after=retry_after,
                quota=Quota("instances", cap, None, 0, "instances"),
            )
        return key

    def release_instance(self, key: str | None) -> None:
        """Forget one instance counted by :meth:`claim_instance` (a None key is ignored)."""
        if key is None:
            return
        self._instances.release(key)

    def instances_held(self, key: str) -> int:
        return self._instances.held(key)


def _who(principal: Principal, key: str) -> str:
    if principal.anonymous:
        return "this client" if key == principal.name else f"client {key.partition('@')[2]}"
    return f"principal {principal.label!r}"
