"""GitOps renders (Argo CD and Flux run ``helm template``, where ``lookup`` finds nothing): with the id secret
and the admin key in Secrets of the user's own, every render is the same and the chart generates nothing."""

from __future__ import annotations

from typing import Any

from tests.support.chart_support import FULLNAME, gateway_container, pod_spec, refused, validate_manifests
from tests.support.deploy_tools import CHART, NAMESPACE, RELEASE, by_kind, render, run_helm, set_args

GENERATED = f"{FULLNAME}-generated"
GITOPS: dict[str, Any] = {
    "forwarding": {"idSecret": {"existingSecret": "gw-ids", "key": "id"}},
    "auth": {"adminKey": {"existingSecret": "gw-admin"}},
}


def _rendered_text(values: dict[str, Any]) -> str:
    return run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values)).stdout


def _generated(manifests: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [m for m in by_kind(manifests, "Secret") if m["metadata"]["name"] == GENERATED]
    return found[0] if found else None


def _env(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e for e in gateway_container(manifests)["env"]}


def test_existing_secrets_make_every_render_the_same() -> None:
    first, second = _rendered_text(GITOPS), _rendered_text(GITOPS)
    assert first == second, "two renders differ: a GitOps tool would see a change on every sync"
    manifests = render(GITOPS)
    validate_manifests(manifests)
    assert _generated(manifests) is None, "nothing left to generate, so no generated Secret"
    ref = _env(manifests)["TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gw-ids", "key": "id"}
    volumes = {v["name"]: v for v in pod_spec(manifests)["volumes"]}
    assert volumes["api-keys"]["secret"]["secretName"] == "gw-admin"
    assert volumes["api-keys"]["secret"]["items"] == [{"key": "api-keys.json", "path": "api-keys.json"}]
    (test_pod,) = [m for m in by_kind(manifests, "Pod") if "smoke-test" in m["metadata"]["name"]]
    (container,) = test_pod["spec"]["containers"]
    key = {e["name"]: e for e in container["env"]}["GATEWAY_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert key == {"name": "gw-admin", "key": "admin-api-key"}


def test_one_existing_secret_leaves_the_other_generated() -> None:
    own_ids = render({"forwarding": GITOPS["forwarding"]})
    generated = _generated(own_ids)
    assert generated is not None and set(generated["data"]) == {"admin-api-key", "api-keys.json"}
    own_admin = render({"auth": GITOPS["auth"]})
    generated = _generated(own_admin)
    assert generated is not None and set(generated["data"]) == {"consumer-id-secret"}
    ref = _env(own_admin)["TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": GENERATED, "key": "consumer-id-secret"}
    # The default key name of an own id secret is the generated one's.
    named = render({"forwarding": {"idSecret": {"existingSecret": "gw-ids"}}})
    ref = _env(named)["TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gw-ids", "key": "consumer-id-secret"}


def test_own_api_keys_file_generates_no_unused_admin_key() -> None:
    manifests = render({**GITOPS, "auth": {"apiKeys": {"existingSecret": "gw-keys"}}})
    assert _generated(manifests) is None
    own_keys = {"forwarding": GITOPS["forwarding"], "auth": {"apiKeys": {"existingSecret": "k"}}}
    assert _rendered_text(own_keys) == _rendered_text(own_keys)


def test_conflicting_key_sources_are_refused() -> None:
    both = {"auth": {"adminKey": {"existingSecret": "a"}, "apiKeys": {"existingSecret": "b"}}}
    assert "give one" in refused(both)
    disabled = {"auth": {"adminKey": {"enabled": False, "existingSecret": "a"}}}
    assert "needs auth.adminKey.enabled" in refused(disabled)


def test_retry_copies_are_signed_with_the_id_secret_unless_a_retry_secret_is_named() -> None:
    assert "TUBEMQ_GATEWAY_CONSUMERS__RETRY_SECRET" not in _env(render(GITOPS))  # the id secret signs them
    named = {"retrySecret": {"existingSecret": "gw-retry", "key": "now", "previousKey": "before"}}
    manifests = render({**GITOPS, "forwarding": {**GITOPS["forwarding"], **named}})
    validate_manifests(manifests)
    env = _env(manifests)
    current = env["TUBEMQ_GATEWAY_CONSUMERS__RETRY_SECRET"]["valueFrom"]["secretKeyRef"]
    previous = env["TUBEMQ_GATEWAY_CONSUMERS__PREVIOUS_RETRY_SECRETS"]["valueFrom"]["secretKeyRef"]
    assert (current, previous) == ({"name": "gw-retry", "key": "now"}, {"name": "gw-retry", "key": "before"})
