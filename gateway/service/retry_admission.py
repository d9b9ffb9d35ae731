"""What a nack's retry publishes cost the caller: they are publishes like any other, so they spend the
caller's publish rate (:meth:`gateway.service.quotas.Quotas.charge_publish`, shared by the workers of a
replica) and hold their bytes in the process's in-flight publish budget
(:class:`gateway.service.admission.Admission`, ``limits.max_inflight_publish_bytes``) until the broker
answered. A nack above either is refused whole before anything is published: 429 naming the rate and when
to retry, or 503 when the gateway holds its maximum of publish bytes. Retries the gateway makes on its own
(an expired deadline) are not charged to anybody."""

from __future__ import annotations

from collections.abc import Callable

from gateway.service.admission import Admission, Refusal
from gateway.service.errors import Unavailable
from gateway.service.quotas import Quotas

__all__ = ["RetryAdmission"]

#: seconds a nack refused for want of in-flight publish bytes is told to wait
_RETRY_AFTER = 1.0


class RetryAdmission:
    """Charges a nack's retry publishes to the current caller (see the module docstring)."""

    __slots__ = ("_admission", "_limit", "_quotas")

    def __init__(
        self,
        quotas: Quotas | None = None,
        admission: Admission | None = None,
        max_inflight_bytes: Callable[[], int] = lambda: 0,
    ) -> None:
        self._quotas = quotas
        self._admission = admission
        self._limit = max_inflight_bytes

    def __repr__(self) -> str:
        return f"<RetryAdmission quotas={self._quotas is not None} admission={self._admission!r}>"

    def admit(self, messages: int, payload_bytes: int) -> Callable[[], None]:
        """Charge ``messages`` retry publishes of ``payload_bytes`` value bytes in all to the current caller
        and hold the bytes in flight; returns what gives the bytes back once the publishes are done. Raises
        RateLimited (the caller's publish rate: nothing spent) or Unavailable (no room for the bytes)."""
        admission = self._admission
        limit = self._limit()
        if admission is not None and not admission.reserve(payload_bytes, limit):
            raise Unavailable(
                Refusal("whole", limit).message("bytes of publishing"), retry_after=_RETRY_AFTER
            )
        try:
            if self._quotas is not None:
                self._quotas.charge_publish(messages, payload_bytes)
        except BaseException:
            if admission is not None:
                admission.release(payload_bytes)
            raise
        if admission is None:
            return _nothing
        return lambda: admission.release(payload_bytes)


def _nothing() -> None:
    return None
