"""Waiting in tests: the one poller (wait until a condition holds, without timing anything) and a manual
clock for the classes that take an injected one.

``timeout`` only bounds a wait that would otherwise hang; it is generous on purpose (the machine running the
suite may be busy) and is never what a test asserts.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ManualClock", "bounded", "eventually"]


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    timeout: float = 10.0,  # noqa: ASYNC109 - bounds the retries, not one call
    what: str = "condition",
    step: float = 0.01,
) -> Any:
    """Call ``check`` (a plain or an async function) until it returns something true, and return that;
    fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(step)


async def bounded(step: Awaitable[Any], what: str, timeout: float = 60.0) -> Any:  # noqa: ASYNC109
    """Await ``step`` (a server's or a runtime's stop): one that has not ended after ``timeout`` seconds fails
    the test with every task's stack, where a stop that waits on something that never comes would otherwise
    hold the whole suite."""
    try:
        async with asyncio.timeout(timeout):
            return await step
    except TimeoutError:
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            print(f"--- {task.get_name()}: {task.get_coro()!r}", file=stacks)
            task.print_stack(file=stacks)
        tasks = stacks.getvalue()
        raise AssertionError(f"{what} did not end within {timeout}s; the tasks:\n{tasks}") from None


class ManualClock:
    """A clock for the classes that take ``clock=``: time moves only when the test calls :meth:`advance`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
