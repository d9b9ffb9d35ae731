"""tubemq-gateway from Python through a client generated from openapi.yaml by openapi-python-client:
publish, consume with commits, handle a 4xx. Next to ./scripts/run.sh (docs/clients.md, Python):

    pip install openapi-python-client==0.29.1
    openapi-python-client generate --path ../../openapi.yaml --meta none \
        --output-path tubemq_gateway_client --config openapi-python-client.yaml --overwrite
    python generated_client.py

GW (default http://localhost:8080), GW_TOKEN (an API key or JWT) and TOPIC (default demo) change what it
talks to. The generated package needs httpx and attrs.
"""

from __future__ import annotations

import os
import time

from tubemq_gateway_client import AuthenticatedClient
from tubemq_gateway_client.api.consumers import commit_messages, create_consumer, delete_consumer, poll_messages
from tubemq_gateway_client.api.topics import get_topic, publish_messages
from tubemq_gateway_client.models import (
    CommitRequest,
    CommitResponse,
    CreateConsumerRequest,
    CreateConsumerResponse,
    ErrorResponse,
    MessageIn,
    PollResponse,
    PublishRequest,
    PublishResponse,
)

GW = os.environ.get("GW", "http://localhost:8080")
TOPIC = os.environ.get("TOPIC", "demo")


def main() -> None:
    # Authorization: Bearer <GW_TOKEN>; for the x-api-key header instead:
    # AuthenticatedClient(base_url=GW, token=key, auth_header_name="x-api-key", prefix="")
    # A gateway with authentication off (./scripts/run.sh) ignores the token.
    client = AuthenticatedClient(base_url=GW, token=os.environ.get("GW_TOKEN", "none"), raise_on_unexpected_status=True)
    run = f"gen-{os.getpid()}-{int(time.time() * 1000)}"
    with client:
        # 1. publish: only `value` is required; messageId is a decimal string
        messages = [MessageIn(value=f"hello {i}", key=run) for i in (1, 2, 3)]
        published = publish_messages.sync(TOPIC, client=client, body=PublishRequest(messages=messages))
        assert isinstance(published, PublishResponse), published
        print("published", len(published.results), "ids", [r.message_id for r in published.results])

        # 2. consume in a new group from the earliest message, committing what each poll delivered
        group = f"examples-{run}"
        # enums are Literal types (literal_enums in openapi-python-client.yaml): plain strings, type-checked
        start = CreateConsumerRequest(topics=[TOPIC], start_position="earliest")
        created = create_consumer.sync(group, client=client, body=start)
        assert isinstance(created, CreateConsumerResponse), created
        instance = created.instance_id
        received: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while len(received) < 3:
                assert time.monotonic() < deadline, f"received {received}"
                poll = poll_messages.sync(
                    group, instance, client=client, format_="utf8", timeout_ms=5000, max_messages=500
                )
                assert isinstance(poll, PollResponse), poll
                received += [str(m.value) for m in poll.messages if m.key == run]
                if poll.messages:
                    tokens = CommitRequest(tokens=[m.token for m in poll.messages])
                    commit = commit_messages.sync(group, instance, client=client, body=tokens)
                    assert isinstance(commit, CommitResponse), commit
                    print("committed", commit.committed, "stale", len(commit.stale))
        finally:
            delete_consumer.sync_detailed(group, instance, client=client)
        print("consumed", received)
        assert received == ["hello 1", "hello 2", "hello 3"], received

        # 3. a 4xx: every error status parses as ErrorResponse, whose `error.field` names the culprit
        refused = get_topic.sync_detailed("1x", client=client)
        assert refused.status_code == 400 and isinstance(refused.parsed, ErrorResponse), refused
        error = refused.parsed.error
        print(f"400 as expected: {error.code} at {error.field}: {error.message} (request {refused.parsed.request_id})")
    print("generated client example: OK")


if __name__ == "__main__":
    main()
