"""The publish route's templated 200 body is byte for byte what JSONResponse renders from the dicts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from gateway.api.routes_topics import _result, render_all_stored
from gateway.service.errors import Unavailable
from gateway.service.publish import PublishOutcome
from gateway.tubemq.producer.send import SendResult

_INTS = st.integers(-(2**63), 2**63 - 1)
_RESULTS = st.builds(SendResult, st.text(), _INTS, st.text(), _INTS, _INTS, _INTS, _INTS, _INTS)


@given(st.text(), st.lists(_RESULTS, max_size=8))
def test_template_matches_json_response(topic: str, results: list[SendResult]) -> None:
    outcomes = [PublishOutcome(i, result) for i, result in enumerate(results)]
    expected = JSONResponse({"topic": topic, "results": [_result(o) for o in outcomes]}).body
    assert render_all_stored(topic, outcomes) == expected


def test_a_failed_message_leaves_it_to_the_dicts() -> None:
    ok = PublishOutcome(0, SendResult("t", 1, "1:t:1", 1, 7, 8, 9, 0))
    failed = PublishOutcome(1, error=Unavailable("later", retry_after=1.0))
    assert render_all_stored("t", [ok, failed]) is None
