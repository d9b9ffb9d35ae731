"""pyproject.toml's protobuf and grpcio floors are the versions the committed generated code checks at import,
so an install at the floors imports; and each is capped below its next major."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.files import ROOT

PB_DIRS = (ROOT / "gateway" / "tubemq" / "pb", ROOT / "gateway" / "grpc" / "pb")
GRPC_FAMILY = ("grpcio", "grpcio-health-checking", "grpcio-reflection", "grpcio-status", "grpcio-tools")


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"]) + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    return {req.name: req for req in map(Requirement, lines)}


def _generated_versions(pattern: str, glob: str) -> set[Version]:
    found = set()
    for folder in PB_DIRS:
        for path in folder.rglob(glob):
            match = re.search(pattern, path.read_text(encoding="utf-8"))
            assert match, f"{path} names no generator version"
            found.add(Version(match.group(1)))
    assert found, f"no {glob} files under {PB_DIRS}"
    return found


def _floor_and_cap(req: Requirement) -> tuple[Version, Version]:
    floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
    caps = [Version(s.version) for s in req.specifier if s.operator == "<"]
    assert len(floors) == 1 and len(caps) == 1, f"{req}: want exactly one >= floor and one < cap"
    return floors[0], caps[0]


def test_protobuf_floor_is_the_gencode_version() -> None:
    gencode = _generated_versions(r"# Protobuf Python Version: (\S+)", "*_pb2.py")
    floor, cap = _floor_and_cap(_requirements()["protobuf"])
    assert floor == max(gencode), f"protobuf floor {floor}; the generated code checks for >= {max(gencode)}"
    assert cap == Version(f"{floor.major + 1}"), f"protobuf cap {cap}: want <{floor.major + 1}"


def test_grpcio_floors_are_the_stub_generator_version() -> None:
    generated = _generated_versions(r"GRPC_GENERATED_VERSION = '([^']+)'", "*_pb2_grpc.py")
    requirements = _requirements()
    for name in GRPC_FAMILY:
        floor, cap = _floor_and_cap(requirements[name])
        assert floor == max(generated), f"{name} floor {floor}; the stubs check for >= {max(generated)}"
        assert cap == Version(f"{floor.major + 1}"), f"{name} cap {cap}: want <{floor.major + 1}"


def test_license_is_an_spdx_string_with_a_backend_that_reads_it() -> None:
    # A TOML table here makes setuptools print deprecation warnings on every install; the string form needs
    # setuptools>=77 as the build backend.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == "Apache-2.0"
    backend = {r.name: r for r in map(Requirement, pyproject["build-system"]["requires"])}["setuptools"]
    assert not backend.specifier.contains("76.9"), f"build backend {backend} must require setuptools>=77"
