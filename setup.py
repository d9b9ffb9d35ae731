"""The compiled per-message loops: C extensions beside their pure-Python references.

Everything else about the package is in pyproject.toml; this file only declares the extensions, because
setuptools needs code for one property of them: ``optional=True``. A machine without a C compiler (or
without Python's headers) gets a warning from the build and the pure-Python path at run time, never a
failed install: ``./scripts/run.sh`` and ``./scripts/test.sh`` must work there. Which path runs is
decided at import (gateway/tubemq/wire/speedups.py; ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` forces the pure
one).

Each C file sits beside the Python module it speeds up, named after it with a leading underscore
(``gateway/tubemq/consumer/_batch.c`` for ``batch.py``), and builds the module of the same dotted path
(``gateway.tubemq.consumer._batch``).
"""

from pathlib import Path

from setuptools import Extension, setup

#: what the extensions share (varints, the growing buffer, a delivered message's fields): one copy, included
SHARED = sorted(p.as_posix() for p in Path("gateway/_cext").glob("*.h"))


def extension(name: str, source: str) -> Extension:
    return Extension(name, sources=[source], include_dirs=["gateway/_cext"], depends=SHARED, optional=True)


#: every C file of the package but the shared headers' directory, relative to this file
SOURCES = sorted(p.as_posix() for p in Path("gateway").rglob("_*.c") if "_cext" not in p.parts)

setup(ext_modules=[extension(source.removesuffix(".c").replace("/", "."), source) for source in SOURCES])
