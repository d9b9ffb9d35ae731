"""`helm test`: the smoke-test pod the chart renders, and its script run for real against a gateway started
with the chart's own generated credentials and rules."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.runtime import Runtime
from tests.support.chart_support import (
    FULLNAME,
    SMOKE_SCRIPT,
    render_notes,
    run_smoke_test,
    validate_manifests,
)
from tests.support.deploy_tools import NAMESPACE, RELEASE, by_kind, one, render
from tests.support.serving import bound_socket
from tests.support.waiting import eventually

GENERATED = f"{FULLNAME}-generated"
SMOKE = f"{FULLNAME}-smoke-test"
SELECTOR = {"app.kubernetes.io/name": "tubemq-gateway", "app.kubernetes.io/instance": RELEASE}


def _env(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_the_test_pod() -> None:
    manifests = render()
    pod = one(manifests, "Pod")
    assert pod["metadata"]["name"] == SMOKE
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    labels = pod["metadata"]["labels"]
    assert not SELECTOR.items() <= labels.items(), "the Service, PDB and spread must not select the test pod"
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "/smoke/smoke_test.py"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = _env(pod)
    assert env["GATEWAY_URL"]["value"] == f"http://{FULLNAME}.{NAMESPACE}.svc:8080", "the chart's Service"
    assert env["GATEWAY_TOPIC"]["value"] == "demo"
    assert env["GATEWAY_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": GENERATED, "key": "admin-api-key"}
    script = next(m for m in by_kind(manifests, "ConfigMap") if m["metadata"]["name"] == SMOKE)
    assert "helm.sh/hook" not in script["metadata"].get("annotations", {}), "deleted with the release"
    assert script["data"]["smoke_test.py"] == SMOKE_SCRIPT.read_text(encoding="utf-8")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "script")
    assert volume["configMap"]["name"] == SMOKE


def test_the_test_pod_follows_auth_and_tls() -> None:
    opened = _env(one(render({"auth": {"mode": "open"}}), "Pod"))
    assert "GATEWAY_API_KEY" not in opened
    own_keys = render({"auth": {"apiKeys": {"existingSecret": "gw-keys"}}})
    assert not by_kind(own_keys, "Pod"), "no credential it can read: no test pod"
    with_key = render(
        {
            "auth": {"apiKeys": {"existingSecret": "gw-keys"}},
            "tests": {"apiKeySecret": {"name": "t", "key": "k"}},
        }
    )
    assert _env(one(with_key, "Pod"))["GATEWAY_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "t",
        "key": "k",
    }
    tls = render({"tls": {"enabled": True, "secretName": "gw-tls", "clientAuth": "required"}})
    pod = one(tls, "Pod")
    env = _env(pod)
    assert env["GATEWAY_URL"]["value"].startswith("https://")
    assert env["GATEWAY_CA_FILE"]["value"] == "/etc/tubemq-gateway/tls/ca.crt"
    assert env["GATEWAY_CERT_FILE"]["value"] == "/etc/tubemq-gateway/tls/tls.crt"
    assert {"name": "tls", "secret": {"secretName": "gw-tls", "defaultMode": 0o440}} in pod["spec"]["volumes"]
    assert not by_kind(render({"tests": {"enabled": False}}), "Pod")
    validate_manifests(tls)


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"auth": {"mode": "open"}},
        {"auth": {"apiKeys": {"existingSecret": "gw-keys"}}},
        {"auth": {"adminKey": {"enabled": False}}},
        {
            "auth": {"apiKeys": {"existingSecret": "gw-keys"}},
            "tests": {"apiKeySecret": {"name": "t", "key": "k"}},
        },
        {"tests": {"enabled": False}},
    ],
    ids=["default", "open", "own-keys", "no-admin-key", "own-keys-test-key", "tests-off"],
)
def test_the_notes_offer_helm_test_only_when_a_test_pod_renders(
    values: dict[str, Any] | None, tmp_path: Path
) -> None:
    pod = bool(by_kind(render(values), "Pod"))
    notes = render_notes(tmp_path, values)
    assert ("helm test gw" in notes) == pod, notes
    enabled = (values or {}).get("tests", {}).get("enabled", True)
    # tests.enabled without a pod: the NOTES say why and which values give one
    assert ("No `helm test` pod" in notes and "tests.apiKeySecret.name" in notes) == (enabled and not pod)


class Served:
    def __init__(self, url: str, admin_key: str) -> None:
        self.url = url
        self.admin_key = admin_key


@pytest.fixture
async def chart_gateway(tmp_path: Path) -> AsyncIterator[Served]:
    """A gateway on loopback configured like a pod of the default chart: auth required, the keys file and
    rules the chart renders, and its generated consumer id secret."""
    manifests = render()
    data = next(m for m in by_kind(manifests, "Secret") if m["metadata"]["name"] == GENERATED)["data"]
    rules = next(
        m for m in by_kind(manifests, "ConfigMap") if m["metadata"]["name"] == f"{FULLNAME}-auth-rules"
    )
    keys_file, rules_file = tmp_path / "api-keys.json", tmp_path / "rules.json"
    keys_file.write_bytes(base64.b64decode(data["api-keys.json"]))
    rules_file.write_text(rules["data"]["rules.json"], encoding="utf-8")
    sock = bound_socket()
    port = sock.getsockname()[1]
    settings = Settings(
        http_host="127.0.0.1",
        http_port=port,
        embedded={"topics": "demo:2"},
        auth={"mode": "required", "api_keys_file": keys_file, "rules_file": rules_file},
        consumers={
            "id_secret": base64.b64decode(data["consumer-id-secret"]).decode(),
            "heartbeat_interval": 0.1,
            "empty_fetch_wait": 0.05,
            "assignment_wait": 5.0,
        },
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = uvicorn.Server(
        uvicorn.Config(create_app(runtime=runtime), log_config=None, log_level=None, access_log=False)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        return server.started

    try:
        await eventually(started, timeout=10.0, what="uvicorn start")
        yield Served(f"http://127.0.0.1:{port}", base64.b64decode(data["admin-api-key"]).decode())
    finally:
        server.should_exit = True
        await task
        await runtime.stop()
        sock.close()


def wrong_key(key: str) -> str:
    """``key`` with its last character changed, so it is never the key itself."""
    return key[:-1] + ("y" if key.endswith("x") else "x")


async def test_the_smoke_test_publishes_and_reads_back(chart_gateway: Served) -> None:
    code, out = await run_smoke_test(chart_gateway.url, chart_gateway.admin_key)
    assert code == 0, out
    assert "published to 1:demo:" in out and "OK: tubemq-gateway publishes and consumes" in out


async def test_the_smoke_test_fails_with_a_wrong_key_or_topic(chart_gateway: Served) -> None:
    code, out = await run_smoke_test(chart_gateway.url, wrong_key(chart_gateway.admin_key))
    assert code == 1 and "HTTP 401" in out and "tests.apiKeySecret" in out, out
    code, out = await run_smoke_test(
        chart_gateway.url, chart_gateway.admin_key, topic="nosuchtopic", seconds=5
    )
    assert code == 1 and "FAILED: publish to nosuchtopic" in out, out
