"""Write the generated parts of docs/architecture.md from the tree under gateway/.

Run ``python scripts/gen_architecture_doc.py`` after adding, moving or renaming a module or a C file, or
changing the first sentence of a module's docstring.

Each module's docstring is the one source of what it does. From the source files (parsed, nothing
imported) this renders, between the markers of docs/architecture.md: the package table, one table per
package with every module and the first sentence of its docstring (the package's own ``__init__``
docstring above it); and the table of compiled loops, every C file with the first sentence of its leading
comment and the Python modules that choose between it and their pure twins (those that load it by name
through ``compiled_or``, the one loader, gateway/tubemq/wire/speedups.py's).
tests/docs/test_architecture_doc.py checks that the committed page is what this prints. Nothing in the gateway
imports this script.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = ROOT / "gateway"
PAGE = ROOT / "docs" / "architecture.md"
GENERATOR = "scripts/gen_architecture_doc.py"

#: the packages in the order of the layers, bottom up; a package not named here follows, by name
ORDER = (
    "tubemq",
    "tubemq/errors",
    "tubemq/wire",
    "tubemq/net",
    "tubemq/producer",
    "tubemq/consumer",
    "tubemq/ranges",
    "embedded",
    "service",
    "security",
    "observability",
    "api",
    "grpc",
    "spark",
    "workers",
    "runtime",
    "config",
    "",
)
#: the calls that load a compiled module by its dotted name
LOADERS = {"compiled_or"}
#: abbreviations a sentence does not end at
ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf")


def block(name: str) -> tuple[str, str]:
    """The markers around the generated part ``name`` of the page."""
    return (
        f"<!-- BEGIN GENERATED {name} by {GENERATOR} from gateway/: do not edit by hand -->",
        f"<!-- END GENERATED {name} -->",
    )


# --- reading the tree --------------------------------------------------------------------------------------


def generated(path: Path) -> bool:
    """Protobuf modules made by protoc (``pb/``): they describe nothing of their own."""
    return "pb" in path.relative_to(GATEWAY).parts


def python_files() -> Iterator[Path]:
    for path in sorted(GATEWAY.rglob("*.py")):
        if not generated(path):
            yield path


def dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_sentence(text: str) -> str:
    """The first sentence of the first paragraph of ``text``, on one line: it ends at a full stop followed
    by a space (or the paragraph's end) outside double-backquoted code and not after an abbreviation, and at
    the paragraph's end when it has no such stop."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    in_code = False
    i = 0
    while i < len(paragraph):
        if paragraph.startswith("``", i):
            in_code = not in_code
            i += 2
            continue
        if paragraph[i] == "." and not in_code and (i + 1 == len(paragraph) or paragraph[i + 1] == " "):
            words = paragraph[:i].split()
            last = words[-1].lower() if words else ""
            if not last.endswith(ABBREVIATIONS):
                return paragraph[: i + 1]
        i += 1
    return paragraph


def docstring(path: Path) -> str:
    text = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    if not text:
        raise SystemExit(f"{path.relative_to(ROOT)} has no docstring: say in one sentence what it does")
    return first_sentence(text)


def c_comment(path: Path) -> str:
    """The first sentence of a C file's leading ``/* ... */`` comment."""
    match = re.match(r"\s*/\*(.*?)\*/", path.read_text(encoding="utf-8"), re.DOTALL)
    if match is None:
        raise SystemExit(f"{path.relative_to(ROOT)} opens with no comment: say in one sentence what it holds")
    lines = [re.sub(r"^\s*\* ?", "", line) for line in match.group(1).splitlines()]
    return first_sentence("\n".join(lines))


def packages() -> dict[str, list[Path]]:
    """The Python modules of each package, by its path under gateway/ ("" for the top level)."""
    found: dict[str, list[Path]] = {}
    for path in python_files():
        package = path.parent.relative_to(GATEWAY).as_posix()
        found.setdefault("" if package == "." else package, []).append(path)
    known = [p for p in ORDER if p in found]
    return {p: found[p] for p in known + sorted(set(found) - set(known))}


def extensions_used(path: Path) -> set[str]:
    """The compiled modules ``path`` chooses between its C and its pure loops (dotted names)."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LOADERS:
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                used.add(argument.value)
    return used


# --- rendering ---------------------------------------------------------------------------------------------


def cell(text: str) -> str:
    """Docstring text as a table cell: reST's double backquotes as Markdown code, roles dropped, an issue
    reference in parentheses left out (the page explains the code, not its history), and the characters a
    table or Markdown would read escaped outside code."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    text = re.sub(r" \((?:issue )?#\d+\)", "", text)
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"([*_<>|\[\]])", r"\\\1", p) for p in parts)


def render_packages() -> str:
    tree = packages()
    count = sum(len(modules) for modules in tree.values())
    begin, end = block("packages")
    out = [
        begin,
        "",
        f"{count} modules in {len(tree)} packages (generated protobuf modules, `pb/`, left out).",
        "",
    ]
    for package, modules in tree.items():
        title = f"`gateway/{package}/`" if package else "`gateway/` (top level)"
        out += [f"### {title}", ""]
        face = GATEWAY / package / "__init__.py"
        if face in modules:
            out += [cell(docstring(face)), ""]
        if (GATEWAY / package / "pb").is_dir():
            out += ["`pb/`: generated protobuf modules (`scripts/gen_protos.py`).", ""]
        out += ["| module | what it does |", "| --- | --- |"]
        for path in modules:
            if path.name != "__init__.py":
                out.append(f"| `{path.stem}` | {cell(docstring(path))} |")
        out.append("")
    out.append(end)
    return "\n".join(out) + "\n"


def render_compiled() -> str:
    users: dict[str, list[str]] = {}
    for path in python_files():
        for extension in extensions_used(path):
            users.setdefault(extension, []).append(dotted(path))
    begin, end = block("compiled")
    out = [begin, "", "| C file | what it holds | chosen in |", "| --- | --- | --- |"]
    for source in sorted(GATEWAY.rglob("*.c")):
        name = dotted(source)
        chosen = users.get(name)
        if not chosen:
            raise SystemExit(
                f"{source.relative_to(ROOT)} is loaded by no module ({name}): load it through "
                "gateway.tubemq.wire.compiled_or, or remove it"
            )
        where = ", ".join(f"`{m}`" for m in sorted(chosen))
        out.append(f"| `{source.relative_to(ROOT).as_posix()}` | {cell(c_comment(source))} | {where} |")
    shared = sorted(p.relative_to(ROOT).as_posix() for p in GATEWAY.rglob("*.h"))
    if shared:
        out += ["", "Shared by them (included): " + ", ".join(f"`{h}`" for h in shared) + "."]
    out += ["", end]
    return "\n".join(out) + "\n"


RENDERERS = {"packages": render_packages, "compiled": render_compiled}


def page_with(page: str) -> str:
    """``page`` with each generated part replaced by what the tree says now."""
    for name, render in RENDERERS.items():
        begin, end = block(name)
        start, stop = page.find(begin), page.find(end)
        if start < 0 or stop < start:
            raise SystemExit(f"{PAGE.relative_to(ROOT)} has lost its markers {begin!r} ... {end!r}")
        page = page[:start] + render() + page[stop + len(end) + 1 :]
    return page


def main() -> int:
    page = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(page_with(page), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
