"""What a commit promises on the real TubeMQ when its instance goes away: the broker confirms whole fetched
batches only, so an instance deleted with part of a batch committed sets the group's offset right after the
committed messages (a registration of the partition with that offset) before it leaves the group."""

from __future__ import annotations

import time

from interop_support import SOLO, group_name, real_gateway, require_topic, run_tag, start_offsets


async def test_a_new_instance_after_delete_gets_the_message_after_the_committed_ones() -> None:
    topic = require_topic(SOLO)
    tag = run_tag("kept")
    sent = [f"{tag}-{i}" for i in range(12)]
    async with real_gateway() as gw:
        # one request: the broker's memory cache holds all 12, so the first fetch reads them in one batch
        answer = await gw.http.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in sent]}
        )
        assert answer.status_code == 200, answer.text
        group = group_name("kept")
        # the group starts at this run's first message
        spec = {
            "topics": [topic],
            "startPosition": "offsets",
            "offsets": start_offsets(answer.json()["results"]),
        }

        async def first_of_run(base: str, most: int) -> list[dict[str, object]]:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                poll = await gw.http.get(
                    f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8", "max_messages": most}
                )
                assert poll.status_code == 200, poll.text
                if poll.json()["messages"]:
                    return list(poll.json()["messages"])
            raise AssertionError(f"no message of {tag} within 90 s")

        created = await gw.http.post(f"/v1/consumers/{group}", json=spec)
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        got = await first_of_run(base, 5)
        assert [m["value"] for m in got] == sent[:5]
        state = (await gw.http.get(base)).json()
        assert state["bufferedMessages"] > 0, state  # the rest of the fetched batch was not handed out
        commit = await gw.http.post(f"{base}/commits", json={"tokens": [m["token"] for m in got]})
        assert commit.status_code == 200, commit.text
        assert (commit.json()["committed"], commit.json()["pending"]) == (5, 0)
        assert (await gw.http.delete(base)).status_code in (200, 204)

        # no start position: the group's offset at the broker says where the next member starts
        created = await gw.http.post(f"/v1/consumers/{group}", json={"topics": [topic]})
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        again = await first_of_run(base, 100)
        while len(again) < len(sent) - 5:  # the broker may hand the rest out in more than one batch
            await gw.http.post(f"{base}/commits", json={})
            more = await first_of_run(base, 100)
            again += more
        print(f"after delete the next instance got {[m['value'] for m in again][:3]}...")
        assert [m["value"] for m in again] == sent[5:]
        assert {m["deliveryAttempt"] for m in again} == {1}
        if again[0]["offset"] is not None:  # known when its batch reached the end of the index
            assert again[0]["offset"] == got[4]["offset"] + 28  # type: ignore[operator]
        assert (await gw.http.delete(base)).status_code in (200, 204)
