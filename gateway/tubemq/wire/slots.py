"""Plain slots dataclasses built without running ``__init__``: :func:`slots_constructor`, compiled
(``_slots.c``) where the extensions are built, else the class itself, its reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from gateway.tubemq.wire.speedups import load_extension

__all__ = ["slots_constructor"]

#: gateway/tubemq/wire/_slots.c where the compiled loops are built and not switched off, else None
_compiled = load_extension("gateway.tubemq.wire._slots")

_T = TypeVar("_T")


def slots_constructor(cls: type[_T]) -> Callable[..., _T]:
    """``cls`` itself on the pure path, else a compiled maker of it: ``make(*values)`` with one positional
    value per field, in field order, stores them into the new object's slots without running ``__init__``
    (a plain slots dataclass's ``__init__`` does nothing else; the maker refuses any other class at once).
    Any other call (fewer values, keywords) goes to ``cls``, which fills the defaults or says what is
    wrong."""
    if _compiled is None:
        return cls
    names = tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]
    maker: Callable[..., Any] = _compiled.slots_maker(cls, names)
    return maker
