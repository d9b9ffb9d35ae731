"""The compiled per-message loops: C extensions beside their pure-Python references.

Everything else about the package is in pyproject.toml; this file only declares the extensions, because
setuptools needs code for one property of them: ``optional=True``. A machine without a C compiler (or
without Python's headers) gets a warning from the build and the pure-Python path at run time, never a
failed install: ``./scripts/run.sh`` and ``./scripts/test.sh`` must work there. Which path runs is
decided at import (gateway/tubemq/wire/speedups.py; ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` forces the pure
one).
"""

from setuptools import Extension, setup

#: what the extensions share (varints, the growing buffer, a delivered message's fields): one copy, included
SHARED = ["gateway/_cext/outbuf.h", "gateway/_cext/delivered.h"]


def extension(name: str, source: str) -> Extension:
    return Extension(name, sources=[source], include_dirs=["gateway/_cext"], depends=SHARED, optional=True)


setup(
    ext_modules=[
        extension("gateway.tubemq.wire._speedups", "gateway/tubemq/wire/_speedups.c"),
        extension("gateway.grpc._consumed", "gateway/grpc/_consumed.c"),
        extension("gateway.api._rendered", "gateway/api/_rendered.c"),
        extension("gateway.api._publish_json", "gateway/api/_publish_json.c"),
    ]
)
