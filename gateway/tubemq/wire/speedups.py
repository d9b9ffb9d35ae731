"""Which per-message loops run compiled: the C extension ``_speedups`` when it was built and not switched
off, else the pure-Python references.

The extension is built by ``pip install`` where a C compiler and Python's headers are (setup.py marks it
optional, so a machine without them installs the pure path). ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` (any value
but empty and ``0``) keeps the pure path even where the extension is built, like aiokafka's
``AIOKAFKA_NO_EXTENSIONS``; it is read once, at import. :data:`ACTIVE` (``compiled`` or ``pure``) and
:data:`REASON` say which path runs and why: the gateway logs them at start and exports them as a metric label.

The pure functions stay the reference: every compiled function gives the same results and the same errors
(tests/test_speedups.py holds them together on generated and malformed input).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar

__all__ = [
    "ACTIVE",
    "COMPILED",
    "ENV_SWITCH",
    "PURE",
    "REASON",
    "compiled",
    "load_extension",
    "slots_constructor",
]

ENV_SWITCH: Final = "TUBEMQ_GATEWAY_NO_EXTENSIONS"
COMPILED: Final = "compiled"
PURE: Final = "pure"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV_SWITCH, "") not in ("", "0"):
        return None, f"{ENV_SWITCH} is set"
    try:
        import gateway.tubemq.wire._speedups as module
    except ImportError as exc:
        return None, f"the C extension is not built ({exc}); reinstall where a C compiler is for it"
    return module, "the C extension is built and loaded"


#: the extension module, or None on the pure path
compiled, REASON = _load()
ACTIVE: Final = PURE if compiled is None else COMPILED


def load_extension(name: str) -> ModuleType | None:
    """Another compiled module of the package (``gateway.grpc._consumed``) where the core's is loaded (same
    build, same switch), else None: its caller keeps the pure path."""
    if compiled is None:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_T = TypeVar("_T")


def slots_constructor(cls: type[_T]) -> Callable[..., _T]:
    """``cls`` itself on the pure path, else a compiled maker of it: ``make(*values)`` with one positional
    value per field, in field order, stores them into the new object's slots without running ``__init__``
    (a plain slots dataclass's ``__init__`` does nothing else; the maker refuses any other class at once).
    Any other call (fewer values, keywords) goes to ``cls``, which fills the defaults or says what is
    wrong."""
    if compiled is None:
        return cls
    names = tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]
    maker: Callable[..., Any] = compiled.slots_maker(cls, names)
    return maker
