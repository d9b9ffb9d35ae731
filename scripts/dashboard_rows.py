"""The dashboard's rows on traffic: overview, publish and consume (``scripts/gen_dashboard.py``)."""

from __future__ import annotations

from dashboard_queries import (
    GROUP_LAG,
    LAG_WITHOUT_CONSUMER,
    POLL_ROUTE,
    PREFIX,
    PUBLISH_ROUTE,
    SEL,
    WORKER,
    Panel,
    Row,
    gauge,
    quantile,
    rate,
    replicas,
)


def overview_row() -> Row:
    """The Overview row."""
    return Row(
        "Overview",
        [
            Panel(
                "Ready replicas",
                "Gateway pods whose every worker process reports ready (master session, usable "
                "broker, not draining).",
                [(replicas("ready"), "ready")],
                kind="stat",
                width=4,
                height=4,
                extra={"thresholds": [("red", None), ("green", 1)]},
            ),
            Panel(
                "Publish rate",
                "Messages stored by TubeMQ brokers per second.",
                [(rate("published_messages_total"), "messages/s")],
                unit="ops",
                kind="stat",
                width=4,
                height=4,
            ),
            Panel(
                "Poll rate",
                "Messages handed to consumers per second.",
                [(rate("polled_messages_total"), "messages/s")],
                unit="ops",
                kind="stat",
                width=4,
                height=4,
            ),
            Panel(
                "Shielded brokers",
                "Brokers that some gateway pod stopped sending to after failures (see Brokers).",
                [
                    (
                        f"count (max by (broker_id) ({PREFIX}broker_shielded{{{SEL}}}) > 0) or vector(0)",
                        "shielded",
                    )
                ],
                kind="stat",
                width=4,
                height=4,
                extra={"thresholds": [("green", None), ("orange", 1)]},
            ),
            Panel(
                "Master sessions up",
                "Pods in which every worker's producer holds a registered master session.",
                [(replicas("master_session_up", match='role="producer"'), "up")],
                kind="stat",
                width=4,
                height=4,
                extra={"thresholds": [("red", None), ("green", 1)]},
            ),
            Panel(
                "Consumer instances",
                "Consumer instances held by the gateway pods.",
                [(gauge("consumer_instances"), "instances")],
                kind="stat",
                width=4,
                height=4,
            ),
        ],
    )


def publish_row() -> Row:
    """The Publish row."""
    publish_errors = rate("publish_errors_total", "topic")
    publish_attempts = f"({rate('published_messages_total', 'topic')} + {publish_errors})"
    return Row(
        "Publish",
        [
            Panel(
                "Published messages by topic",
                "Messages stored per second, by topic.",
                [(rate("published_messages_total", "topic"), "{{topic}}")],
                unit="ops",
            ),
            Panel(
                "Published bytes by topic",
                "Message bytes (body and attributes) stored per second, by topic.",
                [(rate("published_bytes_total", "topic"), "{{topic}}")],
                unit="Bps",
            ),
            Panel(
                "Publish error ratio by topic",
                "Failed send attempts over all send attempts, by topic.",
                [(f"{publish_errors} / {publish_attempts}", "{{topic}}")],
                unit="percentunit",
            ),
            Panel(
                "Publish errors by reason",
                "Failed send attempts per second: rejected (error code), unavailable (503), transport.",
                [(rate("publish_errors_total", "topic, reason"), "{{topic}} {{reason}}")],
                unit="ops",
            ),
            Panel(
                "Send latency",
                "Time of one send attempt to a broker.",
                [
                    (quantile(0.5, "publish_send_duration_seconds"), "p50"),
                    (quantile(0.99, "publish_send_duration_seconds"), "p99"),
                ],
                unit="s",
            ),
            Panel(
                "Publish request latency",
                "HTTP publish requests, end to end (p99).",
                [
                    (
                        quantile(0.99, "http_request_duration_seconds", match=f'route="{PUBLISH_ROUTE}"'),
                        "p99",
                    )
                ],
                unit="s",
            ),
        ],
    )


def consume_row() -> Row:
    """The Consume row."""
    return Row(
        "Consume",
        [
            Panel(
                "Polled messages by group and topic",
                "Messages handed to consumers per second.",
                [(rate("polled_messages_total", "group, topic"), "{{group}} {{topic}}")],
                unit="ops",
            ),
            Panel(
                "Polled bytes by group and topic",
                "Message bytes handed to consumers per second.",
                [(rate("polled_bytes_total", "group, topic"), "{{group}} {{topic}}")],
                unit="Bps",
            ),
            Panel(
                "Consumer lag",
                "Messages stored but not yet consumed, by group and topic, from TubeMQ's own offsets "
                "(stays while nobody consumes; every pod that served the group reports it: max); where "
                "the web API cannot be read, the gateway consumers' own figure.",
                [(GROUP_LAG, "{{group}} {{topic}}")],
            ),
            Panel(
                "Lag per partition",
                "Messages not yet consumed per partition (brokerId:partitionId), from TubeMQ's offsets.",
                [
                    (
                        gauge("group_partition_lag_messages", agg="max", by="group, topic, partition"),
                        "{{group}} {{topic}} {{partition}}",
                    )
                ],
            ),
            Panel(
                "Groups with lag and no consumer",
                "Groups holding unconsumed messages while the TubeMQ master lists no consumer in them "
                "(alert TubeMQGatewayGroupLagNoConsumer).",
                [(LAG_WITHOUT_CONSUMER, "{{group}} {{topic}}")],
            ),
            Panel(
                "Commits and redeliveries",
                "Offset commits per second by result, and batches handed back for redelivery.",
                [
                    (
                        rate("commits_total", "group, result"),
                        "{{group}} commit {{result}}",
                    ),
                    (rate("redeliveries_total", "group"), "{{group}} redelivered"),
                ],
                unit="ops",
            ),
            Panel(
                "Nacks, retries and dead letters",
                "Per-message redelivery per second: messages clients nacked, deadlines that passed "
                "uncommitted, copies stored in the retry topic and in the dead-letter topic, and messages of "
                "a retry topic set aside (not copies the gateway signed for the group: published there by "
                "another client, or signed with a secret no longer configured).",
                [
                    (rate("nacks_total", "group"), "{{group}} nacked"),
                    (rate("deadlines_expired_total", "group"), "{{group}} deadline passed"),
                    (rate("retries_published_total", "group"), "{{group}} retried"),
                    (rate("dead_letters_total", "group"), "{{group}} dead-lettered"),
                    (rate("retry_copies_set_aside_total", "group"), "{{group}} set aside"),
                ],
                unit="ops",
            ),
            Panel(
                "Fetch outcomes",
                "Broker reads per second by outcome (ok, empty, not_found, ...).",
                [(rate("fetches_total", "outcome"), "{{outcome}}")],
                unit="ops",
            ),
            Panel(
                "Consumer instances and partitions",
                "Consumer instances by group, and the partitions they hold.",
                [
                    (gauge("consumer_instances", by="group"), "{{group}} instances"),
                    (gauge("consumer_partitions", by="group"), "{{group}} partitions"),
                ],
            ),
            Panel(
                "Poll request duration",
                "HTTP long polls, end to end (long-lived histogram); a poll without messages lasts its "
                "timeout_ms, so this shows how long consumers wait, not how slow the gateway is.",
                [
                    (
                        quantile(q, "http_long_request_duration_seconds", match=f'route="{POLL_ROUTE}"'),
                        name,
                    )
                    for q, name in ((0.5, "p50"), (0.99, "p99"))
                ],
                unit="s",
                width=16,
            ),
            Panel(
                "Fetched ahead per worker",
                "Value bytes each worker process's consumer instances hold fetched from brokers and "
                "not delivered yet (batches fetched ahead of their clients' next polls, and what a poll "
                "left of a batch), against the cap of one worker (consumers.prefetch_worker_bytes). A "
                "worker at its cap fetches nothing more ahead: each poll of its consumers waits for a "
                "broker round trip again (alert TubeMQGatewayPrefetchBudgetFull).",
                [
                    (gauge("consumer_prefetch_bytes", agg="max", by=f"pod, {WORKER}"), "{{pod}} {{worker}}"),
                    (gauge("consumer_prefetch_cap_bytes", agg="max"), "cap of a worker"),
                ],
                unit="bytes",
            ),
        ],
    )
