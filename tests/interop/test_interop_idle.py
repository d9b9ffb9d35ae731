"""Idle-link reclaim against the real broker and master: links unused for ``pool.idle_timeout`` are closed,
and the next publish (REST and the client core) reconnects and succeeds."""

from __future__ import annotations

from interop_support import DEMO, real_gateway, require_topic, run_tag, wait_until

from gateway.tubemq.address import NodeAddress


async def test_idle_links_are_reclaimed_and_reopened() -> None:
    topic = require_topic(DEMO)
    tag = run_tag("idle")
    # master heartbeats far apart, so the master link idles as well
    async with real_gateway(pool={"idle_timeout": 1.0}, producer={"heartbeat_interval": 60.0}) as gw:
        pool = gw.runtime.pool
        producer = gw.runtime.producer
        assert pool is not None and producer is not None
        r = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-0"}]})
        assert r.status_code == 200, r.text
        topic_view = (await gw.http.get(f"/v1/topics/{topic}")).json()
        host, port = topic_view["partitions"][0]["broker"].rsplit(":", 1)
        broker = NodeAddress(host, int(port))
        assert pool.stats().nodes[broker].open_links == 1
        reclaims = pool.stats().idle_reclaims

        def reclaimed() -> bool:
            stats = pool.stats()
            node = stats.nodes.get(broker)
            return stats.idle_reclaims > reclaims and (node is None or node.open_links == 0)

        await wait_until(reclaimed, 30.0, "the idle broker link to be reclaimed", step=0.2)
        assert pool.stats().open_links == 0, pool.stats()

        # REST publish reconnects
        r = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-1"}]})
        assert r.status_code == 200, r.text
        assert pool.stats().nodes[broker].open_links == 1

        # and so does the core, after another reclaim
        reclaims = pool.stats().idle_reclaims
        await wait_until(reclaimed, 30.0, "the broker link to be reclaimed again", step=0.2)
        result = await producer.send(topic, f"{tag}-2".encode())
        assert result.partition_key.split(":")[1] == topic
        assert pool.stats().nodes[broker].open_links == 1
        assert pool.stats().connect_failures == 0
