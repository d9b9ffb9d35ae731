"""Scraping a TLS release: the ServiceMonitor verifies the pods' certificate (a CA and a name, never
insecureSkipVerify unless asked), checked with a real Prometheus scraping a TLS gateway's admin port with the
rendered settings; and the NetworkPolicy opens the admin port (metrics, docs) only to the namespaces named in
values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chart_support import FULLNAME, refused, validate_manifests
from tests.support.deploy_tools import NAMESPACE, one, prometheus_tool, render
from tests.support.prometheus_support import running_prometheus, scrape_job
from tests.support.tls_support import Pki, make_pki
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, start_workers

TLS = {"tls": {"enabled": True, "secretName": "gw-tls"}}
MONITORED = {**TLS, "metrics": {"serviceMonitor": {"enabled": True}}}


def _monitored(**tls: Any) -> dict[str, Any]:
    """Values of a TLS release with a ServiceMonitor whose ``tls`` settings are ``tls``."""
    return {**MONITORED, "metrics": {"serviceMonitor": {"enabled": True, "tls": tls}}}


def _tls_config(values: dict[str, Any]) -> dict[str, Any]:
    endpoint = one(render(values), "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["port"] == "admin"
    config: dict[str, Any] = endpoint["tlsConfig"]
    return config


def test_the_service_monitor_verifies_the_pod_certificate() -> None:
    config = _tls_config(MONITORED)
    assert config == {
        "ca": {"secret": {"name": "gw-tls", "key": "ca.crt"}},
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",  # the Service's name, not the pod IP scraped
        "insecureSkipVerify": False,
    }
    own = _tls_config(_monitored(serverName="gw.internal", caSecret={"name": "corp-ca", "key": "root.pem"}))
    assert own["ca"] == {"secret": {"name": "corp-ca", "key": "root.pem"}}
    assert own["serverName"] == "gw.internal"
    # Without ca.crt in the TLS Secret there is nothing to verify against: refused, unless a CA is named.
    no_ca = {**MONITORED, "tls": {**TLS["tls"], "caCert": False}}
    assert "needs a CA to verify" in refused(no_ca)
    named = {**_monitored(caSecret={"name": "ca"}), "tls": no_ca["tls"]}
    assert _tls_config(named)["ca"]["secret"]["name"] == "ca"
    skip = {
        **MONITORED,
        "metrics": {"serviceMonitor": {"enabled": True, "tls": {"insecureSkipVerify": True}}},
    }
    assert _tls_config(skip) == {"insecureSkipVerify": True}, "only when asked for"
    plain = one(render({"metrics": {"serviceMonitor": {"enabled": True}}}), "ServiceMonitor")
    assert "tlsConfig" not in plain["spec"]["endpoints"][0]


def _admin_rule(values: dict[str, Any]) -> dict[str, Any] | None:
    manifests = render({"networkPolicy": {"enabled": True, **values}})
    validate_manifests(manifests)
    rules = one(manifests, "NetworkPolicy")["spec"]["ingress"]
    found = [r for r in rules if {p["port"] for p in r["ports"]} == {"admin"}]
    return found[0] if found else None


def _namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def test_the_admin_port_is_open_only_to_the_named_namespaces() -> None:
    default = _admin_rule({})
    assert default is not None and default["from"] == [_namespace("monitoring")]
    prometheus = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    both = _admin_rule({"adminNamespaces": ["observability", "ops"], "adminFrom": [prometheus]})
    assert both is not None and both["from"] == [_namespace("observability"), _namespace("ops"), prometheus]
    # No namespace and no peer: no rule at all (an ingress rule without `from` would admit everyone).
    assert _admin_rule({"adminNamespaces": [], "adminFrom": []}) is None
    assert "adminNamespaces" in refused(
        {"networkPolicy": {"enabled": True, "adminNamespaces": ["Not A Name"]}}
    )


# --- a real Prometheus scraping a TLS gateway with the ServiceMonitor's settings ------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[WorkerGateway]:
    prometheus_tool("prometheus")  # skip before starting anything when it is missing
    tls = ("--tls-cert-file", str(pki.server.cert), "--tls-key-file", str(pki.server.key))
    gateway = start_workers(tmp_path_factory.mktemp("tls"), 2, *tls, "--admin-port", "0")
    try:
        yield gateway
    finally:
        gateway.stop()


def _as_prometheus(tls_config: dict[str, Any], ca_files: dict[str, Path]) -> dict[str, Any]:
    """The Prometheus tls_config the Operator makes of a ServiceMonitor's tlsConfig (the CA Secret's key
    mounted as a file)."""
    out: dict[str, Any] = {"insecure_skip_verify": tls_config["insecureSkipVerify"]}
    if "ca" in tls_config:
        out["ca_file"] = str(ca_files[tls_config["ca"]["secret"]["name"]])
    if "serverName" in tls_config:
        out["server_name"] = tls_config["serverName"]
    return out


@pytest.mark.slow  # a TLS supervisor with two workers, and a real Prometheus scraping it
async def test_prometheus_scrapes_with_the_rendered_verification(
    tls_gateway: WorkerGateway, pki: Pki, tmp_path: Path
) -> None:
    # The test certificate names tubemq.test (not 127.0.0.1's Service name): serverName says so.
    values = {
        **MONITORED,
        "metrics": {"serviceMonitor": {"enabled": True, "tls": {"serverName": "tubemq.test"}}},
    }
    rendered = _tls_config(values)
    stranger_ca = pki.stranger.cert.parent / "other-ca.crt"
    assert stranger_ca.exists(), "the other CA of the test PKI"
    target = [f"127.0.0.1:{tls_gateway.admin_port}"]
    jobs = [
        scrape_job(
            target, "verified", scheme="https", tls_config=_as_prometheus(rendered, {"gw-tls": pki.ca})
        ),
        scrape_job(
            target, "wrong-ca", scheme="https", tls_config=_as_prometheus(rendered, {"gw-tls": stranger_ca})
        ),
        scrape_job(
            target,
            "wrong-name",
            scheme="https",
            tls_config=_as_prometheus({**rendered, "serverName": "elsewhere.test"}, {"gw-tls": pki.ca}),
        ),
    ]
    async with running_prometheus(tmp_path, target, jobs) as prom:

        async def health() -> dict[str, str] | None:
            answer = (await prom.get("/api/v1/targets")).json()["data"]["activeTargets"]
            seen = {t["labels"]["job"]: t["health"] for t in answer}
            return seen if "unknown" not in seen.values() and len(seen) == 3 else None

        seen = await eventually(health, timeout=30, what="every target scraped", step=0.3)
        assert seen == {"verified": "up", "wrong-ca": "down", "wrong-name": "down"}
