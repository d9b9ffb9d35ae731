"""When the supervisor starts a worker again that exited on its own, and when it gives the replica up.

One worker's crash loop (an OOM kill at every start, say) must not take down the workers that serve fine:

* a worker that ran at least ``healthy_after`` seconds before it exited is started again after
  ``backoff`` seconds, its failure count back at 0;
* one that exited sooner has failed: it is started again after ``backoff * 2**(failures - 1)`` seconds
  (at most ``backoff_max``) while its siblings keep serving (the kernel hands the shared ports' connections
  only to workers that listen, so probes and clients see the replica ready while any worker serves);
* the replica stops (exit status 1) only when every worker is failing at once: each has failed and none has
  since run ``healthy_after`` seconds (a wrong setting, a port taken: every worker fails at its start), or
  when one worker failed more than ``max_restarts`` times in a row (0: no such limit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GiveUp", "Restart", "RestartPolicy"]


@dataclass(frozen=True, slots=True)
class Restart:
    """Start the worker again after ``delay`` seconds; ``failures``: its early exits in a row."""

    delay: float
    failures: int


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop the replica: ``reason`` says why."""

    reason: str


@dataclass(slots=True)
class _Record:
    started: float
    running: bool = True
    failures: int = 0


@dataclass
class RestartPolicy:
    """The decisions for ``count`` workers (module docstring); times in seconds from ``clock``."""

    count: int
    healthy_after: float
    backoff: float = 1.0
    backoff_max: float = 30.0
    max_restarts: int = 0
    clock: Callable[[], float] = time.monotonic
    _records: dict[int, _Record] = field(default_factory=dict)

    def started(self, index: int) -> None:
        """Worker ``index`` has been (re)started now."""
        record = self._records.get(index)
        if record is None:
            self._records[index] = _Record(self.clock())
        else:
            record.started, record.running = self.clock(), True

    def exited(self, index: int) -> Restart | GiveUp:
        """Worker ``index`` exited on its own: when to start it again, or to stop the replica."""
        record = self._records.setdefault(index, _Record(self.clock()))
        record.running = False
        if self.clock() - record.started >= self.healthy_after:
            record.failures = 0
            return Restart(self.backoff, 0)
        record.failures += 1
        if self.max_restarts and record.failures > self.max_restarts:
            return GiveUp(
                f"worker {index} failed {record.failures} times in a row soon after starting "
                f"(supervisor.max_restarts is {self.max_restarts})"
            )
        if all(self.failing(i) for i in range(self.count)):
            return GiveUp(f"every worker ({self.count}) fails soon after it starts")
        delay = min(self.backoff * 2 ** (record.failures - 1), self.backoff_max)
        return Restart(delay, record.failures)

    def failing(self, index: int) -> bool:
        """Whether worker ``index`` failed and has not run ``healthy_after`` seconds since."""
        record = self._records.get(index)
        if record is None or record.failures == 0:
            return False
        return not (record.running and self.clock() - record.started >= self.healthy_after)

    def serving(self) -> int:
        """Workers running now."""
        return sum(1 for record in self._records.values() if record.running)
