"""The process's budgets of work in progress, shared by every adapter: requests (and gRPC calls and streams)
in progress, each caller's share of them, and publish bytes held.

One :class:`Admission` per gateway process (``Runtime.admission``). The REST limits middleware and the gRPC
interceptor both count into it, so neither protocol can take what the other was promised: a flood of gRPC
publishes fills the same ``limits.max_inflight_publish_bytes`` that HTTP publishes fill, and a principal
holding its share of ``limits.max_concurrent_requests`` over HTTP has none left over gRPC.

A caller is a principal's :attr:`~gateway.service.principal.Principal.identity` (an anonymous caller: its
address, ``anonymous@<address>``), so one principal, or one anonymous address, cannot hold more than
``share`` of the slots however many connections it opens, and the others keep theirs.

The adapters pass the bounds on every call (they read their settings per request); 0 means no bound. All of
it runs on the event loop's thread: plain integers, no locks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Admission", "Refusal", "caller_bytes", "caller_share"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not admitted: ``whole`` (the process holds its maximum) or ``caller`` (this
    caller holds its share); ``limit`` the bound reached."""

    reason: str
    limit: int

    def message(self, what: str = "requests") -> str:
        if self.reason == "caller":
            return (
                f"this caller already has its share of {self.limit} {what} in progress on this gateway; "
                "wait for some to finish (or spread the load over more principals or replicas)"
            )
        return (
            f"this gateway is serving its maximum of {self.limit} {what}; retry shortly or through another "
            "replica"
        )


def caller_share(total: int, share: int | None) -> int:
    """One caller's share of ``total`` slots: ``share`` when configured (0: none), else a quarter of
    ``total`` (at least 1); 0 when ``total`` is 0 (no bound at all)."""
    if share is not None:
        return share
    return max(1, total // 4) if total else 0


def caller_bytes(cap: int, total: int, share: int) -> int:
    """One caller's share of ``cap`` bytes: the same fraction of them as its ``share`` of ``total`` slots
    (:func:`caller_share`); 0 (no bound) when either is 0."""
    return cap * share // total if share and total else 0


class Admission:
    """Counts of work in progress: see the module docstring."""

    __slots__ = ("_by_caller", "_on_release", "active", "inflight_bytes")

    def __init__(self) -> None:
        self.active = 0
        self.inflight_bytes = 0
        self._by_caller: dict[str, int] = {}
        self._on_release: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        callers = len(self._by_caller)
        return f"<Admission active={self.active} callers={callers} inflight_bytes={self.inflight_bytes}>"

    def held_by(self, caller: str) -> int:
        """Requests ``caller`` has in progress."""
        return self._by_caller.get(caller, 0)

    def enter(self, caller: str, limit: int, share: int) -> Refusal | None:
        """Count one more request of ``caller``, or say why not (nothing counted): ``limit`` requests in
        progress in the process, ``share`` of them per caller (0: no bound)."""
        if limit and self.active >= limit:
            return Refusal("whole", limit)
        held = self._by_caller.get(caller, 0)
        if share and held >= share:
            return Refusal("caller", share)
        self.active += 1
        self._by_caller[caller] = held + 1
        return None

    def leave(self, caller: str) -> None:
        """Forget one request counted by :meth:`enter`."""
        self.active -= 1
        held = self._by_caller.get(caller, 0) - 1
        if held > 0:
            self._by_caller[caller] = held
        else:
            self._by_caller.pop(caller, None)

    def reserve(self, size: int, limit: int) -> bool:
        """Hold ``size`` more publish bytes, unless that would pass ``limit`` (0: no bound)."""
        if limit and self.inflight_bytes + size > limit:
            return False
        self.inflight_bytes += size
        return True

    def release(self, size: int) -> None:
        """Give back ``size`` publish bytes held by :meth:`reserve`; those waiting for room hear of it."""
        self.inflight_bytes -= size
        if self._on_release:
            for listener in self._on_release:
                listener()

    def watch_releases(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever publish bytes are given back (the gRPC reads waiting for room)."""
        self._on_release.append(listener)
