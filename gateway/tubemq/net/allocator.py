"""The C allocator's thresholds for a process that moves TubeMQ answers: :func:`retain_freed_memory`.

A consumer's GetMessage answer is some 500 KB, decoded into as many bytes again of message bodies, all freed
once the batch is handed on. glibc's malloc, left to its dynamic thresholds, gives that memory back to the
kernel when it is freed (it trims the top of the heap once more than twice the largest freed block is free
there, and maps blocks above its threshold one by one) and takes it back, page fault by page fault, for the
next answer: measured on a consumer of 1 KiB messages, a third of the process's CPU went to the faults and
the trims. Fixed thresholds keep the freed memory for the next answer: blocks up to ``mmap_threshold`` come
from the heap, and at most ``trim_threshold`` bytes of free memory stay at the heap's top.

Only glibc is tuned (other C libraries keep their own ways), and an operator's own setting wins: with
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_`` or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES``
in the environment, nothing is changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "operator_tuned", "retain_freed_memory"]

TRIM_THRESHOLD = 16 * 1024 * 1024
"""Bytes of free memory at the heap's top kept for reuse (glibc ``M_TRIM_THRESHOLD``)."""
MMAP_THRESHOLD = 4 * 1024 * 1024
"""Blocks from this size on are mapped one by one, smaller ones come from the heap (``M_MMAP_THRESHOLD``)."""

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
_OPERATOR_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def operator_tuned(environ: Mapping[str, str]) -> bool:
    """True when ``environ`` sets glibc's malloc thresholds itself (module docstring)."""
    return any(name in environ for name in _OPERATOR_VARIABLES) or "glibc.malloc." in environ.get(
        "GLIBC_TUNABLES", ""
    )


def retain_freed_memory(trim_threshold: int = TRIM_THRESHOLD, mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Set glibc's malloc thresholds for this process (module docstring); True when they were set, False
    where the C library is not glibc or the environment tunes it already. Call it once, at start."""
    if not _glibc() or operator_tuned(os.environ):
        return False
    import ctypes  # here: only a process's start needs it

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # no such name on this system: not glibc
        return False
