"""openapi.yaml at the repository root is the published contract: it must match the app."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import yaml
from openapi_spec_validator import OpenAPIV31SpecValidator

from gateway.api.app import create_app
from gateway.config import CORS_EXPOSED_HEADERS, CORS_REQUEST_HEADERS, Settings
from tests.support.files import ROOT


def test_openapi_yaml_matches_the_app() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    generated = create_app().openapi()
    assert committed == generated, "openapi.yaml is stale: run `python scripts/gen_openapi.py` and commit it"


def _assert_valid_openapi_3_1(spec: dict[str, Any], source: str) -> None:
    assert spec["openapi"].startswith("3.1."), f"{source}: openapi {spec['openapi']}"
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in OpenAPIV31SpecValidator(spec).iter_errors()]
    assert not errors, f"{source} is not valid OpenAPI 3.1:\n" + "\n".join(errors)


def test_committed_openapi_yaml_is_valid_openapi_3_1() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    _assert_valid_openapi_3_1(committed, "openapi.yaml")


async def test_served_openapi_json_is_valid_openapi_3_1() -> None:
    transport = httpx.ASGITransport(app=create_app(Settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.get("/openapi.json")
    assert answer.status_code == 200
    _assert_valid_openapi_3_1(answer.json(), "/openapi.json")


def test_the_validator_rejects_a_media_type_description() -> None:
    # The mistake this file once had: a Media Type Object has no `description`. Proves the check can fail.
    spec = copy.deepcopy(create_app().openapi())
    body = spec["paths"]["/v1/topics/{topic}/messages"]["post"]["requestBody"]
    body["content"]["application/octet-stream"]["description"] = "one raw message"
    assert list(OpenAPIV31SpecValidator(spec).iter_errors())


def test_publish_contract_documents_both_content_types_and_errors() -> None:
    spec = create_app().openapi()
    op = spec["paths"]["/v1/topics/{topic}/messages"]["post"]
    assert set(op["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert {"200", "207", "400", "413", "503"} <= set(op["responses"])
    assert "PublishRequest" in spec["components"]["schemas"]


def test_contract_lists_only_statuses_the_app_answers() -> None:
    # Validation errors are answered 400 with ErrorResponse, never FastAPI's default 422; the one 422 the app
    # answers is a publish whose Idempotency-Key was used for another request.
    spec = create_app().openapi()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if (method, path) == ("post", "/v1/topics/{topic}/messages"):
                content = operation["responses"]["422"]["content"]["application/json"]["schema"]
                assert content == {"$ref": "#/components/schemas/ErrorResponse"}
                continue
            assert "422" not in operation["responses"], f"{method.upper()} {path} documents a 422"
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert "ErrorResponse" in spec["components"]["schemas"]


def _resolve(spec: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = spec
        for part in item["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        item = node
    return item


def _documented_headers(spec: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(request header parameters, answer headers) named anywhere in the document, lower case."""
    read: set[str] = set()
    sent: set[str] = set()
    for scheme in spec["components"]["securitySchemes"].values():
        read.add("authorization" if scheme["type"] == "http" else scheme["name"].lower())
    answers = list(spec["components"]["responses"].values())
    for item in spec["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                parameter = _resolve(spec, parameter)
                if parameter["in"] == "header":
                    read.add(parameter["name"].lower())
            answers += operation["responses"].values()
    for answer in answers:
        sent |= {name.lower() for name in answer.get("headers", {})}
    return read, sent


def test_every_header_the_api_reads_or_sends_is_documented() -> None:
    # The headers a browser may send and read cross-origin are the API's own: each must be in the contract.
    read, sent = _documented_headers(create_app().openapi())
    assert {h.lower() for h in CORS_REQUEST_HEADERS} - {"content-type"} <= read
    assert {h.lower() for h in CORS_EXPOSED_HEADERS} | {"allow"} <= sent


def test_headers_are_documented_on_the_answers_that_carry_them() -> None:
    spec = create_app().openapi()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            parameters = [_resolve(spec, p) for p in operation["parameters"]]
            names = {p["name"] for p in parameters if p["in"] == "header"}
            assert "X-Request-ID" in names, where
            for status, answer in operation["responses"].items():
                headers = answer.get("headers", {})
                assert "X-Request-ID" in headers, f"{where} {status}"
                if status in ("429", "503") and operation["operationId"] != "readiness":
                    assert "Retry-After" in headers, f"{where} {status}"
                if status == "401":
                    assert "WWW-Authenticate" in headers, f"{where} {status}"
    publish = spec["paths"]["/v1/topics/{topic}/messages"]["post"]
    raw = {p["name"] for p in publish["parameters"] if "name" in p}
    assert {"X-TubeMQ-Key", "X-TubeMQ-Partition", "X-TubeMQ-Attributes", "X-TubeMQ-Stream-Id"} <= raw
    assert "Location" in spec["paths"]["/v1/consumers/{group}"]["post"]["responses"]["201"]["headers"]
    assert "Allow" in spec["components"]["responses"]["MethodNotAllowed"]["headers"]
