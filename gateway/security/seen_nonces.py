"""The nonces of relayed client identities this process has accepted, each kept until it expires: a value
whose nonce is here is a replay (:mod:`gateway.security.replica_subject`).

Bounded: at most ``limit`` nonces (about 200 bytes each). Expired ones leave first; when the nonces still
valid fill it (more relays in one validity window than ``limit``), the oldest is dropped and counted in
:attr:`SeenNonces.dropped`. A dropped nonce could be accepted once more until it expires, which takes a
connection presenting the certificate the value was signed for (a replica's), not only the value.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["DEFAULT_LIMIT", "SeenNonces"]

#: nonces kept at most (65,536: about 13 MB; a relay rate of 500/s over two 60 s windows fits)
DEFAULT_LIMIT = 65_536


class SeenNonces:
    """See the module docstring; times are the caller's clock (seconds)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        #: nonces dropped while still valid, to stay within ``limit``
        self.dropped = 0
        self._until: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def __repr__(self) -> str:
        return f"<SeenNonces {len(self._until)}/{self.limit} dropped={self.dropped}>"

    def first_use(self, nonce: str, until: float, now: float) -> bool:
        """Remember ``nonce`` until ``until``; False when it is remembered already (a replay)."""
        seen = self._until
        while seen:
            oldest, expiry = next(iter(seen.items()))
            if expiry > now:
                break
            del seen[oldest]
        if nonce in seen:
            return False
        if len(seen) >= self.limit:
            seen.popitem(last=False)
            self.dropped += 1
        seen[nonce] = until
        return True
