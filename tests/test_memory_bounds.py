"""Memory bounds of issue #11, measured on a gateway in its own process (tests/rss_gateway.py): a 200 MB
chunked body to each body-taking route raises the process's peak RSS (VmHWM) by less than 32 MB. The numbers
are printed (run with -s to see them)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MB = 1024 * 1024
BODY = 200 * MB
BOUND = 32 * MB


def vm(pid: int, field: str) -> int:
    """A /proc/<pid>/status size field (VmRSS, VmHWM) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


@pytest.fixture
def gateway_process() -> Iterator[tuple[int, int]]:
    """(pid, port) of a gateway process with an 8 MiB publish limit (the default 32 MiB alone would be
    buffered whole, above the bound: see README, Limits)."""
    settings = {"limits": {"max_request_bytes": 8 * MB}}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "rss_gateway.py"), json.dumps(settings)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield proc.pid, int(line.split()[1])
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def post_chunked(port: int, path: str, content_type: str, total: int) -> int | None:
    """Send ``total`` bytes in 256 KiB chunks until the server answers; return its status (None: the
    connection was reset, the answer lost: what a server closing on unread data may cause)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    )
    writer.write(head.encode())
    piece = b"7" * min(total, 256 * 1024)
    framed = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    answer = asyncio.ensure_future(reader.readline())
    sent = 0
    try:
        while sent < total and not answer.done():
            writer.write(framed)
            sent += len(piece)
            await writer.drain()
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass
    try:
        status_line = await answer
    except ConnectionError:
        return None  # reset: the server answered and closed on the unread rest before the answer was read
    finally:
        writer.close()
    return int(status_line.split()[1])


async def test_200_mb_chunked_bodies_raise_peak_rss_by_less_than_32_mb(
    gateway_process: tuple[int, int],
) -> None:
    pid, port = gateway_process
    assert await post_chunked(port, "/v1/topics/demo/messages", "application/octet-stream", 1000) == 200
    created = await post_chunked(port, "/v1/consumers/grp", "application/json", 100)
    assert created == 400  # garbage JSON, read whole: a warm-up of the route
    before = vm(pid, "VmHWM")
    routes = [
        ("/v1/topics/demo/messages", "application/octet-stream"),
        ("/v1/topics/demo/messages", "application/json"),
        ("/v1/consumers/grp", "application/json"),
        ("/v1/consumers/grp/instances/x/commits", "application/json"),
    ]
    for path, content_type in routes:
        assert await post_chunked(port, path, content_type, BODY) in (413, None), path
    rise = vm(pid, "VmHWM") - before
    # Still serving.
    assert await post_chunked(port, "/v1/topics/demo/messages", "application/octet-stream", 1000) == 200
    print(f"\npeak RSS before {before / MB:.1f} MB, rise after 4 x 200 MB chunked bodies: {rise / MB:.1f} MB")
    assert rise < BOUND
