"""Teardown that a cancellation cannot leave half done.

A ``close()`` is awaited by callers that may be cancelled at any await point: a gRPC deadline, a reaper
cancelled mid-close, uvicorn's shutdown grace. If the steps of a close ran in the caller's task, such a
cancellation would stop them in the middle (worker tasks still running, the master still listing the
member). :class:`CloseOnce` runs the steps in a task of their own and shields it: a cancelled caller gets
its ``CancelledError`` at once while the close goes on to the end; every further ``close()`` waits for the
same task, and one that was itself cancelled (the event loop shutting down) is started again, so the steps
must be idempotent.

:func:`cancel_and_wait` stops worker tasks and waits until they are really done, cancelling again should a
task swallow a cancellation (``asyncio.wait_for`` did in Python 3.11 when its inner future finished at the
same moment).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

__all__ = ["CloseOnce", "cancel_and_wait"]

log = logging.getLogger(__name__)

#: how long to wait for a cancelled task before cancelling it again (seconds)
RECANCEL_INTERVAL = 0.1


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task and return once all are done; exceptions of the tasks are logged, not raised."""
    pending = {task for task in tasks if task is not None and task is not asyncio.current_task()}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_INTERVAL)
        for task in pending:
            task.cancel()


class CloseOnce:
    """Runs ``steps`` once in a shielded task; see the module docstring. ``name`` names the task."""

    def __init__(self, steps: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._steps = steps
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "new" if self._task is None else "done" if self._task.done() else "running"
        return f"<CloseOnce {self._name} {state}>"

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def done(self) -> bool:
        """Whether the steps ran to their end (successfully or with an error)."""
        return self._task is not None and self._task.done() and not self._task.cancelled()

    async def __call__(self) -> None:
        """Run the steps (or wait for the run in progress); a cancellation of the caller does not stop
        them. Raises what the steps raised."""
        task = self._task
        if task is None or task.cancelled():
            task = self._task = asyncio.get_running_loop().create_task(self._steps(), name=self._name)
            task.add_done_callback(self._finished)
        await asyncio.shield(task)

    def _finished(self, task: asyncio.Task[None]) -> None:
        # A caller cancelled meanwhile never sees the outcome: log a failure here instead of leaving it
        # to asyncio's "exception was never retrieved".
        if not task.cancelled() and (error := task.exception()) is not None:
            log.warning("%s failed: %r", self._name, error)
