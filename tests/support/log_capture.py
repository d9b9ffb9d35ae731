"""A log handler attached for the length of a block: on the root logger or a named one, with that logger at
DEBUG meanwhile and its level given back after."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["attached"]

H = TypeVar("H", bound=logging.Handler)


@contextmanager
def attached(handler: H, name: str = "") -> Iterator[H]:
    """``handler`` on the logger ``name`` (the root logger by default), which logs from DEBUG up in the block;
    yields the handler."""
    log = logging.getLogger(name)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
