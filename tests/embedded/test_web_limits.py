"""The embedded nodes' web API bounds a request's head as the real nodes' Jetty does: 8 KiB for the request
line and header lines, a target over it answered 414 and a longer head 431, with Jetty's HTML page; a head
within it is served. tests/interop/test_interop_web_limits.py sends the same heads to the real master."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.embedded.web import MAX_HEAD_BYTES, WebApi
from tests.support.web_heads import exchange, head_with_header, head_with_target

JETTY_PAGE = "text/html;charset=iso-8859-1"


@pytest.fixture
async def api() -> AsyncIterator[WebApi]:
    node = WebApi(lambda method, params: {"result": True, "errCode": 0, "method": method}, name="t")
    await node.start()
    yield node
    await node.stop()


@pytest.mark.parametrize("make", [head_with_target, head_with_header])
async def test_a_head_of_8_kib_is_served_and_one_byte_more_is_refused(
    api: WebApi, make: Callable[[int], bytes]
) -> None:
    assert len(make(MAX_HEAD_BYTES)) == MAX_HEAD_BYTES + 2  # and the blank line
    status, kind, body = await exchange(api.port, make(MAX_HEAD_BYTES))
    assert (status, kind) == (200, "application/json;charset=UTF-8"), body
    assert b'"method":"admin_query_broker_configure"' in body
    status, kind, body = await exchange(api.port, make(MAX_HEAD_BYTES + 1))
    assert (status, kind, body) == (
        431,
        JETTY_PAGE,
        b"<h1>Bad Message 431</h1><pre>reason: Request Header Fields Too Large</pre>",
    )


async def test_a_target_over_8_kib_is_refused_as_too_long(api: WebApi) -> None:
    status, kind, body = await exchange(api.port, head_with_target(MAX_HEAD_BYTES + 300))
    assert (status, kind, body) == (
        414,
        JETTY_PAGE,
        b"<h1>Bad Message 414</h1><pre>reason: URI Too Long</pre>",
    )


async def test_a_head_without_end_is_answered_once_past_the_bound(
    api: WebApi,
) -> None:
    """A client sending header bytes without end gets its 431 once the bound is passed, while it is still
    sending: the node reads no more than the bound."""
    reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
    writer.write(b"GET /webapi.htm HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"y" * (MAX_HEAD_BYTES + 100))
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
