"""Every operation's real answers checked against the contract by schemathesis, over the ASGI app on its own
embedded cluster: documented status codes, bodies and headers that conform, no 5xx.

Bounded: a fixed number of generated requests per operation (derandomized, so a run is repeatable) and short
waits in the settings (a long poll never waits past ``poll_max_timeout``)."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode, checks

from gateway.api.app import create_app
from gateway.config import Settings
from tests.support.files import ROOT

EXAMPLES = 25
#: what the contract promises of every answer. Not ``positive_data_acceptance``: a schema-valid request can
#: still be refused 400 for rules the schema cannot state (a base64 value that does not decode, a partition
#: index past the topic's partitions...), and ``not_a_server_error`` already catches any crash.
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.unsupported_method,
    checks.allow_header_conformance,
    checks.missing_required_header,
    checks.negative_data_rejection,
]

#: the published contract (test_openapi.py checks that it is what the app serves)
CONTRACT = ROOT / "openapi.yaml"
schema = schemathesis.openapi.from_path(CONTRACT)
#: the contract's own examples, sent as they are (positive only: schemathesis would pair an example with an
#: unknown header as a "negative" case, and an HTTP server rightly ignores a header it does not know)
examples = schemathesis.openapi.from_path(CONTRACT)
examples.config.generation.update(modes=[GenerationMode.POSITIVE])


@pytest.fixture
def app() -> FastAPI:
    """A gateway whose runtime (and embedded cluster) runs in the app's lifespan: schemathesis starts it on
    the first request of an operation and ends it after that operation's test."""
    return create_app(
        Settings(
            embedded={"topics": "demo:2"},
            consumers={"poll_max_timeout": 0.2, "assignment_wait": 0.2, "sse_keepalive": 0.1},
            producer={"send_timeout": 2.0},
        )
    )


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_answers_conform_to_the_contract(case: schemathesis.Case, app: FastAPI) -> None:
    case.call_and_validate(base_url="http://testserver", app=app, checks=CHECKS)


@examples.parametrize()
@settings(deadline=None, derandomize=True, phases=[Phase.explicit], suppress_health_check=list(HealthCheck))
def test_the_contracts_examples_are_answered_as_documented(case: schemathesis.Case, app: FastAPI) -> None:
    case.call_and_validate(base_url="http://testserver", app=app, checks=CHECKS)
