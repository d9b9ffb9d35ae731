"""Write openapi.yaml at the repository root from the FastAPI app (``python scripts/gen_openapi.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def render() -> str:
    from gateway.api.app import create_app

    schema = create_app().openapi()
    return yaml.safe_dump(schema, sort_keys=False, allow_unicode=True, width=110)


def main() -> int:
    (ROOT / "openapi.yaml").write_text(render(), encoding="utf-8")
    print("wrote openapi.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
