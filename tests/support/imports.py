"""The imports of the gateway's modules, read from their source with :mod:`ast` (nothing is imported): what
the layering and import-cycle tests walk."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.support.files import ROOT

GATEWAY = ROOT / "gateway"


@dataclass(frozen=True, slots=True)
class Import:
    path: Path
    line: int
    target: str  # absolute dotted name; a submodule when `from pkg import submodule` names one
    name: str = ""  # the name taken from ``target`` by ``from target import name`` (not a submodule)

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_local_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def resolve_from(node: ast.ImportFrom, path: Path) -> str:
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, source: str | None = None) -> list[Import]:
    """Every import in ``path`` (or in ``source``, read as if it lived at ``path``)."""
    text = path.read_text(encoding="utf-8") if source is None else source
    found: list[Import] = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = resolve_from(node, path)
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                if is_local_module(candidate):
                    found.append(Import(path, node.lineno, candidate))
                else:
                    found.append(Import(path, node.lineno, module, alias.name))
    return found


@cache
def modules(package: str) -> tuple[Path, ...]:
    return tuple(
        path
        for path in sorted((GATEWAY / package).rglob("*.py"))
        if "pb" not in path.relative_to(GATEWAY).parts[:-1]
    )
