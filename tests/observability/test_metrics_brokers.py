"""Which broker is bad? Send attempts, reads and TubeMQ requests carry the broker id or node address (capped,
with an outcome and nothing else): a real producer and consumer on a two-broker embedded cluster, one broker
stopped mid-way, and the per-broker series name it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.observability.metrics import GatewayMetrics
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.consumer.events import FetchOutcome
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.events import SendCompleted
from tests.support.consumer_support import drain, fast
from tests.support.waiting import eventually

P = "tubemq_gateway_"
SEND_OUTCOMES = ("ok", "rejected", "unavailable", "transport")


def _value(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(P + name, labels)
    assert found is not None, f"no series {name}{labels}"
    return found


def _failed_sends(metrics: GatewayMetrics, broker: str) -> float:
    return sum(_value(metrics, "broker_sends_total", broker_id=broker, outcome=o) for o in SEND_OUTCOMES[1:])


async def test_the_stopped_broker_is_the_one_named() -> None:
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    bus = EventBus()
    metrics.subscribe(bus)
    pool = ConnectionPool(connect_timeout=1.0, events=bus)
    config = ProducerConfig(heartbeat_interval=60.0, failure_cooldown=60.0, send_timeout=3.0)
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=2, balance_period=0.1) as cluster:
        producer = Producer([cluster.master_address], pool=pool, config=config, events=bus)
        consumer = Consumer(
            [cluster.master_address],
            "readers",
            {"demo": None},
            pool=pool,
            config=fast(start_position=StartPosition.EARLIEST),
            events=bus,
        )
        try:
            await producer.start()
            await producer.register_topic("demo")
            for i in range(20):
                await producer.send("demo", f"before-{i}".encode())
            for broker in ("1", "2"):  # both brokers took sends, none failed
                assert _value(metrics, "broker_sends_total", broker_id=broker, outcome="ok") > 0
                assert _failed_sends(metrics, broker) == 0
                assert _value(metrics, "broker_shielded", broker_id=broker) == 0
            master = str(cluster.master_address)
            assert _value(metrics, "node_requests_total", node=master, outcome="ok") > 0
            assert _value(metrics, "node_requests_total", node=master, outcome="timeout") == 0

            await consumer.start()
            assert await consumer.wait_for_assignment(5.0)
            read = await drain(consumer, 20)
            assert sum(len(batch.messages) for batch in read) == 20
            for broker in ("1", "2"):
                assert _value(metrics, "broker_fetches_total", broker_id=broker, outcome="ok") > 0
                assert _value(metrics, "broker_fetches_total", broker_id=broker, outcome="transport") == 0
            await consumer.close()

            broker2 = str(cluster.broker(2).address)
            await cluster.stop_broker(2)
            for i in range(40):  # every send still succeeds: on broker 1 once broker 2 is shielded
                await producer.send("demo", f"after-{i}".encode())
            await eventually(lambda: _value(metrics, "broker_shielded", broker_id="2") == 1)
            assert _failed_sends(metrics, "2") > 0, "the failed attempts are broker 2's"
            assert _failed_sends(metrics, "1") == 0 and _value(metrics, "broker_shielded", broker_id="1") == 0
            node_failures = sum(
                _value(metrics, "node_requests_total", node=broker2, outcome=o)
                for o in ("remote_exception", "timeout", "closed", "protocol_error", "cancelled")
            )
            connect_failures = _value(metrics, "pool_connect_failures_total", node=broker2)
            assert node_failures + connect_failures > 0, "broker 2's address shows its failures"
        finally:
            await consumer.close()
            await producer.close()
            await pool.close()


def test_per_broker_series_start_at_zero_and_odd_outcomes_are_transport() -> None:
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    bus = EventBus()
    metrics.subscribe(bus)
    bus.emit(SendCompleted("demo", 7, "ok", 0.001, None, 10))
    assert _value(metrics, "broker_sends_total", broker_id="7", outcome="ok") == 1
    for outcome in SEND_OUTCOMES[1:]:  # a ratio's numerator exists before the first failure
        assert _value(metrics, "broker_sends_total", broker_id="7", outcome=outcome) == 0
    assert _value(metrics, "broker_fetches_total", broker_id="7", outcome="error") == 0
    assert _value(metrics, "broker_shielded", broker_id="7") == 0
    bus.emit(SendCompleted("demo", 7, "mystery", 0.001))
    assert _value(metrics, "broker_sends_total", broker_id="7", outcome="transport") == 1
    bus.emit(FetchOutcome("c", "g", "demo", "7:demo:3", "speed_limit", 452, 0, 0, 0.001))
    assert _value(metrics, "broker_fetches_total", broker_id="7", outcome="speed_limit") == 1


def test_a_broker_takes_one_label_value() -> None:
    """Sends, reads and shielding of one broker share its one capped label value."""
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    bus = EventBus()
    metrics.subscribe(bus)
    for _ in range(3):
        bus.emit(SendCompleted("demo", 1, "ok", 0.001, None, 10))
    bus.emit(FetchOutcome("c", "g", "demo", "1:demo:0", "ok", 200, 1, 1, 0.001))
    assert _value(metrics, "broker_sends_total", broker_id="1", outcome="ok") == 3
    assert repr(metrics.broker_ids) == "<LabelCap broker_id 1/256>"
