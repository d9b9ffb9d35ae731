"""`helm test` smoke test of tubemq-gateway: publish one message through the release's Service, read it back
with a new consumer instance, delete the instance. Standard library only; runs in the gateway image.

Environment: GATEWAY_URL (the Service, http(s)://name:port), GATEWAY_TOPIC, GATEWAY_API_KEY (empty when
auth.mode is open), GATEWAY_TIMEOUT (seconds for the whole test), GATEWAY_CA_FILE (TLS: the CA that signs
the gateway's certificate), GATEWAY_CERT_FILE and GATEWAY_KEY_FILE (TLS client certificate, when asked).
Exit status 0 when the message came back, 1 otherwise, with what failed and what to check.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

URL = os.environ["GATEWAY_URL"].rstrip("/")
TOPIC = os.environ.get("GATEWAY_TOPIC", "demo")
KEY = os.environ.get("GATEWAY_API_KEY", "")
DEADLINE = time.monotonic() + float(os.environ.get("GATEWAY_TIMEOUT", "60"))


class Failed(Exception):
    pass


def _tls() -> ssl.SSLContext | None:
    ca = os.environ.get("GATEWAY_CA_FILE")
    if not URL.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=ca or None)
    # The certificate names the pods (forwarding needs that), not necessarily the Service: the chain is
    # verified, the host name is not.
    context.check_hostname = False
    cert = os.environ.get("GATEWAY_CERT_FILE")
    if cert:
        context.load_cert_chain(cert, os.environ.get("GATEWAY_KEY_FILE") or None)
    return context


TLS = _tls()


def call(method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    headers = {"Accept": "application/json"}
    if KEY:
        headers["Authorization"] = f"Bearer {KEY}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(URL + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=TLS) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    return status, json.loads(raw) if raw else None


def retrying(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``call``, again after a connection error or a 503 (pods still starting), until the deadline."""
    while True:
        try:
            status, answer = call(method, path, body)
        except OSError as error:
            status, answer = 0, str(error)
        if status not in (0, 503) or time.monotonic() > DEADLINE:
            return status, answer
        time.sleep(1.0)


def expect(status: int, wanted: int, answer: Any, what: str) -> None:
    if status == wanted:
        return
    hint = {
        0: "the Service does not answer: are the pods ready (kubectl get pods)?",
        401: "the API key was refused: check tests.apiKeySecret or the generated admin key",
        403: "the key's principal lacks a rule for this topic (auth.rules)",
        404: f"is topic {TOPIC!r} in TubeMQ? set tests.topic",
    }.get(status, "see the gateway's logs")
    raise Failed(f"{what}: HTTP {status} {json.dumps(answer)[:400]} ({hint})")


def main() -> None:
    marker = f"helm-test-{uuid.uuid4().hex}"
    group = f"helm-test-{uuid.uuid4().hex[:12]}"
    status, answer = retrying("POST", f"/v1/topics/{TOPIC}/messages", {"messages": [{"value": marker}]})
    expect(status, 200, answer, f"publish to {TOPIC}")
    result = answer["results"][0]
    print(f"published to {result['partitionKey']} at offset {result['offset']}", flush=True)
    spec = {
        "topics": [TOPIC],
        "startPosition": "offsets",
        "offsets": {result["partitionKey"]: result["offset"]},
        "sessionKey": group,
        "sourceCount": 1,
        "autoCommit": True,
    }
    status, answer = retrying("POST", f"/v1/consumers/{group}", spec)
    expect(status, 201, answer, f"create a consumer instance in group {group}")
    instance = f"/v1/consumers/{group}/instances/{answer['instanceId']}"
    try:
        while True:
            status, answer = call("GET", f"{instance}/messages?max_messages=100&timeout_ms=2000&format=utf8")
            expect(status, 200, answer, "poll")
            if any(m.get("value") == marker for m in answer["messages"]):
                print(f"read it back through consumer group {group}", flush=True)
                return
            if time.monotonic() > DEADLINE:
                raise Failed("poll: the published message did not come back in time (see the gateway's logs)")
    finally:
        with contextlib.suppress(OSError):
            call("DELETE", instance)


if __name__ == "__main__":
    try:
        main()
    except Failed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    except OSError as error:
        print(f"FAILED: {URL} cannot be reached: {error}", file=sys.stderr)
        sys.exit(1)
    except (ValueError, KeyError) as error:
        print(f"FAILED: {URL} answered something that is not the gateway's API: {error!r}", file=sys.stderr)
        sys.exit(1)
    print("OK: tubemq-gateway publishes and consumes", flush=True)
