"""Backoff strategies: ``compute(failures)`` gives the pause in seconds before the next attempt.

``failures`` is the number of consecutive failures so far; 0 means "no failure yet" and always gives 0.0.
Strategies hold no state and never sleep; randomness comes from an injectable source so tests are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from gateway.tubemq.randomness import private_random

__all__ = ["Backoff", "ConstantBackoff", "ExponentialBackoff"]

#: The jitter's own generator (the process-wide ``random`` state is left to the host application).
_JITTER = private_random()


class Backoff(Protocol):
    def compute(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures."""
        ...


class ConstantBackoff:
    """The same pause after every failure."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        if delay < 0:
            raise ValueError(f"backoff delay must be >= 0 seconds, got {delay}")
        self.delay = delay

    def compute(self, failures: int) -> float:
        return self.delay if failures > 0 else 0.0

    def __repr__(self) -> str:
        return f"ConstantBackoff(delay={self.delay})"


class ExponentialBackoff:
    """``base * factor ** (failures - 1)`` seconds, capped at ``cap``, then reduced by jitter.

    ``jitter`` in [0, 1] is the fraction of the delay that is randomised: the result is
    ``delay * (1 - jitter * r)`` with ``r = rand()`` in [0, 1). 0 is deterministic, 1 is "full jitter"
    (anywhere in (0, delay]). ``rand`` defaults to a generator of this module's own (the process-wide
    ``random`` state is left to the host application).
    """

    __slots__ = ("_rand", "_saturation", "base", "cap", "factor", "jitter")

    def __init__(
        self,
        base: float = 0.1,
        cap: float = 10.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.0,
        rand: Callable[[], float] | None = None,
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap seconds, got base={base} cap={cap}")
        if factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {factor}")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"backoff jitter must be within [0, 1], got {jitter}")
        self.base = base
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._rand = rand if rand is not None else _JITTER.random
        # Beyond this many failures the delay is the cap; avoids float overflow for huge counts.
        self._saturation = 1 + math.ceil(math.log(cap / base, factor)) if factor > 1 else math.inf

    def compute(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        if failures > self._saturation:
            delay = self.cap
        else:
            delay = min(self.cap, self.base * self.factor ** (failures - 1))
        if self.jitter:
            delay *= 1.0 - self.jitter * self._rand()
        return delay

    def __repr__(self) -> str:
        return (
            f"ExponentialBackoff(base={self.base}, cap={self.cap}, factor={self.factor}, "
            f"jitter={self.jitter})"
        )
