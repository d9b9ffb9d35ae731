"""Idempotent publish: a request carrying an idempotency key stores its messages once.

The steps, the same for every adapter (the REST route, both of its ways in, and gRPC ``Publish``; see
docs/idempotency.md):

1. :func:`parse_key` checks the key the client sent (400 naming the header or field when malformed);
2. :meth:`Idempotency.claim` reserves the key of the calling principal on the topic, with the request's
   :func:`fingerprint` (the body and every option that changes what is stored). A key answered before
   within ``window`` gives back that answer (:class:`Replay`, sent again marked as a replay, nothing
   published); a key reserved by a request still in flight is :class:`~gateway.service.errors.Conflict`
   (409, Retry-After); a key used with another fingerprint is :class:`KeyReused` (422);
3. the adapter publishes and :meth:`Idempotency.record` keeps its answer when some message was stored, or
   :meth:`Idempotency.release` frees the key when nothing was (so the retry publishes).

:meth:`Idempotency.run` takes these steps around an adapter's publish (REST, gRPC ``Publish``).

A reservation is renewed by its holder while the publish runs; one whose holder died (the process killed
mid-publish) expires ``lease`` seconds after its last renewal, and the next retry takes the key over and
publishes. The store failing answers the keyed request 503
(:class:`~gateway.service.errors.Unavailable`): a keyed publish never goes ahead without its guarantee.
Every step's outcome and the store's latency are published as :class:`IdempotencyChecked` events.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from gateway.observability.idempotency_events import IdempotencyChecked
from gateway.service.errors import (
    Conflict,
    InvalidInput,
    KeyReused,
    Quota,
    RateLimited,
    Unavailable,
)
from gateway.service.idempotency_store import (
    Full,
    InFlight,
    KeyStore,
    Mismatch,
    Replay,
    Reserved,
    StoreFailed,
)
from gateway.service.principal import current_principal
from gateway.tubemq.events import EventBus

__all__ = ["Claim", "Idempotency", "Replay", "fingerprint", "parse_key"]

log = logging.getLogger("gateway.idempotency")

#: the longest key taken (the IETF draft leaves it to the server; UUIDs are 36)
MAX_KEY_LENGTH = 255
_T = TypeVar("_T")
_A = TypeVar("_A")


def parse_key(value: str | None, *, field: str) -> str | None:
    """The key of ``value`` (the header or field named ``field``); None when absent. A key is 1 to 255
    visible ASCII characters, bare or as a structured-field string (in double quotes)."""
    if value is None:
        return None
    key = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable() or " " in key:
        raise InvalidInput(
            f"{field} must be 1 to {MAX_KEY_LENGTH} visible ASCII characters (a UUID, for instance), "
            "optionally in double quotes",
            field=field,
        )
    if '"' in key or "\\" in key:
        raise InvalidInput(f"{field} must not hold a double quote or a backslash", field=field)
    return key


def fingerprint(parts: Iterable[bytes | str | None]) -> bytes:
    """SHA-256 of ``parts``, each length-prefixed (None apart from an empty value): two requests have the
    same fingerprint exactly when their parts are equal."""
    digest = hashlib.sha256()
    for part in parts:
        if part is None:
            digest.update(b"\xff")
            continue
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        digest.update(b"\x01" if isinstance(part, str) else b"\x00")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.digest()


@dataclass(frozen=True, slots=True)
class Claim:
    """A reserved key: the adapter publishes, then records the answer or releases the key."""

    principal: str
    topic: str
    key: str
    token: bytes


class Idempotency:
    """The keys of ``store``; see the module docstring. ``window``: seconds an answer is kept; ``lease``:
    seconds a reservation lasts without being renewed."""

    def __init__(self, store: KeyStore, events: EventBus, *, window: float, lease: float) -> None:
        self._store = store
        self._events = events
        self.window = window
        self.lease = lease

    def __repr__(self) -> str:
        return f"<Idempotency {self._store!r} window={self.window}s lease={self.lease}s>"

    async def _call(self, step: str, call: Callable[[], Awaitable[_T]]) -> _T:
        started = time.perf_counter()
        try:
            result = await call()
        except StoreFailed as exc:
            self._events.emit(IdempotencyChecked(step, "store_error", time.perf_counter() - started))
            log.warning("idempotency store failed", extra={"step": step, "error": str(exc)})
            raise Unavailable(
                "the idempotency store failed; retry with the same idempotency key shortly (or publish "
                "without one, without the guarantee)",
                retry_after=1.0,
            ) from exc
        self._events.emit(IdempotencyChecked(step, _outcome(result), time.perf_counter() - started))
        return result

    async def run(
        self,
        topic: str,
        key: str,
        print_: bytes,
        publish: Callable[[], Awaitable[_A]],
        kept: Callable[[_A], tuple[int, bytes] | None],
    ) -> _A | Replay:
        """The steps around ``publish`` (an adapter's publish of the request, giving its answer): the key
        claimed (the first answer given back as a :class:`Replay`, or the errors of :meth:`claim`), then
        the answer recorded as ``kept(answer)`` (status, bytes: some message was stored) or, when that is
        None or ``publish`` raised, the key released."""
        claim = await self.claim(topic, key, print_)
        if isinstance(claim, Replay):
            return claim
        renewing = asyncio.create_task(self._renew(claim))
        renewing.add_done_callback(_retrieved)
        try:
            answer = await publish()
        except Exception:
            renewing.cancel()
            await self.release(claim)
            raise
        finally:
            renewing.cancel()
        keep = kept(answer)
        if keep is None:
            await self.release(claim)
        else:
            await self.record(claim, *keep)
        return answer

    async def claim(self, topic: str, key: str, print_: bytes) -> Claim | Replay:
        """Reserve ``key`` of the calling principal on ``topic`` for a request of fingerprint ``print_``:
        a :class:`Claim` to publish under, or the first answer to send again. Raises Conflict (in flight),
        KeyReused (other fingerprint), RateLimited (the principal's keys are at their bound), Unavailable
        (the store's bytes are at their bound, or the store failed)."""
        principal = current_principal().identity
        store = self._store
        found = await self._call(
            "reserve", lambda: store.reserve(principal, topic, key, print_, lease=self.lease)
        )
        if isinstance(found, Reserved):
            return Claim(principal, topic, key, found.token)
        if isinstance(found, Replay):
            return found
        if isinstance(found, InFlight):
            raise Conflict(
                "idempotency_key is held by a request still being published; retry with the same key after "
                "the wait this answer gives, to get its answer",
                retry_after=max(1.0, min(found.retry_after, self.lease)),
                field="idempotency_key",
            )
        if isinstance(found, Mismatch):
            raise KeyReused(
                "idempotency_key was used for a request with other messages or options; use a new key for a "
                "new request",
                field="idempotency_key",
            )
        if found.principal:
            held = (
                f"{found.limit} idempotency keys" if found.unit == "keys" else f"{found.limit} bytes of keys"
            )
            raise RateLimited(
                f"you hold {held} and answers, the most kept per principal; publish without a key or wait "
                "until older keys expire",
                retry_after=found.retry_after,
                quota=Quota(f"idempotency-{found.unit}", found.limit, None, 0, found.unit),
            )
        raise Unavailable(
            "the idempotency store is full; retry later with the same idempotency key",
            retry_after=found.retry_after,
        )

    async def _renew(self, claim: Claim) -> None:
        """Keep ``claim``'s reservation while its publish runs (every third of the lease): only a holder
        that died lets it expire."""
        store = self._store
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                held = await self._call(
                    "renew",
                    lambda: store.renew(
                        claim.principal, claim.topic, claim.key, claim.token, lease=self.lease
                    ),
                )
            except Unavailable:
                continue  # logged; the next renewal tries again within the lease
            if not held:
                return

    async def record(self, claim: Claim, status: int, body: bytes) -> None:
        """Keep ``status`` and ``body`` as the answer of ``claim``'s key. A failure is logged, not raised:
        the messages are stored and the client gets this answer; only a retry of it may publish again."""
        store = self._store
        try:
            kept = await self._call(
                "record",
                lambda: store.record(
                    claim.principal, claim.topic, claim.key, claim.token, status, body, window=self.window
                ),
            )
        except Unavailable:
            log.error(
                "the answer of an idempotent publish was not recorded: a retry with its key publishes again",
                extra={"topic": claim.topic},
            )
            return
        if not kept:
            log.warning(
                "an idempotent publish lost its reservation (not renewed within idempotency.lease_seconds: "
                "the store failed): a retry may have published again",
                extra={"topic": claim.topic},
            )

    async def release(self, claim: Claim) -> None:
        """Free ``claim``'s key (nothing was stored): the next request with it publishes. A failure is
        logged: the reservation then ends after the lease."""
        store = self._store
        try:
            await self._call(
                "release", lambda: store.release(claim.principal, claim.topic, claim.key, claim.token)
            )
        except Unavailable:
            log.warning("an idempotency key was not released; it frees itself after the lease")

    async def close(self) -> None:
        await self._store.close()


def _retrieved(task: asyncio.Task[None]) -> None:
    """Take a renewal's end: an error other than the store's (which is logged where it happens) is logged."""
    if not task.cancelled() and task.exception() is not None:
        log.error("renewing an idempotency key failed", exc_info=task.exception())


def _outcome(result: object) -> str:
    if isinstance(result, Reserved):
        return "reserved"
    if isinstance(result, Replay):
        return "replayed"
    if isinstance(result, InFlight):
        return "in_flight"
    if isinstance(result, Mismatch):
        return "mismatch"
    if isinstance(result, Full):
        return "full"
    if result is False:
        return "lost"  # record or renew: the reservation is no longer this holder's
    return "ok"
