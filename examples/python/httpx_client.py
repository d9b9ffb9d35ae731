"""tubemq-gateway from Python with httpx: publish, consume with commits, stream with Server-Sent Events and
resume after a cut, handle a 4xx. Next to ./scripts/run.sh:  pip install httpx && python httpx_client.py

GW (default http://localhost:8080), GW_TOKEN (an API key or JWT, sent as a bearer token) and TOPIC (default
demo) change what it talks to.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

GW = os.environ.get("GW", "http://localhost:8080")
TOPIC = os.environ.get("TOPIC", "demo")
TOKEN = os.environ.get("GW_TOKEN")


class GatewayError(Exception):
    """An error answer: {"error": {"code", "message", "field", ...}, "requestId"}."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body["error"]
        super().__init__(f"{status} {error['code']} at {error.get('field')}: {error['message']}")
        self.status, self.code, self.field = status, error["code"], error.get("field")
        self.request_id = body.get("requestId")


def call(client: httpx.Client, method: str, url: str, body: Any = None) -> Any:
    """One call; 503 and 429 are retried after their Retry-After."""
    for attempt in range(1, 6):
        answer = client.request(method, url, json=body)
        if answer.status_code == 204:
            return None
        if answer.is_success:
            return answer.json()
        if answer.status_code in (429, 503) and attempt < 5:
            time.sleep(max(float(answer.headers.get("retry-after", 1)), 1.0))
            continue
        raise GatewayError(answer.status_code, answer.json())
    raise AssertionError("unreachable")


def stream(client: httpx.Client, url: str, key: str, values: list[str], want: int, last: str | None) -> str:
    """Reads the event stream (after event ``last``) until ``values`` holds ``want`` values of ``key``,
    committing each event by its id (the commit token); returns the last event id."""
    headers = {"accept": "text/event-stream"} | ({"last-event-id": last} if last else {})
    with client.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=60)) as answer:
        if answer.status_code != 200:
            raise GatewayError(answer.status_code, json.loads(answer.read()))
        event_id, data = last, ""
        for line in answer.iter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                message, data = json.loads(data), ""
                if message["key"] == key:
                    values.append(message["value"])
                call(client, "POST", url.split("/stream")[0] + "/commits", {"tokens": [event_id]})
                if len(values) >= want:
                    assert event_id is not None
                    return event_id
    raise RuntimeError(f"the stream ended with {values}")


def main() -> None:
    headers = {"authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    run = f"py-{os.getpid()}-{int(time.time() * 1000)}"
    with httpx.Client(headers=headers, timeout=30) as client:
        # 1. publish: 200 = a broker stored every message; messageId is a decimal string
        messages = [{"value": f"hello {i}", "key": run} for i in (1, 2, 3)]
        published = call(client, "POST", f"{GW}/v1/topics/{TOPIC}/messages", {"messages": messages})
        print("published", len(published["results"]), "ids", [r["messageId"] for r in published["results"]])

        # 2. consume in a new group from the earliest message, committing what each poll delivered
        start = {"topics": [TOPIC], "startPosition": "earliest"}
        base_url = call(client, "POST", f"{GW}/v1/consumers/examples-{run}", start)["baseUrl"]
        received: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while len(received) < 3:
                assert time.monotonic() < deadline, f"received {received}"
                poll = call(client, "GET", f"{base_url}/messages?format=utf8&timeout_ms=5000&max_messages=500")
                received += [m["value"] for m in poll["messages"] if m["key"] == run]
                if poll["messages"]:
                    tokens = [m["token"] for m in poll["messages"]]
                    commit = call(client, "POST", f"{base_url}/commits", {"tokens": tokens})
                    print("committed", commit["committed"], "stale", len(commit["stale"]))
        finally:
            call(client, "DELETE", base_url)
        print("consumed", received)
        assert received == ["hello 1", "hello 2", "hello 3"], received

        # 3. Server-Sent Events: cut the stream after our first message, resume with Last-Event-ID
        base_url = call(client, "POST", f"{GW}/v1/consumers/examples-sse-{run}", start)["baseUrl"]
        sse = [{"value": v, "key": f"{run}-sse"} for v in ("one", "two", "three")]
        call(client, "POST", f"{GW}/v1/topics/{TOPIC}/messages", {"messages": sse})
        streamed: list[str] = []
        last = stream(client, f"{base_url}/stream?format=utf8", f"{run}-sse", streamed, 1, None)
        print("cut after event", last)
        if len(streamed) < 3:
            stream(client, f"{base_url}/stream?format=utf8", f"{run}-sse", streamed, 3, last)
        print("streamed", streamed)
        assert streamed == ["one", "two", "three"], streamed
        call(client, "DELETE", base_url)

        # 4. a 4xx: the error body names the field at fault
        try:
            bad = {"messages": [{"value": "x", "encoding": "hex"}]}
            call(client, "POST", f"{GW}/v1/topics/{TOPIC}/messages", bad)
            raise AssertionError("an invalid encoding was accepted")
        except GatewayError as error:
            assert error.status == 400, error
            print(f"400 as expected: {error} (request {error.request_id})")
    print("httpx example: OK")


if __name__ == "__main__":
    main()
