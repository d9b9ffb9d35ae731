"""The publish answer's templated 200 body is byte for byte what JSONResponse renders from the dicts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from gateway.api import publish_render
from gateway.api.publish_render import _json_str, _result, render_stored, render_stored_py
from gateway.service.errors import Unavailable
from gateway.service.publish import PublishOutcome
from gateway.tubemq.producer.send import SendResult
from gateway.tubemq.wire.speedups import load_extension

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.api._publish_render")

_INTS = st.integers(-(2**63), 2**63 - 1)
_RESULTS = st.builds(SendResult, st.text(), _INTS, st.text(), _INTS, _INTS, _INTS, _INTS, _INTS)


@given(st.text(), st.lists(_RESULTS, max_size=8))
def test_template_matches_json_response(topic: str, results: list[SendResult]) -> None:
    outcomes = [PublishOutcome(i, result) for i, result in enumerate(results)]
    expected = JSONResponse({"topic": topic, "results": [_result(o) for o in outcomes]}).body
    assert render_stored(topic, outcomes) == expected


def test_a_failed_message_leaves_it_to_the_dicts() -> None:
    ok = PublishOutcome(0, SendResult("t", 1, "1:t:1", 1, 7, 8, 9, 0))
    failed = PublishOutcome(1, error=Unavailable("later", retry_after=1.0))
    assert render_stored("t", [ok, failed]) is None


# --- the compiled writer (gateway/api/_publish_render.c) against the reference -------------------------

_ODD_INTS = _INTS | st.sampled_from([2**63, -(2**63) - 1, 2**70, True])
_ANY_RESULTS = st.builds(
    SendResult, st.text(), _ODD_INTS, st.text(), _ODD_INTS, _ODD_INTS, _ODD_INTS, _ODD_INTS, _ODD_INTS
)
_PLAIN_KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'))
_REGULAR = st.builds(SendResult, st.just("t"), _INTS, _PLAIN_KEYS, _INTS, _INTS, _INTS, _INTS, _INTS)

_compiled = load_extension("gateway.api._publish_render")
compiled = pytest.mark.skipif(
    _compiled is None, reason="the C extension is not built or is switched off (the pure path)"
)


@compiled
@given(st.text(), st.lists(_ANY_RESULTS | st.none(), max_size=6))
def test_the_compiled_answer_is_the_reference_or_handed_back(
    topic: str, results: list[SendResult | None]
) -> None:
    outcomes = [
        PublishOutcome(i, result) if result is not None else PublishOutcome(i, error=Unavailable("x"))
        for i, result in enumerate(results)
    ]
    assert _compiled is not None
    try:
        topic_json = _json_str(topic).encode()
    except UnicodeEncodeError:
        return
    got = _compiled.render_stored(topic_json, outcomes)
    if got is not None:
        assert got == render_stored_py(topic, outcomes)
    assert render_stored(topic, outcomes) == render_stored_py(topic, outcomes)


@compiled
@given(st.sampled_from(["demo", "t_1", "é"]), st.lists(_REGULAR, min_size=1, max_size=6))
def test_every_regular_answer_is_written_in_c(topic: str, results: list[SendResult]) -> None:
    outcomes = [PublishOutcome(i, result) for i, result in enumerate(results)]
    assert _compiled is not None
    got = _compiled.render_stored(_json_str(topic).encode(), outcomes)
    assert got is not None and got == render_stored_py(topic, outcomes)


def test_the_writer_is_chosen_once() -> None:
    assert isinstance(publish_render._loops, publish_render._Python) == (_compiled is None)
