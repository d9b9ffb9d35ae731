import logging
from dataclasses import FrozenInstanceError, dataclass

import pytest

from gateway.tubemq.events import Event, EventBus


@dataclass(frozen=True, slots=True)
class Opened(Event):
    address: str


@dataclass(frozen=True, slots=True)
class Closed(Event):
    address: str


def test_emit_in_subscription_order_and_unsubscribe() -> None:
    bus = EventBus()
    assert not bus.has_subscribers
    bus.emit(Opened("a"))  # nobody listens: nothing happens
    seen: list[tuple[str, object]] = []
    first = bus.subscribe(lambda e: seen.append(("first", e)))
    second = bus.subscribe(lambda e: seen.append(("second", e)))
    assert bus.has_subscribers and repr(bus) == "<EventBus subscribers=2>"
    bus.emit(Opened("a"))
    assert seen == [("first", Opened("a")), ("second", Opened("a"))]
    first()
    assert not first.active and "cancelled" in repr(first)
    first.cancel()  # idempotent
    bus.emit(Closed("a"))
    assert seen[-1] == ("second", Closed("a")) and len(seen) == 3
    with second:
        pass
    assert not bus.has_subscribers


def test_type_filter() -> None:
    bus = EventBus()
    closed: list[Closed] = []
    sub = bus.subscribe(closed.append, Closed)
    bus.emit(Opened("a"))
    bus.emit(Closed("b"))
    bus.emit("not an event")
    assert closed == [Closed("b")]
    assert "Closed" in repr(sub) and "active" in repr(sub)


def test_failing_subscriber_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    seen: list[object] = []

    def broken(event: object) -> None:
        raise RuntimeError("observer bug")

    bus.subscribe(broken)
    bus.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="gateway.tubemq.events"):
        bus.emit(Opened("x"))
    assert seen == [Opened("x")]
    assert "observer bug" in caplog.text and "Opened(address='x')" in caplog.text


def test_unsubscribe_during_emit_does_not_skip_others() -> None:
    bus = EventBus()
    seen: list[str] = []
    holder: dict[str, object] = {}

    def once(event: object) -> None:
        seen.append("once")
        sub = holder["sub"]
        assert callable(sub)
        sub()

    holder["sub"] = bus.subscribe(once)
    bus.subscribe(lambda e: seen.append("other"))
    bus.emit(Opened("a"))
    bus.emit(Opened("b"))
    assert seen == ["once", "other", "other"]


def test_events_are_frozen() -> None:
    event = Opened("a")
    with pytest.raises(FrozenInstanceError):
        event.address = "b"  # type: ignore[misc]
