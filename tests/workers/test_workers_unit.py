"""``serve --workers``: the default worker count (CPU affinity and cgroup quotas, on fake cgroup trees) and
the merged exposition of the workers' metrics."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from starlette.requests import Request

from gateway.api.forwarding import CLIENT_CERT_HEADER, WORKER_HOP_HEADER, Forwarder
from gateway.api.worker_listener import private_app
from gateway.config import Settings
from gateway.grpc.siblings import CLIENT_CERT_KEY, forwarded_subject
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.worker_merge import merge_worker_metrics
from gateway.serve import private_socket
from gateway.service.consumers import Owner
from gateway.service.peers import PeerPolicy
from gateway.workers.context import WorkerContext
from gateway.workers.cpus import allowed_cpus, cgroup_cpu_limit
from gateway.workers.supervisor import per_worker_limits, private_directory
from tests.support.workers_support import samples


def _tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc_file = tmp_path / "proc-cgroup"
    proc_file.write_text(proc)
    return root, proc_file


CPUS = len(os.sched_getaffinity(0))
V2_NESTED = {  # the tightest quota along the path counts
    "cpu.max": "max 100000\n",
    "kubepods/pod1/cpu.max": "300000 100000\n",
    "kubepods/pod1/ctr/cpu.max": "150000 100000\n",
}
V1_HALF = {
    "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
    "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
    "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
    "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
}


@pytest.mark.parametrize(
    ("proc", "files", "limit", "workers"),
    [
        ("0::/kubepods/pod1/ctr\n", V2_NESTED, 1.5, min(CPUS, 2)),  # 1.5 CPUs: rounded up
        ("0::/\n", {"cpu.max": "max 100000\n"}, None, CPUS),
        ("4:memory:/x\n2:cpu,cpuacct:/docker/abc\n", V1_HALF, 0.5, 1),  # at least one
    ],
)
def test_cgroup_quotas(
    tmp_path: Path, proc: str, files: dict[str, str], limit: float | None, workers: int
) -> None:
    root, proc_file = _tree(tmp_path, proc, files)
    assert cgroup_cpu_limit(root, proc_file) == limit
    assert allowed_cpus(root, proc_file) == workers


@pytest.mark.parametrize("text", ["", "garbage", "0::/../../etc\n", "1:cpu:/nowhere\n"])
def test_unreadable_cgroups_mean_no_limit(tmp_path: Path, text: str) -> None:
    root, proc = _tree(tmp_path, text, {"cpu.max": "bogus\n"})
    assert cgroup_cpu_limit(root, proc) is None
    assert cgroup_cpu_limit(root, tmp_path / "missing") is None


def test_the_default_is_zero_meaning_the_allowed_cpus() -> None:
    assert Settings.model_fields["workers"].default == 0
    assert Settings(workers=3).workers == 3
    with pytest.raises(ValueError, match="workers"):
        Settings(workers=-1)


def test_context_paths_and_siblings(tmp_path: Path) -> None:
    context = WorkerContext(1, 3, tmp_path)
    assert context.siblings() == {0: str(tmp_path / "w0.sock"), 2: str(tmp_path / "w2.sock")}
    with pytest.raises(ValueError):
        WorkerContext(3, 3, tmp_path)


def test_merged_metrics_carry_a_worker_label_and_add_up() -> None:
    workers = [GatewayMetrics(), GatewayMetrics()]
    for count, metrics in enumerate(workers, start=1):
        for _ in range(count):
            metrics.observe_http("/v1/x", "GET", 200, 0.01)
    text = merge_worker_metrics(
        [(0, workers[0].render().decode()), (1, workers[1].render().decode()), (2, None)]
    )
    merged = text.decode()
    requests = samples(merged, "tubemq_gateway_http_requests_total")
    assert sorted((labels["worker"], value) for labels, value in requests) == [("0", 1.0), ("1", 2.0)]
    buckets = [v for labels, v in samples(merged, "tubemq_gateway_http_request_duration_seconds_count")]
    assert sum(buckets) == 3
    up = {labels["worker"]: value for labels, value in samples(merged, "tubemq_gateway_worker_up")}
    assert up == {"0": 1.0, "1": 1.0, "2": 0.0}
    assert merged.count("# TYPE tubemq_gateway_http_requests_total counter") == 1


def test_replica_bounds_are_split_over_the_workers() -> None:
    settings = Settings(
        limits={"max_concurrent_requests": 1000, "max_inflight_publish_bytes": 0},
        rate_limits={
            "publish_messages_per_second": 900,
            "publish_bytes_per_second": None,
            "max_instances_per_principal": 100,
            "overrides": {
                "alice": {"publish_messages_per_second": 30},
                "bob": {"max_instances_per_principal": 0},
            },
        },
    )
    split = settings.model_copy(update=per_worker_limits(settings, 3))
    assert split.limits.max_concurrent_requests == 334  # rounded up: the replica keeps at least its bound
    assert split.limits.max_inflight_publish_bytes == 0  # 0: no cap, on every worker
    r = split.rate_limits
    # whole: the workers share what each caller spent (gateway/service/shared_spending.py); 1/N each
    # refused a client whose connections had all reached one worker at 1/N of its rate (issue #26)
    assert (r.publish_messages_per_second, r.publish_bytes_per_second) == (900, None)
    assert r.max_instances_per_principal == 100  # whole: the workers share the count
    assert r.overrides["alice"].publish_messages_per_second == 30
    assert r.overrides["alice"].max_instances_per_principal is None  # still: the default
    assert r.overrides["bob"].max_instances_per_principal == 0
    assert split.limits.max_batch_messages == settings.limits.max_batch_messages  # per request: unchanged


async def test_the_client_certificate_crosses_only_the_sibling_hop() -> None:
    """The forwarder drops a client's own X-TubeMQ-Client-Cert, sets it from the connection's verified
    certificate on the hop to a sibling (never towards another replica), and only the private listener turns
    it back into the TLS extension."""
    own = "http://127.0.0.1:1"
    forwarder = Forwarder(own, PeerPolicy.build(own, ["127.0.0.1"]), siblings={1: "/nowhere.sock"}, worker=0)
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/v1/consumers/g/instances/i/messages",
        "query_string": b"",
        "headers": [(CLIENT_CERT_HEADER.encode(), b"Q049bWFsbG9yeQ"), (b"authorization", b"Bearer k")],
        "extensions": {"tls": {"client_cert_name": "CN=alice,O=Ex"}},
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    try:
        request = Request(scope, receive)
        _, hop = await forwarder._build(request, Owner(own, 1), httpx.Timeout(1.0))
        assert hop.headers.get_list(CLIENT_CERT_HEADER) == [
            base64.urlsafe_b64encode(b"CN=alice,O=Ex").decode()
        ]
        assert hop.headers["authorization"] == "Bearer k" and hop.headers[WORKER_HOP_HEADER] == "0"
        _, replica = await forwarder._build(request, Owner(own), httpx.Timeout(1.0))
        assert CLIENT_CERT_HEADER not in replica.headers
        scope["extensions"] = {}
        _, anonymous = await forwarder._build(Request(scope, receive), Owner(own, 1), httpx.Timeout(1.0))
        assert CLIENT_CERT_HEADER not in anonymous.headers
    finally:
        await forwarder.close()

    seen: list[dict[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)

    app = private_app(cast(Any, inner))
    header = base64.urlsafe_b64encode("CN=Zoë".encode()).decode().encode()
    for value, expected in ((header, "CN=Zoë"), (b"%%%", None), (b"", None)):
        await app({**scope, "headers": [(CLIENT_CERT_HEADER.encode(), value)]}, receive, None)
        tls = seen[-1].get("extensions", {}).get("tls")
        assert (tls or {}).get("client_cert_name") == expected
        assert all(name != CLIENT_CERT_HEADER.encode() for name, _ in seen[-1]["headers"])


def test_a_relayed_grpc_subject_is_believed_only_from_the_private_socket() -> None:
    encoded = base64.urlsafe_b64encode("CN=Zoë".encode()).decode()
    assert forwarded_subject("unix:", {CLIENT_CERT_KEY: encoded}) == "CN=Zoë"
    assert forwarded_subject("ipv4:127.0.0.1:5000", {CLIENT_CERT_KEY: encoded}) is None
    assert forwarded_subject("ipv6:[::1]:5000", {CLIENT_CERT_KEY: encoded}) is None
    for bad in ("%%%", "", "_w"):
        assert forwarded_subject("unix:", {CLIENT_CERT_KEY: bad}) is None
    assert forwarded_subject("unix:", {}) is None


def test_the_private_directory_binds_sockets_whatever_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TMPDIR too deep for a unix socket's path puts the workers' sockets in /tmp; a short one is kept."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    try:
        for base, expected in ((deep, Path("/tmp")), (short, short)):
            monkeypatch.setattr(tempfile, "tempdir", str(base))
            made = private_directory()
            try:
                assert made.parent == expected
                assert made.stat().st_mode & 0o777 == 0o700
                with private_socket(str(made / "w127.sock")):
                    pass
            finally:
                shutil.rmtree(made)
    finally:
        short.rmdir()
