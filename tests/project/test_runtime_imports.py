"""Modules the libraries import on every call are installed: an import that fails walks ``sys.path`` again
each time instead of answering from ``sys.modules``.

httpcore (under httpx: request forwarding between workers and replicas, the web API offset reads, JWKS
fetches) imports ``sniffio`` inside every lock, semaphore and event it sets up, four times a request, and
falls back to asyncio when the import fails; pyproject.toml declares it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import httpcore._synchronization as synchronization


def test_sniffio_is_installed_and_httpcore_reads_the_loop_from_it() -> None:
    assert importlib.util.find_spec("sniffio") is not None, "pip install sniffio (pyproject.toml names it)"

    async def detect() -> str:
        return synchronization.current_async_library()

    assert asyncio.run(detect()) == "asyncio"
    assert "sniffio" in sys.modules
