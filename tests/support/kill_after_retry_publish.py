"""A gateway process that dies by SIGKILL right after a broker acknowledged a nacked message's retry copy,
before the message is settled (its batch confirmed): the case "a gateway killed between the retry publish and
the confirm loses nothing" of tests/service/test_consumer_redelivery.py and the interop suite.

    python tests/support/kill_after_retry_publish.py MASTER GROUP TOPIC RETRY_TOPIC VALUE_PREFIX

It joins GROUP (earliest) with a consumer service and a producer of its own on MASTER, polls until a message
whose value starts with VALUE_PREFIX arrives (committing every other one), prints one JSON line
``{"event": "nacking", ...}`` and nacks it; the retry publish is followed at once by SIGKILL of this
process (no unregister, no goodbye: the brokers and the master find out by their timeouts)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.delivered import DeliveredMessage
from gateway.service.instance_redelivery import Redeliverer
from gateway.tubemq.address import parse_address_list
from gateway.tubemq.consumer import ConsumerConfig
from gateway.tubemq.net import ConnectionPool
from gateway.tubemq.producer import Producer, ProducerConfig


async def main(master: str, group: str, topic: str, retry: str, prefix: str) -> None:
    original = Redeliverer._republish

    async def publish_then_die(self: Redeliverer, d: DeliveredMessage, delay: float, why: str) -> bool:
        dead = await original(self, d, delay, why)  # returns once a broker stored the copy
        print(json.dumps({"event": "published", "dead": dead}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    Redeliverer._republish = publish_then_die  # type: ignore[method-assign]
    masters = parse_address_list(master)
    pool = ConnectionPool()
    producer = Producer(masters, pool=pool, config=ProducerConfig(heartbeat_interval=0.5))
    await producer.start()
    config = ConsumerConfig(heartbeat_interval=0.5, broker_heartbeat_interval=0.5, rpc_timeout=5.0)
    service = ConsumerService(
        masters, pool, advertised_url="http://127.0.0.1:9", consumer_config=config, republisher=producer
    )
    await service.start()
    spec = InstanceSpec({topic: None}, start_position="earliest", retry_topic=retry)
    instance = (await service.create(group, spec)).instance_id
    while True:
        got = await service.poll(group, instance, timeout=1.0)
        mine = [m for m in got if m.message.body.decode(errors="replace").startswith(prefix)]
        others = [m.token for m in got if m not in mine]
        if others:
            await service.commit(group, instance, others)
        if mine:
            print(json.dumps({"event": "nacking", "value": mine[0].message.body.decode()}), flush=True)
            await service.nack(group, instance, [mine[0].token])
            raise AssertionError("the nack returned: the process should have died")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
