"""The event loop every bench runs on: uvloop when installed, unless the bench was given ``--no-uvloop``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def pick_loop(no_uvloop: bool) -> tuple[LoopFactory | None, str]:
    """The ``asyncio.Runner`` loop factory (None: the default loop) and its name for the report line."""
    if not no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop, "uvloop"
    return None, "asyncio"
