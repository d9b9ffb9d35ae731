"""The guarded HTTP protocol's response writer and its one timer per connection (gateway/api/http_guard.py).
Real sockets for the protocol; an in-memory transport for the writer's own rules."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.api.http_guard import ResponseWriter
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support.raw_http import answer, open_request, serving

PUBLISH = "/v1/topics/demo/messages"


class Recording(asyncio.Transport):
    """Records each call that would reach the socket: write, writelines and close, with their bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, data: Any) -> None:
        self.calls.append(("writelines", [bytes(d) for d in data]))

    def close(self) -> None:
        self.calls.append(("close",))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


async def test_the_head_and_body_written_in_one_step_go_out_in_one_call() -> None:
    transport = Recording()
    writer = ResponseWriter(transport, asyncio.get_running_loop())
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writer.write(b"{}")
    assert transport.calls == [("writelines", [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"])]
    await asyncio.sleep(0)
    assert len(transport.calls) == 1  # nothing left held


async def test_a_piece_alone_goes_out_at_the_next_turn_of_the_loop() -> None:
    transport = Recording()
    writer = ResponseWriter(transport, asyncio.get_running_loop())
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")  # a stream's head
    assert transport.calls == []
    await asyncio.sleep(0)
    assert transport.calls == [("write", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")]
    writer.write(b"5\r\nhello\r\n")
    writer.flush()  # as the protocol does before writing on the transport itself
    assert transport.calls[-1] == ("write", b"5\r\nhello\r\n")
    await asyncio.sleep(0)
    assert len(transport.calls) == 2


async def test_close_sends_what_is_held_first_and_a_closing_transport_gets_nothing() -> None:
    transport = Recording()
    writer = ResponseWriter(transport, asyncio.get_running_loop())
    writer.write(b"head")
    writer.close()
    assert transport.calls == [("write", b"head"), ("close",)]
    assert writer.is_closing()
    writer.write(b"late")
    await asyncio.sleep(0)
    assert transport.calls == [("write", b"head"), ("close",)]  # dropped: the connection is going away


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


async def test_keep_alive_closes_an_idle_connection_before_a_longer_header_timeout(
    cluster: EmbeddedCluster,
) -> None:
    # An hour of header timeout: only the keep-alive timeout can close the connection within the bound.
    async with serving(cluster, header_timeout=3600, keep_alive_timeout=0.2) as (port, _):
        reader, writer = await open_request(port, "GET", "/healthz", {})
        assert (await answer(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), 60) == b""
        writer.close()


async def test_a_begun_header_section_gets_408_after_a_response_while_keep_alive_is_longer(
    cluster: EmbeddedCluster,
) -> None:
    async with serving(cluster, header_timeout=0.2, keep_alive_timeout=3600) as (port, _):
        reader, writer = await open_request(port, "GET", "/healthz", {})
        assert (await answer(reader))[0] == 200
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # and never the blank line
        await writer.drain()
        assert (await asyncio.wait_for(reader.read(), 60)).startswith(b"HTTP/1.1 408 ")
        writer.close()


async def test_many_requests_on_one_connection_each_get_their_whole_answer(cluster: EmbeddedCluster) -> None:
    async with serving(cluster, header_timeout=5, keep_alive_timeout=5) as (port, _):
        body = b'{"messages": [{"value": "x"}]}'
        head = {"content-type": "application/json", "content-length": str(len(body))}
        reader, writer = await open_request(port, "POST", PUBLISH, head)
        for i in range(50):
            writer.write(body)
            await writer.drain()
            status, headers, document = await answer(reader)
            assert status == 200 and document["results"][0]["status"] == 200, document
            assert headers["content-type"] == "application/json" and "x-request-id" in headers
            if i < 49:
                lines = [f"POST {PUBLISH} HTTP/1.1", "host: x", *(f"{k}: {v}" for k, v in head.items())]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        # HEAD: an answer without a body (one write): it still arrives whole.
        writer.write(b"HEAD /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 ")
        writer.close()


async def test_requests_leave_no_reference_cycles_for_the_collector(cluster: EmbeddedCluster) -> None:
    """A request's cycle and scope are freed as the request ends, not left to the garbage collector (whose
    young-generation passes then cost the gateway CPU and every request in flight a pause)."""
    async with serving(cluster) as (port, _):
        body = b'{"messages": [{"value": "x"}]}'
        head = {"content-type": "application/json", "content-length": str(len(body))}
        lines = [f"POST {PUBLISH} HTTP/1.1", "host: x", *(f"{k}: {v}" for k, v in head.items())]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            assert (await answer(reader))[0] == 200  # the first request sets up what lives on
            gc.collect()
            gc.disable()
            try:
                for _ in range(20):
                    writer.write(request)
                    assert (await answer(reader))[0] == 200
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                left = [type(o).__name__ for o in gc.garbage]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
        finally:
            writer.close()
        assert "RequestResponseCycle" not in left, sorted(set(left))
