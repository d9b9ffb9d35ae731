"""A small TCP relay for the network-fault lab (tests/support/netns_support.py):
``LISTEN_HOST:PORT=TO_HOST:PORT`` pairs, each accepted connection copied both ways to a new connection to its
target.

``--delay-file PATH``: a file holding a delay in milliseconds (read every 0.2 s; missing or empty = 0) that
every chunk waits, in order, before it is passed on: latency for kernels without ``sch_netem``. Runs until
SIGTERM; prints ``ready`` once every listener is bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

_delay = 0.0


async def _watch(path: Path) -> None:
    global _delay
    while True:
        try:
            text = (await asyncio.to_thread(path.read_text)).strip()
            _delay = float(text) / 1000 if text else 0.0
        except (OSError, ValueError):
            _delay = 0.0
        await asyncio.sleep(0.2)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((time.monotonic() + _delay, chunk))
        queue.put_nowait((0.0, b""))
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(Exception):
            writer.close()


def _handler(target: tuple[str, int]):  # type: ignore[no-untyped-def]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pairs", nargs="+", help="LISTEN_HOST:PORT=TO_HOST:PORT")
    parser.add_argument("--delay-file", type=Path)
    args = parser.parse_args()
    servers = []
    for pair in args.pairs:
        listen, _, to = pair.partition("=")
        host, port = _address(listen)
        servers.append(await asyncio.start_server(_handler(_address(to)), host, port, reuse_address=True))
    if args.delay_file is not None:
        asyncio.get_running_loop().create_task(_watch(args.delay_file))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
