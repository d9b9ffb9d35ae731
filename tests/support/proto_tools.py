"""A real buf binary for the gRPC contract tests.

buf comes from the npm package ``@bufbuild/buf-<platform>`` (the platform package that ``@bufbuild/buf``
installs as an optional dependency; its ``bin/buf`` is the release binary). It is fetched with
``npm pack`` once into ``.cache/buf/`` at the repository root (gitignored), so a fresh clone needs only npm
and the npm registry; tests skip, saying why, only when npm cannot get it. buf's own cache goes to
``.cache/buf/home`` (``BUF_CACHE_DIR``); linting needs no network, since the API imports only protobuf's
well-known types and ``proto/third_party/googleapis/`` (see ``buf.yaml``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.deploy_tools import install_binary, npm_pack_member
from tests.support.files import ROOT

CACHE = ROOT / ".cache" / "buf"
BUF_VERSION = "1.75.0"
#: platform.system(), platform.machine() -> the npm package holding that platform's binary.
_PACKAGES = {
    ("Linux", "x86_64"): "@bufbuild/buf-linux-x64",
    ("Linux", "aarch64"): "@bufbuild/buf-linux-aarch64",
    ("Darwin", "x86_64"): "@bufbuild/buf-darwin-x64",
    ("Darwin", "arm64"): "@bufbuild/buf-darwin-arm64",
}


def _package() -> str:
    name = _PACKAGES.get((platform.system(), platform.machine()))
    if name is None:
        pytest.skip(f"no buf npm package for {platform.system()} {platform.machine()}")
    return f"{name}@{BUF_VERSION}"


def _fetch_buf(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        install_binary(target, npm_pack_member(_package(), "package/bin/buf", Path(tmp)))


def buf_binary() -> Path:
    """The cached buf binary (of :data:`BUF_VERSION`), fetched on first use."""
    binary = CACHE / BUF_VERSION / "buf"
    if not binary.exists():
        _fetch_buf(binary)
    return binary


def run_buf(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``buf <args>`` in ``cwd`` (default: the repository root, with buf.yaml); never raises on failure."""
    env = {**os.environ, "BUF_CACHE_DIR": str(CACHE / "home")}
    return subprocess.run(
        [str(buf_binary()), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def protoc_gen_go() -> Path:
    """protoc-gen-go (Go's protobuf generator, the Debian package ``protoc-gen-go``), installed with apt-get
    on first use where that is possible (root and apt-get); skips saying why where it is not."""
    found = shutil.which("protoc-gen-go")
    if found is None:
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            pytest.skip(
                "protoc-gen-go not found: install the Debian package protoc-gen-go (needs root, apt-get)"
            )
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300"]
        for command in ([*install, "protoc-gen-go"], [apt, "update", "-q"], [*install, "protoc-gen-go"]):
            subprocess.run(command, capture_output=True, timeout=600, env=env, check=False)
            found = shutil.which("protoc-gen-go")
            if found is not None:
                break
        else:
            pytest.skip(
                "apt-get could not install the Debian package protoc-gen-go (no package index reachable?)"
            )
    return Path(found)
