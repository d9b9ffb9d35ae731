"""The contract is one that code generators take as it is (issue #24): named schemas for every enum, map and
union, no `default` that makes a generator type a field as required, `servers`, ids as strings, and an
example on every operation that is valid against the schema it illustrates. ``test_client_models.py`` runs
a real generator on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gateway.api.app import create_app
from gateway.api.openapi_examples import OPERATION_EXAMPLES

SPEC = create_app().openapi()
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]
OPERATIONS = [
    (f"{method.upper()} {path}", operation)
    for path, item in SPEC["paths"].items()
    for method, operation in item.items()
]


def _walk(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema-like dict below ``node`` with where it is."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{where}/{i}")


def _inline_types(document: dict[str, Any]) -> list[str]:
    """Enums, objects and unions that are not a named schema of their own (the named schemas themselves
    are allowed one at their top)."""
    found = []
    roots = {f"#/components/schemas/{name}" for name in document["components"]["schemas"]}
    for where, node in _walk({"paths": document["paths"], "components": document["components"]}, "#"):
        if "example" in where.split("/") or where.endswith("/examples"):
            continue
        if where in roots:
            continue
        if "enum" in node:
            found.append(f"{where}: inline enum {node['enum']}")
        if node.get("type") == "object" and ("properties" in node or node.get("additionalProperties")):
            found.append(f"{where}: inline object")
        for union in ("anyOf", "oneOf"):
            members = [m for m in node.get(union, []) if m != {"type": "null"}]
            if len(members) > 1 or any(m.get("type") == "object" for m in members):
                found.append(f"{where}: inline {union} {members}")
    return found


def test_every_enum_map_and_union_is_a_named_schema() -> None:
    assert _inline_types(SPEC) == []
    assert {
        "Encoding",
        "StartPosition",
        "Attributes",
        "StreamFilters",
        "StartOffsets",
        "MessageValue",
    } <= set(SCHEMAS)


def test_the_inline_type_check_finds_an_inline_enum() -> None:
    spec: dict[str, Any] = {
        "paths": {},
        "components": {"schemas": {"A": {"type": "object", "properties": {}}}},
    }
    spec["components"]["schemas"]["A"]["properties"]["e"] = {"type": "string", "enum": ["x", "y"]}
    spec["components"]["schemas"]["A"]["properties"]["u"] = {"anyOf": [{"type": "object"}, {"type": "null"}]}
    assert len(_inline_types(spec)) == 2


def test_no_property_has_a_default_that_generators_read_as_required() -> None:
    with_default = [
        f"{name}.{prop}"
        for name, schema in SCHEMAS.items()
        for prop, value in schema.get("properties", {}).items()
        if "default" in value or "title" in value
    ]
    assert with_default == []
    # the default is still said, in words
    encoding = SCHEMAS["MessageIn"]["properties"]["encoding"]
    assert encoding["description"].endswith('(default "utf8")')
    assert "encoding" not in SCHEMAS["MessageIn"]["required"]


def test_servers_name_the_local_gateway_and_any_other() -> None:
    urls = [server["url"] for server in SPEC["servers"]]
    assert urls == ["/", "http://localhost:8080", "{scheme}://{host}"]


def test_every_message_id_is_a_decimal_string() -> None:
    ids = [
        (name, schema["properties"]["messageId"])
        for name, schema in SCHEMAS.items()
        if "messageId" in schema.get("properties", {})
    ]
    assert {name for name, _ in ids} == {"PublishResult", "ConsumedMessageOut", "RangeMessage"}
    for name, prop in ids:
        types = [prop.get("type")] + [member.get("type") for member in prop.get("anyOf", [])]
        assert "integer" not in types and "string" in types, name


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({**schema, "components": SPEC["components"]})


@pytest.mark.parametrize(("where", "operation"), OPERATIONS, ids=[w for w, _ in OPERATIONS])
def test_every_operation_has_valid_examples(where: str, operation: dict[str, Any]) -> None:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        assert "example" in body, f"{where}: no request example"
        errors = [e.message for e in _validator(body["schema"]).iter_errors(body["example"])]
        assert errors == [], f"{where} request example: {errors}"
    illustrated = 0
    for status, answer in operation["responses"].items():
        for media_type, content in answer.get("content", {}).items():
            if "example" not in content:
                continue
            illustrated += 1
            if media_type == "application/json":
                errors = [e.message for e in _validator(content["schema"]).iter_errors(content["example"])]
                assert errors == [], f"{where} {status} example: {errors}"
    assert illustrated >= 1, f"{where}: no answer has an example"
    assert operation["operationId"] in OPERATION_EXAMPLES


def test_the_example_check_finds_an_invalid_example() -> None:
    schema = {"$ref": "#/components/schemas/PublishResult"}
    assert list(_validator(schema).iter_errors({"index": 0, "status": 200, "messageId": 3002347702949249024}))
