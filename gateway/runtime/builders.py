"""Parts the runtime (and the workers' supervisor) build from the settings: the embedded cluster and the
upstream options it is reached with, the callers' quotas, and the signer of relayed client identities."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from gateway.config import Settings
from gateway.embedded.auth import ServerAuth
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.store import Retention
from gateway.embedded.topics import TopicSpec, load_topic_file, parse_topic_specs
from gateway.security.replica_subject import ReplicaSubjects, certificate_digest
from gateway.service.instance_counts import SharedInstanceCounts
from gateway.service.instance_id import normalize_base_url
from gateway.service.quotas import Quotas, RateLimits
from gateway.service.shared_spending import SharedSpending
from gateway.upstream import UpstreamOptions
from gateway.workers.context import WorkerContext

__all__ = [
    "build_quotas",
    "embedded_cluster",
    "embedded_topic_specs",
    "embedded_upstream",
    "replica_subjects",
]

log = logging.getLogger("gateway.runtime")
_N = TypeVar("_N", int, float)


def embedded_upstream(upstream: UpstreamOptions) -> UpstreamOptions:
    """The upstream options for the embedded cluster: it listens on loopback without TLS."""
    if upstream.ssl is None:
        return upstream
    log.warning(
        "tubemq.tls is on but no master is configured: the embedded cluster listens on "
        "loopback without TLS, so TLS is not used; set masters to reach a TLS cluster"
    )
    return replace(upstream, ssl=None, server_hostname=None)


def embedded_cluster(settings: Settings, upstream: UpstreamOptions) -> EmbeddedCluster:
    """The embedded cluster of ``settings.embedded`` (not started). With ``tubemq.auth`` set, it demands those
    credentials, as a real one would."""
    e = settings.embedded
    auth = ServerAuth(upstream.credentials) if upstream.credentials is not None else None
    return EmbeddedCluster(
        embedded_topic_specs(settings),
        brokers=e.brokers,
        data_dir=e.data_dir,
        auth=auth,
        retention=Retention(e.retention_bytes, e.retention_seconds),
        fsync=e.fsync,
    )


def embedded_topic_specs(settings: Settings) -> list[TopicSpec]:
    """The embedded cluster's topics: ``embedded.topics_file`` when set, else the ``embedded.topics`` list."""
    e = settings.embedded
    return load_topic_file(e.topics_file) if e.topics_file is not None else parse_topic_specs(e.topics)


def embedded_topic_advice(settings: Settings) -> Callable[[str], str]:
    """What to do about a missing topic when the gateway runs on its embedded cluster, which holds only the
    topics it was started with: start it with the topic added."""
    e = settings.embedded
    if e.topics_file is not None:
        return lambda topic: (
            f"this gateway runs on its embedded cluster, which holds only the topics it started with: add "
            f"{topic!r} to embedded.topics_file ({e.topics_file}) and restart it"
        )
    return lambda topic: (
        f"this gateway runs on its embedded cluster, which holds only the topics it started with "
        f"({e.topics}): restart it with the topic added, e.g. serve --embedded-topics {e.topics},{topic}:1 "
        "(or TUBEMQ_GATEWAY_EMBEDDED__TOPICS)"
    )


def build_quotas(settings: Settings, worker: WorkerContext | None = None) -> Quotas:
    """The callers' limits from ``settings.rate_limits`` (an override's missing fields take the default);
    consumer instances are counted, and what each caller spent of its publish rates shared, with the sibling
    workers of ``worker`` (per replica)."""
    r = settings.rate_limits
    default = RateLimits(
        publish_messages_per_second=r.publish_messages_per_second,
        publish_bytes_per_second=r.publish_bytes_per_second,
        burst_seconds=r.burst_seconds,
        max_instances=r.max_instances_per_principal,
    )
    overrides = {
        name: RateLimits(
            publish_messages_per_second=_pick(o.publish_messages_per_second, r.publish_messages_per_second),
            publish_bytes_per_second=_pick(o.publish_bytes_per_second, r.publish_bytes_per_second),
            burst_seconds=o.burst_seconds if o.burst_seconds is not None else r.burst_seconds,
            max_instances=_pick(o.max_instances_per_principal, r.max_instances_per_principal),
        )
        for name, o in r.overrides.items()
    }
    if worker is None:
        return Quotas(default, overrides, max_callers=r.max_tracked_callers)
    return Quotas(
        default,
        overrides,
        max_callers=r.max_tracked_callers,
        instances=SharedInstanceCounts(worker.socket_dir / "instances", worker.index),
        spending=SharedSpending(worker.socket_dir, worker.index, worker.count),
    )


def _pick(override: _N | None, default: _N | None) -> _N | None:
    return default if override is None else override


def replica_subjects(settings: Settings) -> ReplicaSubjects:
    """Signs and verifies the client certificate subjects relayed between replicas
    (:mod:`gateway.security.replica_subject`): with the replicas' shared secret, for this replica's advertised
    URL, bound to the certificate it presents to the others (only when its listeners ask clients for one:
    ``tls.client_auth``; else it signs nothing, as it presents nothing)."""
    tls = settings.tls
    own = None
    if tls.client_auth != "none" and tls.cert_file is not None and tls.key_file is not None:
        own = certificate_digest(tls.cert_file.read_text(encoding="ascii", errors="replace"))
    return ReplicaSubjects(
        settings.consumers.id_secret.encode("utf-8"), normalize_base_url(settings.advertised_url()), own
    )
