"""Write docs/helm-values.md from the Helm chart (``python scripts/gen_helm_values_doc.py``).

The chart's ``values.yaml`` is the one source: every value with its default and the comment above it (the
comment of a group above its first line), and its type from ``values.schema.json``. A list of objects (the
rules, the dashboards' panels...) is one value, shown whole. tests/docs/test_config_doc.py checks that the
committed page is what this prints.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "tubemq-gateway"
PAGE = ROOT / "docs" / "helm-values.md"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+|\"[^\"]+\"):(?P<rest>.*)$")


@dataclass
class Value:
    path: tuple[str, ...]
    comment: str


def values_with_comments(text: str) -> list[Value]:
    """Every key of ``values.yaml``, in order, with the comment lines just above it (keys inside list
    items come out too, with paths through the list's key: :func:`render` leaves them out)."""
    out: list[Value] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the open mappings
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if match is None:
            comment = []
            continue
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = match.group("key").strip('"')
        out.append(Value((*[k for _, k in stack], key), " ".join(comment)))
        comment = []
        if match.group("rest").split(" #")[0].strip() == "":
            stack.append((indent, key))
    return out


def _lists(text: str) -> set[tuple[str, ...]]:
    """The keys whose value is a block list (``key:`` followed by ``- item`` lines)."""
    data = yaml.safe_load(text)
    found: set[tuple[str, ...]] = set()

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, str(key)))
        elif isinstance(node, list):
            found.add(path)

    walk(data, ())
    return found


def lookup(node: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def resolve(root: dict[str, Any], node: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``node`` with its ``$ref`` followed (``#/definitions/name``); the name of the definition, if any."""
    name = ""
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = lookup(root, tuple(node["$ref"].lstrip("#/").split("/")))
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node, name


def schema_of(root: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    node, name = root, ""
    for key in path:
        node, _ = resolve(root, node)
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        if key not in props and not isinstance(extra, dict):
            return {}, ""
        node, name = resolve(root, props.get(key, extra))
    return node, name


def type_of(schema: dict[str, Any], name: str) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        text = " or ".join(kind)
    elif kind is None and ("oneOf" in schema or "anyOf" in schema):
        text = " or ".join(str(s.get("type", "?")) for s in schema.get("oneOf", schema.get("anyOf", [])))
    else:
        text = str(kind or "")
    if name and name not in text:
        text = f"{text} ({name})" if text else name
    bounds = [
        f"≥ {schema['minimum']}" if "minimum" in schema else "",
        f"≤ {schema['maximum']}" if "maximum" in schema else "",
    ]
    extra = ", ".join(b for b in bounds if b)
    return f"{text}, {extra}" if extra else text


def shown(value: Any) -> str:
    if isinstance(value, dict) and value:
        return ""
    text = json.dumps(value, separators=(", ", ": "))
    if len(text) > 60:
        text = text[:57] + "..."
    return f"`{text}`"


def cell(text: str) -> str:
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"([*_<>|\[\]])", r"\\\1", p) for p in parts)


def render() -> str:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    lists = _lists(text)
    rows = []
    for value in values_with_comments(text):
        if any(value.path[: len(p)] == p and len(value.path) > len(p) for p in lists):
            continue  # a key inside a list item: part of the list's value
        default = lookup(data, value.path)
        node, name = schema_of(schema, value.path)
        meaning = value.comment or str(node.get("description", ""))
        rows.append(
            f"| `{'.'.join(value.path)}` | {type_of(node, name)} | {shown(default)} | {cell(meaning)} |"
        )
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return "\n".join(
        [
            "# Helm values",
            "",
            "<!-- Generated by scripts/gen_helm_values_doc.py from deploy/helm/tubemq-gateway/values.yaml",
            "and values.schema.json: do not edit by hand. -->",
            "",
            f"Every value of the `{chart['name']}` chart (version {chart['version']}): its type (from",
            "`values.schema.json`, which `helm install` checks), its default and the comment `values.yaml`",
            "gives it. A group's comment is on its own row; a value that a gateway setting takes is named in",
            "the [configuration reference](configuration.md) (its *Helm* notes); any other setting can be",
            "given in `config` as its environment variable. Installing:",
            "[Operating it](operations.md#install-with-helm).",
            "",
            "| value | type | default | meaning |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
