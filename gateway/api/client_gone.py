"""Ending a request's work when its client goes away (a long poll the client gave up on).

A plain (not streamed) answer is computed before anything is written, so the server notices a client that
closed its connection only when it writes the answer: a long poll would keep its instance busy for its whole
timeout, and a sibling worker or replica serving it through a hop would hold its own poll just as long.
:func:`until_client_gone` runs the work while waiting on the request's ``receive`` channel, which yields
``http.disconnect`` when the connection is lost, and cancels the work at once. On a hop the forwarding
client's request is cancelled with it; that closes the hop's connection, so the owner's own wait ends the
same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response
from starlette.types import Receive

from gateway.observability.logging import CLIENT_CLOSED

__all__ = ["until_client_gone"]

_T = TypeVar("_T")


async def until_client_gone(client: Request | asyncio.Future[None], work: Awaitable[_T]) -> _T | Response:
    """``work``'s result, or, once the client has gone away first, ``work`` cancelled and an empty 499
    answer (nobody reads it; the access log and the metrics count it as the client leaving).

    ``client`` is the request, whose body is read first (the wait then takes the request's remaining
    messages: a route's work reads the body again from the request's cache); or, for a request answered
    below ASGI (``gateway/api/direct_poll.py``), the future its connection resolves when it is lost."""
    if isinstance(client, asyncio.Future):
        return await _until(client, work)
    await client.body()
    watcher = asyncio.create_task(_disconnected(client.receive))
    try:
        return await _until(watcher, work)
    finally:
        watcher.cancel()


async def _until(gone: asyncio.Future[None], work: Awaitable[_T]) -> _T | Response:
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled():
        task.exception()  # an outcome that raced the cancel: nobody is left to tell
    return Response(status_code=CLIENT_CLOSED)


async def _disconnected(receive: Receive) -> None:
    """Return once ``receive`` says the client disconnected (the body messages before that are dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass
