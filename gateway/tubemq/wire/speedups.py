"""Which per-message loops run compiled: the C extensions beside the modules they speed up, when they were
built and not switched off, else the pure-Python references.

Each compiled module sits beside the Python module whose loop it runs, named after it with a leading
underscore (``consumer/batch.py`` and ``consumer/_batch.c``, built as ``gateway.tubemq.consumer._batch``).
That module writes the compiled module's functions as a ``typing.Protocol``, which the compiled module's
stub (``_batch.pyi``, checked by mypy under ``TYPE_CHECKING``) and a pure-Python twin beside the Protocol
both satisfy, and chooses between them once, at import, with :func:`compiled_or`; every call then goes
through what it chose. :data:`EXTENSIONS` names them all (setup.py builds each from the ``.c`` file of the
same path).

The extensions are built by ``pip install`` where a C compiler and Python's headers are (setup.py marks them
optional, so a machine without them installs the pure path). ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` (any value
but empty and ``0``) keeps the pure path even where they are built, like aiokafka's
``AIOKAFKA_NO_EXTENSIONS``; it is read once, at import. :data:`ACTIVE` (``compiled`` or ``pure``) and
:data:`REASON` say which path runs and why: the gateway logs them at start and exports them as a metric
label.

The pure functions stay the reference: every compiled function gives the same results and the same errors
(tests/tubemq/test_speedups.py and the tests beside it hold them together on generated and malformed input).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final, TypeVar, cast

__all__ = [
    "ACTIVE",
    "COMPILED",
    "ENV_SWITCH",
    "EXTENSIONS",
    "PURE",
    "REASON",
    "compiled_or",
    "load_extension",
]

ENV_SWITCH: Final = "TUBEMQ_GATEWAY_NO_EXTENSIONS"
COMPILED: Final = "compiled"
PURE: Final = "pure"

#: every compiled module of the package, by the module it speeds up; the wire's own ones (the first four)
#: are loaded here, at import, to decide :data:`ACTIVE`
EXTENSIONS: Final = (
    "gateway.tubemq.wire._slots",
    "gateway.tubemq.wire._frame_decoder",
    "gateway.tubemq.wire._rpc",
    "gateway.tubemq.wire._send_answers",
    "gateway.tubemq.producer._send_request",
    "gateway.tubemq.consumer._batch",
    "gateway.grpc._consumed_wire",
    "gateway.grpc._publish_wire",
    "gateway.api._consumer_render",
    "gateway.api._publish_parse",
    "gateway.api._publish_render",
)
#: the ones in this package: importing them imports no other module of the gateway
_WIRE: Final = tuple(name for name in EXTENSIONS if name.startswith(f"{__package__}._"))


def _decide() -> tuple[bool, str]:
    if os.environ.get(ENV_SWITCH, "") not in ("", "0"):
        return False, f"{ENV_SWITCH} is set"
    for name in _WIRE:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return False, f"the C extensions are not built ({exc}); reinstall where a C compiler is for them"
    return True, "the C extensions are built and loaded"


_on, REASON = _decide()
ACTIVE: Final = COMPILED if _on else PURE


def load_extension(name: str) -> ModuleType | None:
    """The compiled module ``name`` (one of :data:`EXTENSIONS`) where the compiled path runs (same build,
    same switch), else None: its caller keeps the pure path."""
    if name not in EXTENSIONS:
        raise ValueError(f"{name} is not one of the compiled modules (speedups.EXTENSIONS)")
    if not _on:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_Twin = TypeVar("_Twin")


def compiled_or(name: str, pure: _Twin) -> _Twin:
    """The compiled module ``name`` where the compiled path runs, else ``pure``, its twin in Python: what a
    module calls its loops through, chosen once, at its import. The caller annotates the result with its
    Protocol, which ``pure`` satisfies and the compiled module's stub is checked against."""
    module = load_extension(name)
    return pure if module is None else cast(_Twin, module)
