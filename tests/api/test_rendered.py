"""The compiled poll JSON and SSE events of base64 values (gateway/api/_consumer_render.c) against their pure
reference (gateway/api/consumer_render.py's _render): the same bytes for generated steps, and odd messages
handed back (NotImplemented) so that the reference renders them or raises what it raises (issue #26)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api import consumer_render
from gateway.api.consumer_render import render_events, render_poll
from gateway.grpc.consumed_wire import encode_consumed, encode_consumed_py
from gateway.service.delivered import DeliveredMessage, DeliveredRun
from gateway.service.delivery import Delivery, runs_of
from gateway.tubemq.wire import speedups
from tests.support.grpc_wire_strategies import delivered_messages as messages
from tests.support.speedups_support import (
    ODD_MESSAGE_CHANGES,
    delivered_message,
    error_of,
    extension,
    foreign_slot_message,
)

Render = Callable[[Delivery, str], bytes]


def _rendered() -> ModuleType:
    extension()  # skips (or fails) alike where the extensions are not built
    import gateway.api._consumer_render as module

    return module


def _reference(render: Render, runs: list[Any]) -> bytes:
    with mock.patch.object(consumer_render, "_loops", consumer_render._Python()):
        return render(Delivery(runs), "base64")


def _same(runs: list[Any]) -> None:
    module = _rendered()
    for render, events in ((render_poll, False), (render_events, True)):
        expected = error_of(lambda render=render: _reference(render, runs))  # type: ignore[misc]
        answer = module.render_base64(runs, events, consumer_render._head, consumer_render._meta)
        if answer is NotImplemented:  # the caller runs the reference: same bytes, same error by construction
            assert error_of(lambda render=render: render(Delivery(runs), "base64")) == expected  # type: ignore[misc]
            continue
        assert expected is None, expected
        assert answer == _reference(render, runs)
        assert render(Delivery(runs), "base64") == answer  # the module takes the compiled path


def _as_runs(batch: list[DeliveredMessage]) -> list[DeliveredRun]:
    return runs_of(batch).runs


def _runs(batch: list[DeliveredMessage]) -> list[DeliveredMessage]:
    """Messages of one run of one partition (consecutive tokens, one attempt and deadline), as a poll hands
    them out."""
    first = batch[0]
    where = (first.topic, first.partition_key, first.broker_id, first.partition_id)
    return [
        DeliveredMessage(first.seq + i, *where, m.message, first.attempt, first.deadline, first.deadline_ms)
        for i, m in enumerate(batch)
    ]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages, max_size=8), st.booleans())
def test_the_poll_json_and_the_sse_events_are_the_same_bytes(
    batch: list[DeliveredMessage], runs: bool
) -> None:
    _same(_as_runs(_runs(batch) if runs and batch else batch))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages, min_size=1, max_size=10), st.lists(st.integers(0, 10), max_size=4), st.data())
def test_runs_cut_from_one_batch_are_their_messages(
    batch: list[DeliveredMessage], cuts: list[int], data: st.DataObject
) -> None:
    # runs as polls hand them out: parts of one batch's message list, from a start into it, tokens counted
    # from each run's first; rendered alike by both paths and as their messages one by one
    shared = [m.message for m in batch]
    first = batch[0]
    bounds = sorted({0, len(shared), *(c for c in cuts if c <= len(shared))})
    runs = []
    token = data.draw(st.integers(1, 2**40))
    for start, end in itertools.pairwise(bounds):
        where = data.draw(st.sampled_from(batch))
        runs.append(
            DeliveredRun(
                token,
                where.topic,
                where.partition_key,
                where.broker_id,
                where.partition_id,
                shared,
                start,
                end - start,
                where.attempt,
                first.deadline,
                where.deadline_ms,
            )
        )
        token += end - start + data.draw(st.integers(0, 3))
    _same(runs)
    one_by_one = runs_of(list(Delivery(runs)))
    for render in (render_poll, render_events):
        assert render(Delivery(runs), "base64") == render(one_by_one, "base64")
        assert render(Delivery(runs), "utf8") == render(one_by_one, "utf8")
    assert encode_consumed(Delivery(runs)) == encode_consumed_py(one_by_one)


def test_a_usual_step_takes_the_compiled_path() -> None:
    module = _rendered()
    runs = _as_runs([delivered_message(seq=n, offset=28 * n, key="k") for n in range(1, 4)])
    assert len(runs) == 1 and runs[0].count == 3
    for events in (False, True):
        answer = module.render_base64(runs, events, consumer_render._head, consumer_render._meta)
        assert answer is not NotImplemented
        assert answer == _reference(render_events if events else render_poll, runs)


def test_a_step_of_no_message() -> None:
    module = _rendered()
    assert module.render_base64([], False, consumer_render._head, consumer_render._meta) == (
        b'{"messages":[]}'
    )
    assert module.render_base64([], True, consumer_render._head, consumer_render._meta) == b""


@pytest.mark.parametrize(
    "changes",
    [
        *ODD_MESSAGE_CHANGES,
        {"message_id": -(2**63)},
        {"body": b"\xff"},
        {"body": b"\xfb\xff"},
        {"broker_id": True},
        {"deadline_ms": 1.5},
        {"attempt": True},
    ],
    ids=repr,
)
def test_odd_messages_render_as_the_reference_renders_them(changes: dict[str, Any]) -> None:
    _same(_as_runs([delivered_message(**changes), delivered_message()]))
    _same(_as_runs([delivered_message(), delivered_message(**changes)]))


def test_the_switch_keeps_the_pure_path(monkeypatch: pytest.MonkeyPatch) -> None:
    _rendered()
    assert isinstance(consumer_render._loops, consumer_render._Python) == (speedups.ACTIVE == speedups.PURE)
    monkeypatch.setattr(speedups, "_on", False)
    assert speedups.load_extension("gateway.api._consumer_render") is None


class _Relabelled(DeliveredRun):
    """A run class that reads an attribute its own way: the compiled paths must ask it, not its slot."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        return "relabelled" if name == "topic" else value


def test_a_class_that_reads_its_attributes_its_own_way_is_asked() -> None:
    plain = delivered_message()
    odd = _Relabelled(1, "t", "1:t:0", 1, 0, [plain.message], 0, 1, 1, 0.0, 0)
    _same([odd, *_as_runs([plain]), odd])
    assert b'"topic":"relabelled"' in render_poll(Delivery([odd]), "base64")
    assert encode_consumed(Delivery([odd])) == encode_consumed_py(Delivery([odd]))
    assert b"relabelled" in encode_consumed(Delivery([odd]))


def test_another_classs_slot_is_read_as_python_reads_it() -> None:
    odd: Any = foreign_slot_message()
    _same([odd])  # the reference raises TypeError: the compiled path must hand it back, not read a_secret
    _same([*_as_runs([delivered_message()]), odd])
