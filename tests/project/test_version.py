"""The project's version lives in one place, ``gateway.__version__``: the package metadata reads it from
there, and every copy that cannot read it (the chart's appVersion, the Dockerfile's default build argument,
the committed OpenAPI document, the changelog's current version) says the same."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from gateway import __version__
from tests.support.files import ROOT


def test_the_version_is_a_semantic_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?", __version__), __version__


def test_the_package_metadata_reads_the_version_from_gateway() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], (
        "pyproject.toml repeats the version: give it in gateway/__init__.py"
    )
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gateway.__version__"}


def test_the_chart_ships_this_version() -> None:
    chart = yaml.safe_load(
        (ROOT / "deploy" / "helm" / "tubemq-gateway" / "Chart.yaml").read_text(encoding="utf-8")
    )
    assert chart["appVersion"] == __version__, "set appVersion in Chart.yaml to gateway.__version__"


def test_the_image_is_labelled_with_this_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE) == [__version__]


def test_the_openapi_document_and_the_cli_say_this_version() -> None:
    document = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    assert document["info"]["version"] == __version__
    shown = subprocess.run(
        [sys.executable, "-m", "gateway", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.split()[-1] == __version__


def test_the_changelog_names_this_version_as_current() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"**The current version is {__version__}.**" in changelog
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", changelog, re.MULTILINE)
    assert headings[0] == ("Unreleased", ""), "the changelog starts with ## [Unreleased]"
    assert (__version__, headings[1][1]) == headings[1] and headings[1][1], (
        f"the newest version in CHANGELOG.md is {headings[1][0]}, not {__version__}, or it has no date"
    )
    sections = re.findall(r"^## (.*)$", changelog, re.MULTILINE)
    assert len(sections) == len(headings), f"a section that is not a version: {sections}"
