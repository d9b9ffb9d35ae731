"""The compiled per-message loops (issue #26): C extensions beside their pure-Python references.

Everything else about the package is in pyproject.toml; this file only declares the extensions, because
setuptools needs code for one property of them: ``optional=True``. A machine without a C compiler (or
without Python's headers) gets a warning from the build and the pure-Python path at run time, never a
failed install: ``./scripts/run.sh`` and ``./scripts/test.sh`` must work there. Which path runs is
decided at import (gateway/tubemq/wire/speedups.py; ``TUBEMQ_GATEWAY_NO_EXTENSIONS=1`` forces the pure
one).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gateway.tubemq.wire._speedups",
            sources=["gateway/tubemq/wire/_speedups.c"],
            optional=True,
        ),
        Extension("gateway.grpc._consumed", sources=["gateway/grpc/_consumed.c"], optional=True),
    ]
)
