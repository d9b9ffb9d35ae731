"""The project's generator scripts (scripts/gen_*.py) loaded as modules, for the tests of their output."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.files import ROOT

SCRIPTS = ROOT / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/``name``.py as a module (registered under ``name``: dataclasses look their module up while the
    file runs)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
