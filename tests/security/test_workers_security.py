"""Security of ``serve --workers 2`` (issue #22, row 6 and the smaller findings), API keys required:

* caps that are per replica hold per replica: with ``rate_limits.max_instances_per_principal=3`` a principal
  holds 3 consumer instances in the replica, not 2 on each worker (4), whichever workers its requests land
  on; deleting one frees a place on any worker;
* a client's own ``X-TubeMQ-Worker-Hop`` header on the public port changes nothing: another principal's
  genuine instance id answers 404 exactly like an unknown one (it answered 410 "owned by worker N" on the
  worker that did not hold it);
* a worker's own metrics on its private socket need the replica's worker token;
* the admin listener binds loopback unless configured.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.api.worker_listener import OWN_METRICS_PATH, WORKER_TOKEN_HEADER, worker_token
from gateway.config import Settings
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers, owner_worker

GROUP = "caps_group"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    with keyed_workers(
        tmp_path_factory.mktemp("caps"), 2, TUBEMQ_GATEWAY_RATE_LIMITS__MAX_INSTANCES_PER_PRINCIPAL="3"
    ) as served:
        yield served


async def test_max_instances_per_principal_holds_per_replica(served: tuple[WorkerGateway, AuthFiles]) -> None:
    gateway, files = served
    alice = files.headers("alice")
    answers: list[tuple[int, int, str]] = []
    async with gateway.pinned(0) as first, gateway.pinned(1) as second:
        for worker, client in ((0, first), (1, second), (0, first), (1, second), (0, first), (1, second)):
            answer = await client.post(f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=alice)
            answers.append((worker, answer.status_code, answer.text))
        created = [a for a in answers if a[1] == 201]
        refused = [a for a in answers if a[1] == 429]
        print(
            f"6 creations over 2 workers with a cap of 3: {len(created)} created, {len(refused)} refused 429"
        )
        assert len(created) == 3 and len(refused) == 3, answers
        assert all("maximum of 3 consumer instances" in text for _, _, text in refused)
        # another principal is not affected
        bob = await second.post(
            f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=files.headers("bob")
        )
        assert bob.status_code == 201, bob.text
        # deleting one of alice's frees a place, on either worker
        instance = json.loads(created[0][2])["instanceId"]
        client = first if created[0][0] == 0 else second
        deleted = await client.delete(f"/v1/consumers/{GROUP}/instances/{instance}", headers=alice)
        assert deleted.status_code == 204, deleted.text
        other = second if client is first else first
        again = await other.post(f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=alice)
        assert again.status_code == 201, again.text
        assert (
            await first.post(f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=alice)
        ).status_code == 429


def test_the_count_lives_in_the_private_directory(served: tuple[WorkerGateway, AuthFiles]) -> None:
    gateway, _ = served
    directory = Path(gateway.socket_dir) / "instances"
    assert directory.is_dir() and (directory.stat().st_mode & 0o077) == 0


async def test_a_spoofed_worker_hop_header_answers_like_an_unknown_id(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    owner, other = "bob", "alice"
    async with gateway.pinned(0) as first:
        created = await first.post(
            f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=files.headers(owner)
        )
    assert created.status_code == 201, created.text
    instance = created.json()["instanceId"]
    assert owner_worker(instance) == 0
    forged = instance[:-4] + ("AAAA" if not instance.endswith("AAAA") else "BBBB")
    spoof = {"x-tubemq-worker-hop": "0"}
    seen: list[tuple[int, str, str]] = []
    for _ in range(12):  # fresh connections: the kernel spreads them over both workers
        async with gateway.shared() as client:
            for which in (instance, forged):
                answer = await client.get(
                    f"/v1/consumers/{GROUP}/instances/{which}", headers={**files.headers(other), **spoof}
                )
                error = answer.json()["error"]
                seen.append((answer.status_code, error["code"], error.get("field", "")))
            mine = await client.get(
                f"/v1/consumers/{GROUP}/instances/{instance}", headers={**files.headers(owner), **spoof}
            )
            assert mine.status_code == 200, mine.text
    print(f"spoofed hop header, 24 requests for a genuine and a forged id: answers {sorted(set(seen))}")
    assert set(seen) == {(404, "not_found", "instanceId")}


def test_worker_metrics_on_the_private_socket_need_the_worker_token(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    transport = httpx.HTTPTransport(uds=str(gateway.socket_dir / "w1.sock"))
    with httpx.Client(transport=transport, base_url="http://worker-1", timeout=15.0) as client:
        bare = client.get(OWN_METRICS_PATH)
        as_admin = client.get(OWN_METRICS_PATH, headers=files.headers("root"))
        wrong = client.get(OWN_METRICS_PATH, headers={WORKER_TOKEN_HEADER: "0" * 64})
        print(f"/_worker/metrics without token: {bare.status_code}, admin key: {as_admin.status_code}")
        assert bare.status_code == 401 and as_admin.status_code == 404 and wrong.status_code == 401
        assert "tubemq_gateway" not in bare.text + as_admin.text + wrong.text
    # the replica's /metrics still merges both workers (the siblings scrape with the token)
    with httpx.Client(base_url=gateway.url, timeout=15.0) as client:
        merged = client.get("/metrics", headers=files.headers("root"))
    assert merged.status_code == 200
    assert 'tubemq_gateway_worker_up{worker="0"} 1.0' in merged.text
    assert 'tubemq_gateway_worker_up{worker="1"} 1.0' in merged.text
    assert worker_token("a") != worker_token("b")


def test_the_admin_listener_binds_loopback_unless_configured() -> None:
    assert Settings().admin.host == "127.0.0.1"
    assert Settings(admin={"host": "0.0.0.0"}).admin.host == "0.0.0.0"
