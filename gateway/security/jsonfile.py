"""Reading the JSON files the auth settings name (keys, rules), with errors that name the setting."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_json"]


def read_json(path: Path, setting: str) -> object:
    """The parsed file; raises ValueError naming ``setting`` and the file (never echoing its content)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {setting} {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{setting} {path} is not JSON: {exc}") from None
