"""Plain slots dataclasses built without running ``__init__``: :func:`slots_constructor`, compiled
(``_slots.c``) where the extensions are built, else the class itself, its reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gateway.tubemq.wire.speedups import compiled_or

__all__ = ["SlotsLoops", "slots_constructor"]

_T = TypeVar("_T")


class SlotsLoops(Protocol):
    """What gateway/tubemq/wire/_slots.c holds, and its twin :class:`_Python`."""

    def slots_maker(self, cls: type, field_names: tuple[str, ...], /) -> Callable[..., Any]: ...


class _Python:
    """The reference: a class builds its objects through its own ``__init__``."""

    @staticmethod
    def slots_maker(cls: type, field_names: tuple[str, ...], /) -> Callable[..., Any]:
        return cls


if TYPE_CHECKING:
    import gateway.tubemq.wire._slots as _slots

    _stub: SlotsLoops = _slots

_loops: SlotsLoops = compiled_or("gateway.tubemq.wire._slots", _Python())


def slots_constructor(cls: type[_T]) -> Callable[..., _T]:
    """``cls`` itself on the pure path, else a compiled maker of it: ``make(*values)`` with one positional
    value per field, in field order, stores them into the new object's slots without running ``__init__``
    (a plain slots dataclass's ``__init__`` does nothing else; the maker refuses any other class at once).
    Any other call (fewer values, keywords) goes to ``cls``, which fills the defaults or says what is
    wrong."""
    names = tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]
    maker: Callable[..., _T] = _loops.slots_maker(cls, names)
    return maker
