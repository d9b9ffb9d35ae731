"""Graceful shutdown on SIGTERM (and SIGINT): drain, finish what is in flight, release, exit in time.

The sequence, all within ``grace_period`` seconds of the first signal:

1. at once: readiness turns false (``/readyz`` answers 503, so the Service and ingress stop routing here)
   and the consumer service refuses new consumer instances (both read ``runtime.draining``); open long
   polls answer at once (``Runtime.begin_drain``), so none waits into the request deadline;
2. for ``drain_delay`` seconds the gateway keeps serving normally (for load balancers that only learn
   about the pod from readiness; on Kubernetes the chart's preStop sleep does this before the signal);
3. uvicorn stops accepting connections, closes idle keep-alive ones and waits up to
   :attr:`ShutdownPlan.requests_timeout` for in-flight requests, so publishes in progress get their answer;
4. the app's lifespan ends and ``Runtime.stop()`` runs: consumer instances commit or release their
   partitions, the producer closes its master session, the pool closes, the embedded cluster stops;
5. the process exits 0. If any of this hangs past ``grace_period``, a watchdog thread logs it and exits 1
   (before Kubernetes' SIGKILL at terminationGracePeriodSeconds). A second signal skips the waiting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import uvicorn

__all__ = ["GracefulServer", "ShutdownPlan"]

log = logging.getLogger("gateway.shutdown")


@dataclass(frozen=True, slots=True)
class ShutdownPlan:
    """Time budget of a graceful shutdown, in seconds.

    ``grace_period`` bounds the whole shutdown; ``drain_delay`` is served unready before the listener
    closes. What remains is split between in-flight HTTP requests and stopping the runtime, which gets
    :attr:`stop_reserve` (a third of the grace period, at most 10 s).
    """

    grace_period: float = 25.0
    drain_delay: float = 0.0

    def __post_init__(self) -> None:
        if self.grace_period <= 0:
            raise ValueError(f"grace_period must be positive, not {self.grace_period}")
        if not 0 <= self.drain_delay < self.grace_period:
            raise ValueError(f"drain_delay must be in [0, grace_period), not {self.drain_delay}")

    @property
    def stop_reserve(self) -> float:
        return min(10.0, self.grace_period / 3)

    @property
    def requests_timeout(self) -> float:
        """How long uvicorn waits for in-flight requests once it stops listening."""
        return max(0.0, self.grace_period - self.drain_delay - self.stop_reserve)


class GracefulServer(uvicorn.Server):
    """A ``uvicorn.Server`` whose first SIGTERM/SIGINT runs the sequence in the module docstring.

    ``on_drain`` is called once, at the first signal (set ``runtime.draining``); it must be quick.
    ``exit_now`` ends the process when the grace period is overrun (``os._exit``; injectable for tests).
    Use ``uvicorn.Config(..., timeout_graceful_shutdown=plan.requests_timeout)``; :meth:`run` returns 0.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_drain: Callable[[], None],
        plan: ShutdownPlan,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        super().__init__(config)
        self.plan = plan
        self._on_drain = on_drain
        self._exit_now = exit_now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining_since: float | None = None
        self._watchdog: threading.Timer | None = None

    @property
    def draining(self) -> bool:
        return self._draining_since is not None

    def __repr__(self) -> str:
        if self._draining_since is None:
            state = "serving" if self.started else "starting"
        else:
            state = f"draining for {time.monotonic() - self._draining_since:.1f}s"
        return (
            f"<GracefulServer {state} grace={self.plan.grace_period:g}s "
            f"drain_delay={self.plan.drain_delay:g}s requests_timeout={self.plan.requests_timeout:g}s>"
        )

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await super().serve(sockets)
        finally:
            try:
                await self.release()
            finally:
                if self._watchdog is not None:
                    self._watchdog.cancel()
                if self._draining_since is not None:
                    log.info(
                        "graceful shutdown complete",
                        extra={"seconds": round(time.monotonic() - self._draining_since, 3)},
                    )

    async def release(self) -> None:
        """Stop what this server owns, after uvicorn has shut down (override it); the watchdog still
        watches, so a hang here also ends the process at the grace period."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as a signal handler on the main thread: record, flag, and hand the rest to the loop.
        # Unlike uvicorn's own handler this does not re-raise the signal after the shutdown, so a clean
        # drain exits 0.
        if self._draining_since is not None:
            log.warning("second signal %s: skipping the remaining waits", signal.Signals(sig).name)
            self.force_exit = True
            self.should_exit = True
            return
        self.begin_drain(signal.Signals(sig).name)

    def begin_drain(self, why: str = "requested") -> None:
        """Start the shutdown sequence (what the first signal does)."""
        if self._draining_since is not None:
            return
        self._draining_since = time.monotonic()
        self._on_drain()
        self._watchdog = threading.Timer(self.plan.grace_period, self._overdue)
        self._watchdog.daemon = True
        self._watchdog.start()
        log.info(
            "draining: readiness is false, new consumer instances are refused",
            extra={
                "cause": why,
                "grace_period": self.plan.grace_period,
                "drain_delay": self.plan.drain_delay,
                "requests_timeout": self.plan.requests_timeout,
            },
        )
        loop = self._loop
        if loop is None or self.plan.drain_delay == 0:
            self.should_exit = True
        else:
            loop.call_soon_threadsafe(loop.call_later, self.plan.drain_delay, self._stop_listening)

    def _stop_listening(self) -> None:
        log.info("drain delay over: closing the listener, finishing in-flight requests")
        self.should_exit = True

    def _overdue(self) -> None:
        log.error(
            "graceful shutdown overran its grace period: exiting now",
            extra={"grace_period": self.plan.grace_period},
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._exit_now(1)
