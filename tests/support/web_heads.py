"""Request heads of a chosen size for a TubeMQ node's web API, and the answer they get, spoken by hand over
a loopback socket: the embedded nodes' bound on a head is checked against the real nodes' with the same
bytes."""

from __future__ import annotations

import asyncio

QUERY = "/webapi.htm?type=op_query&method=admin_query_broker_configure"
#: every head's usual headers (the node closes the connection after its answer)
HEADERS = "Host: 127.0.0.1\r\nConnection: close\r\n"


def head_with_target(size: int) -> bytes:
    """A GET whose head (request line and header lines, without the blank line) is ``size`` bytes, made
    long by its request target."""
    line, rest = f"GET {QUERY}&pad=", f" HTTP/1.1\r\n{HEADERS}"
    return (line + "x" * (size - len(line) - len(rest)) + rest + "\r\n").encode()


def head_with_header(size: int) -> bytes:
    """A GET whose head is ``size`` bytes, made long by one header's value."""
    start, end = f"GET {QUERY} HTTP/1.1\r\n{HEADERS}X-Pad: ", "\r\n"
    return (start + "y" * (size - len(start) - len(end)) + end + "\r\n").encode()


async def exchange(port: int, head: bytes) -> tuple[int, str, bytes]:
    """Send ``head`` and read the whole answer (the node closes the connection after it): status, content
    type and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), fields.get("Content-Type", ""), body
