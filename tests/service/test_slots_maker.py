"""The compiled maker of plain slots dataclasses (gateway/tubemq/wire/_slots.c ``slots_maker``, used for
every DeliveredMessage a consumer instance hands out): the same objects as the class builds, the class's
own behaviour for any other call, and a refusal of any class it cannot build (issue #26)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.service.delivered import DeliveredMessage, new_delivered
from gateway.tubemq.consumer.batch import ConsumedMessage
from gateway.tubemq.wire import slots
from tests.support.speedups_support import ForeignSlot, error_of, extension

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.tubemq.wire._slots")

NAMES = tuple(f.name for f in fields(DeliveredMessage))
values = st.tuples(
    st.integers(),
    st.text(max_size=5),
    st.text(max_size=5) | st.none(),
    st.integers(),
    st.integers() | st.floats(),
    st.builds(
        ConsumedMessage,
        st.integers(),
        st.binary(max_size=8),
        st.just({}),
        st.none(),
        st.none(),
        st.just(0),
        st.just(0),
    ),
    st.integers(0, 5),
    st.floats(allow_nan=False),
    st.integers(),
)


def _maker() -> Any:
    return extension("gateway.tubemq.wire._slots").slots_maker(DeliveredMessage, NAMES)


@given(values)
def test_a_made_object_is_what_the_class_builds(given_values: tuple[Any, ...]) -> None:
    made = _maker()(*given_values)
    built = DeliveredMessage(*given_values)
    assert type(made) is DeliveredMessage
    assert made == built
    for name, value in zip(NAMES, given_values, strict=True):
        assert getattr(made, name) is value


def test_the_instance_layer_takes_the_maker_where_the_extension_is_loaded() -> None:
    extension("gateway.tubemq.wire._slots")
    if isinstance(slots._loops, slots._Python):
        assert new_delivered is DeliveredMessage
    else:
        assert new_delivered is not DeliveredMessage
        assert type(new_delivered).__name__ == "Maker"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1, "t", "k", 1, 0, None), {}),  # the defaults, filled by the class
        ((1, "t", "k", 1, 0, None), {"attempt": 3}),
        ((), {name: 0 for name in NAMES}),
        ((1, "t", "k", 1, 0, None, 1, 0.0, 0, "one too many"), {}),
        ((1,), {}),
        ((1, "t", "k", 1, 0, None, 1, 0.0, 0), {"seq": 2}),
    ],
    ids=repr,
)
def test_any_other_call_is_the_classs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    maker = _maker()
    expected = error_of(lambda: DeliveredMessage(*args, **kwargs))
    assert error_of(lambda: maker(*args, **kwargs)) == expected
    if expected is None:
        assert maker(*args, **kwargs) == DeliveredMessage(*args, **kwargs)


@dataclass
class _WithDict:
    a: int


@dataclass(slots=True)
class _Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a")


@dataclass(slots=True, frozen=True)
class _Frozen:
    a: int


class _NotSlots:
    a = 1


@pytest.mark.parametrize(
    ("cls", "names"),
    [
        (_WithDict, ("a",)),
        (_Checked, ("a",)),
        (_NotSlots, ("a",)),
        (DeliveredMessage, ("seq", "nope")),
        (ForeignSlot, ("a_secret", "topic")),  # topic: another class's slot, not one of ForeignSlot's own
        (DeliveredMessage, ("seq", "seq")),  # one slot twice: the first value stored would never be released
        (int, ()),
    ],
    ids=repr,
)
def test_a_class_it_cannot_build_is_refused(cls: type, names: tuple[str, ...]) -> None:
    with pytest.raises(TypeError):
        extension("gateway.tubemq.wire._slots").slots_maker(cls, names)


def test_a_frozen_class_is_built_as_its_init_builds_it() -> None:
    # frozen slots dataclasses store through object.__setattr__: their slots are plain writable members
    maker = extension("gateway.tubemq.wire._slots").slots_maker(_Frozen, ("a",))
    assert maker(5) == _Frozen(5)


def test_the_pure_path_uses_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "_loops", slots._Python())
    assert slots.slots_constructor(DeliveredMessage) is DeliveredMessage
