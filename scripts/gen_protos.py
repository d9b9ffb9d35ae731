#!/usr/bin/env python3
"""Regenerate the protobuf Python modules from the .proto sources.

Run from anywhere with the dev dependencies installed (grpcio-tools)::

    python scripts/gen_protos.py                 # writes into the repository
    python scripts/gen_protos.py --out-root DIR  # writes the same tree under DIR (stale check)

* ``proto/wire/*.proto`` (TubeMQ's own wire messages) -> ``gateway/tubemq/wire/pb/<Name>_pb2.py`` and
  ``.pyi``. The include root is ``proto/wire`` itself, so the descriptors are registered as ``RPC.proto``
  etc. (as upstream) and the files need no imports between them: the generated modules import nothing of
  ours and work from inside the ``gateway.tubemq.wire.pb`` package.
* ``proto/tubemq/gateway/**/*.proto`` (the public API) -> ``gateway/grpc/pb/tubemq/gateway/...`` with
  ``_pb2.py``, ``.pyi`` and ``_pb2_grpc.py``; the include root is ``proto`` (the buf module root, so the
  descriptors are registered as ``tubemq/gateway/v1/gateway.proto``, the name reflection clients see).
  Imports between those files are rewritten to absolute ones into ``gateway.grpc.pb`` so the modules work
  inside the package; imports of other protos stay as they are (``google/protobuf/*`` come with protobuf,
  ``google/rpc/*`` with googleapis-common-protos; ``proto/third_party/googleapis/`` has the ``.proto``
  files protoc and buf read, never generated here).

The output depends only on the sources and the protoc version: files are processed in sorted order,
stale generated files are removed, and each output directory gets an ``__init__.py`` when it lacks one.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (proto include root, the folder under it whose .proto files are generated, output package dir, also
# generate gRPC stubs)
TARGETS: tuple[tuple[str, str, str, bool], ...] = (
    ("proto/wire", ".", "gateway/tubemq/wire/pb", False),
    ("proto", "tubemq/gateway", "gateway/grpc/pb", True),
)
#: Imported protos that are not ours (google/rpc/status.proto, as googleapis has it): on the include path for
#: protoc and buf, never generated here (the generated code imports them from googleapis-common-protos).
THIRD_PARTY = ROOT / "proto" / "third_party" / "googleapis"
_GENERATED = re.compile(r".*_pb2(_grpc)?\.pyi?$")
_INIT_TEXT = '"""Generated protobuf modules; regenerate with ``python scripts/gen_protos.py``."""\n'


def _protoc(args: list[str]) -> None:
    from grpc_tools import protoc  # dev dependency, imported late so --help works without it

    include = str(Path(protoc.__file__).parent / "_proto")  # well-known types (google/protobuf/*)
    code = protoc.main(["grpc_tools.protoc", f"-I{include}", f"-I{THIRD_PARTY}", *args])
    if code != 0:
        raise SystemExit(f"protoc failed ({code}): {' '.join(args)}")


def _package_imports(out_dir: Path, package: str, modules: set[str]) -> None:
    """Point imports between our own generated modules at ``package``.

    protoc writes ``import a_pb2 as ...`` / ``from sub import a_pb2 as ...`` as if the include root were
    on ``sys.path``; rewrite those (and only those) to ``from <package>[.sub] import a_pb2 as ...``.
    """
    pattern = re.compile(r"^(?:from ([\w.]+) )?import (\w+_pb2) as (\w+)$", re.MULTILINE)

    def fix(match: re.Match[str]) -> str:
        parent, leaf, alias = match.groups()
        if (f"{parent}.{leaf}" if parent else leaf) not in modules:
            return match.group(0)
        return f"from {package}{'.' + parent if parent else ''} import {leaf} as {alias}"

    for path in sorted(p for p in out_dir.rglob("*_pb2*.py*") if _GENERATED.match(p.name)):
        text = path.read_text()
        new = pattern.sub(fix, text)
        if new != text:
            path.write_text(new)


def generate(out_root: Path) -> list[Path]:
    """Generate every target under ``out_root``; return the written files, sorted."""
    written: list[Path] = []
    for src_rel, sub, out_rel, grpc in TARGETS:
        src = ROOT / src_rel
        found = (src / sub).rglob("*.proto") if (src / sub).is_dir() else ()
        protos = sorted(p.relative_to(src).as_posix() for p in found)
        out_dir = out_root / out_rel
        if out_dir.is_dir():
            for old in out_dir.rglob("*"):
                if old.is_file() and _GENERATED.match(old.name):
                    old.unlink()
        if not protos:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        args = [f"-I{src}", f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
        if grpc:
            args.append(f"--grpc_python_out={out_dir}")
        _protoc([*args, *protos])
        if grpc:
            modules = {p.removesuffix(".proto").replace("/", ".") + "_pb2" for p in protos}
            _package_imports(out_dir, out_rel.replace("/", "."), modules)
        leaves = {p.parent for p in out_dir.rglob("*_pb2*.py*") if _GENERATED.match(p.name)}
        packages = {out_dir, *leaves, *(d for leaf in leaves for d in leaf.parents if out_dir in d.parents)}
        for directory in sorted(packages):
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text(_INIT_TEXT)
        written.extend(p for p in out_dir.rglob("*") if p.is_file() and _GENERATED.match(p.name))
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-root", type=Path, default=ROOT, help="tree to write into (default: the repo)")
    options = parser.parse_args(argv)
    out_root: Path = options.out_root.resolve()
    if out_root == ROOT:
        # Generate aside first so a protoc failure never leaves the repository half-written.
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
        files = generate(ROOT)
    else:
        files = generate(out_root)
    for path in files:
        print(path.relative_to(out_root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
