"""Running the process's main coroutine: on uvloop when it is installed, else on the default asyncio loop.

A leaf shared by the CLI (``gateway.__main__``) and the worker supervisor, so neither imports the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_main(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` to completion on a new event loop; its exit status."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a platform-dependent dependency
        return asyncio.run(main)
    return uvloop.run(main)
