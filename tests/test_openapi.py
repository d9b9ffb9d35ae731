"""openapi.yaml at the repository root is the published contract: it must match the app."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.api.app import create_app

ROOT = Path(__file__).resolve().parent.parent


def test_openapi_yaml_matches_the_app() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    generated = create_app().openapi()
    assert committed == generated, "openapi.yaml is stale: run `python scripts/gen_openapi.py` and commit it"


def test_publish_contract_documents_both_content_types_and_errors() -> None:
    spec = create_app().openapi()
    op = spec["paths"]["/v1/topics/{topic}/messages"]["post"]
    assert set(op["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert {"200", "207", "400", "413", "503"} <= set(op["responses"])
    assert "PublishRequest" in spec["components"]["schemas"]


def test_contract_lists_only_statuses_the_app_answers() -> None:
    # Validation errors are answered 400 with ErrorResponse, never FastAPI's default 422.
    spec = create_app().openapi()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert "422" not in operation["responses"], f"{method.upper()} {path} documents a 422"
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert "ErrorResponse" in spec["components"]["schemas"]
