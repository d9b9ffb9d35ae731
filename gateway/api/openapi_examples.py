"""An example for every operation of the OpenAPI document: its request body (where it takes one), its success
answer and its typical error, taken from a gateway serving ``./scripts/run.sh`` (topic ``demo``).

``tests/docs/test_openapi.py`` checks that every operation has them and that each example is valid against the
schema it illustrates; ``openapi_doc.complete_openapi`` puts them in the document.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["OPERATION_EXAMPLES", "add_examples"]

_INSTANCE = "aHR0cDovL2xvY2FsaG9zdDo4MDgw.EnytENYoMqzxd80sJbbgcA.KWcc0lyDVsLRF-2N"
_BASE_URL = f"http://localhost:8080/v1/consumers/orders-etl/instances/{_INSTANCE}"
_REQUEST_ID = "d4f704af9c6d4b570000000000000002"


def _error(code: str, message: str, **fields: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **fields}, "requestId": _REQUEST_ID}


_BAD_TOPIC = _error(
    "invalid_argument",
    "invalid topic name '1x': use 2-64 ASCII letters, digits or '_', starting with a letter",
    field="topic",
)
_GONE = _error(
    "gone",
    f"consumer instance {_INSTANCE} is gone (deleted); create a new instance with POST "
    "/v1/consumers/orders-etl",
)
_CONSUMED: Final = {
    "token": "1",
    "topic": "demo",
    "partitionKey": "1:demo:10000",
    "brokerId": 1,
    "partitionId": 10000,
    "offset": None,
    "messageId": "3002347702949249024",
    "key": "customer-42",
    "streamId": None,
    "msgTime": None,
    "attributes": {"region": "eu"},
    "deliveryAttempt": 1,
    "deadline": 1795000000000,
    "encoding": "utf8",
    "value": "hello",
}
#: two partitions of demo as the embedded default deploys it: one per store, ids store * 10000
_PARTITIONS: Final = [{"partitionKey": f"1:demo:{i}", "brokerId": 1, "partitionId": i} for i in (0, 10000)]

#: a push subscription as created (docs/push.md)
_DEFINITION: Final = {
    "name": "orders-hook",
    "group": "orders-push",
    "topics": ["demo"],
    "endpoint": "https://hooks.example.com/tubemq",
    "retryTopic": "demo_retry",
    "deadLetterTopic": "demo_dlq",
    "maxDeliveryAttempts": 5,
    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
}
#: the same as answered: no secret, every field with its value, where it is defined and its state here
_SUBSCRIPTION: Final = {
    "name": "orders-hook",
    "group": "orders-push",
    "topics": {"demo": []},
    "endpoint": "https://hooks.example.com/tubemq",
    "payload": "wrapped",
    "valueFormat": "base64",
    "startPosition": "latest",
    "ackDeadlineMs": 10000,
    "minBackoffMs": 1000,
    "maxBackoffMs": 60000,
    "retryTopic": "demo_retry",
    "maxConcurrency": 16,
    "orderedByKey": False,
    "hasSecret": True,
    "token": False,
    "paused": False,
    "deadLetterTopic": "demo_dlq",
    "maxDeliveryAttempts": 5,
    "source": "api",
    "state": {
        "status": "running",
        "inFlight": 2,
        "deliveries": {"acked": 1520, "timeout": 3},
        "lastOutcome": "acked",
        "lastDeliveryAt": "2026-12-02T11:02:03.456+00:00",
    },
}
_STARTED: Final = {"status": "running", "inFlight": 0, "deliveries": {}}
_NO_SUBSCRIPTION = _error("not_found", "no push subscription 'orders-hook'")
_FILE_DEFINED = _error(
    "already_defined",
    "push subscription 'orders-hook' is defined in /etc/tubemq-gateway/subscriptions.json; change it there "
    "(the API changes only the subscriptions it made)",
    field="name",
)

#: operationId -> {"request": body, "responses": {status: body}}; a str body is a text media type's example
OPERATION_EXAMPLES: Final[dict[str, dict[str, Any]]] = {
    "publishMessages": {
        "request": {
            "messages": [
                {"value": "hello", "key": "customer-42", "attributes": {"region": "eu"}},
                {"value": {"any": "json"}, "encoding": "json", "streamId": "orders"},
            ]
        },
        "responses": {
            "200": {
                "topic": "demo",
                "results": [
                    {
                        "index": 0,
                        "status": 200,
                        "partition": 1,
                        "partitionKey": "1:demo:10000",
                        "brokerId": 1,
                        "partitionId": 10000,
                        "offset": 0,
                        "messageId": "3002347702949249024",
                        "appendTime": 1795731471903,
                    },
                    {
                        "index": 1,
                        "status": 200,
                        "partition": 3,
                        "partitionKey": "1:demo:30000",
                        "brokerId": 1,
                        "partitionId": 30000,
                        "offset": 28,
                        "messageId": "3002347503090663424",
                        "appendTime": 1795731471903,
                    },
                ],
            },
            "400": _error(
                "invalid_argument",
                "encoding must be utf8, base64 or json, got 'x'",
                field="messages[1].encoding",
                index=1,
            ),
        },
    },
    "getTopic": {
        "responses": {
            "200": {
                "topic": "demo",
                "maxMessageSize": 1048576,
                "partitions": [
                    {**p, "index": i, "broker": "127.0.0.1:18123"} for i, p in enumerate(_PARTITIONS)
                ],
                "shieldedBrokers": [],
            },
            "400": _BAD_TOPIC,
        },
    },
    "createConsumer": {
        "request": {"topics": ["demo"], "startPosition": "earliest"},
        "responses": {
            "201": {
                "instanceId": _INSTANCE,
                "baseUrl": _BASE_URL,
                "group": "orders-etl",
                "autoCommit": False,
            },
            "404": _error(
                "not_found",
                "retryTopic 'orders_retry' has no publishable partition: create topic 'orders_retry' in "
                "TubeMQ (deployed on a broker that accepts publishing and subscribing), then create the "
                "instance",
                field="retryTopic",
            ),
            "400": _error(
                "invalid_argument",
                "startPosition: Input should be 'latest', 'earliest' or 'offsets'",
                field="startPosition",
            ),
        },
    },
    "pollMessages": {"responses": {"200": {"messages": [_CONSUMED]}, "410": _GONE}},
    "commitMessages": {
        "request": {"tokens": ["1"]},
        "responses": {
            "200": {"committed": 1, "rolledBack": 0, "stale": [], "pending": 0, "awaitingBatch": 0},
            "400": _error("invalid_argument", "tokens: Input should be a valid list", field="tokens"),
        },
    },
    "nackMessages": {
        "request": {"tokens": ["1"], "delayMs": 5000},
        "responses": {
            "200": {"retried": 1, "deadLettered": 0, "stale": [], "failed": [], "error": None, "pending": 0},
            "400": _error(
                "invalid_argument",
                "this instance has no retry topic: create it with retryTopic to nack single messages (or "
                "roll back whole batches with a commit of consumed false)",
                field="tokens",
            ),
        },
    },
    "extendDeadlines": {
        "request": {"tokens": ["1"], "extendMs": 60000},
        "responses": {
            "200": {"extended": 1, "stale": [], "deadline": 1795000060000},
            "400": _error(
                "invalid_argument", "extendMs: the extension must be 1 to 600000 ms", field="extendMs"
            ),
        },
    },
    "seekPartitions": {
        "request": {"position": "offsets", "offsets": {"1:demo:10000": 560}},
        "responses": {
            "200": {"partitions": [{"partitionKey": "1:demo:10000", "currOffset": 560, "maxOffset": 2800}]},
            "400": _error(
                "invalid_argument",
                "this instance does not hold partitions ['1:demo:0'] (its partitions are listed by GET on "
                "the instance; the retry topic's cannot be moved)",
                field="offsets",
            ),
        },
    },
    "getGroupLag": {
        "responses": {
            "200": {
                "group": "orders-etl",
                "consumers": 0,
                "lag": 40,
                "topics": [
                    {
                        "topic": "demo",
                        "lag": 40,
                        "partitions": [
                            {
                                "partitionKey": "1:demo:0",
                                "brokerId": 1,
                                "partitionId": 0,
                                "committedOffset": 280,
                                "endOffset": 1400,
                                "lag": 40,
                                "oldestUnconsumedMsgTime": "202611262300",
                            }
                        ],
                    }
                ],
                "source": "tubemq",
            },
            "404": _error(
                "not_found",
                "consumer group 'orders-etl' holds no offset on any broker: it never committed, its offsets "
                "were removed, or the topics it consumes are not yours to see",
                field="group",
            ),
        }
    },
    "streamMessages": {
        "responses": {
            "200": "retry: 1000\n\nid: 1\ndata: "
            '{"token":"1","topic":"demo","partitionKey":"1:demo:10000","brokerId":1,"partitionId":1,'
            '"offset":null,"messageId":"3002347702949249024","key":"customer-42","streamId":null,'
            '"msgTime":null,"attributes":{"region":"eu"},"deliveryAttempt":1,"deadline":1795000000000,'
            '"encoding":"utf8","value":"hello"}\n\n',
            "410": _GONE,
        }
    },
    "describeConsumer": {
        "responses": {
            "200": {
                "instanceId": _INSTANCE,
                "baseUrl": _BASE_URL,
                "group": "orders-etl",
                "autoCommit": False,
                "partitions": [
                    {**p, "topic": "demo", "currOffset": 56, "maxOffset": 56, "inUse": False}
                    for p in _PARTITIONS
                ],
                "pendingMessages": 0,
                "bufferedMessages": 0,
            },
            "410": _GONE,
        }
    },
    "deleteConsumer": {"responses": {"410": _GONE}},
    "listTopics": {
        "responses": {
            "200": {
                "topics": [
                    {
                        "topic": "demo",
                        "partitions": 4,
                        "brokerIds": [1],
                        "shieldedBrokers": [],
                        "publishedMessages": 1,
                        "publishedBytes": 29,
                        "publishErrors": 0,
                    }
                ],
                "brokers": [
                    {
                        "brokerId": 1,
                        "broker": "127.0.0.1:18123",
                        "state": "closed",
                        "reason": None,
                        "shieldedForSeconds": 0.0,
                        "consecutiveFailures": 0,
                        "sends": 1,
                        "successes": 1,
                        "partitions": 4,
                    }
                ],
            }
        }
    },
    "listConsumers": {
        "responses": {
            "200": {
                "instances": [
                    {
                        "instanceId": _INSTANCE,
                        "group": "orders-etl",
                        "owner": "anonymous",
                        "worker": None,
                        "topics": {"demo": []},
                        "autoCommit": False,
                        "pendingMessages": 1,
                        "bufferedMessages": 0,
                        "idleSeconds": 0.166,
                        "lag": 2,
                        "partitions": [
                            {
                                **p,
                                "topic": "demo",
                                "store": f"1:demo:{int(p['partitionId']) // 10000}",
                                "currOffset": 0,
                                "maxOffset": 28,
                                "readPosition": 0,
                                "deliveredTo": 28,
                                "endOffset": 28,
                                "lag": 1,
                                "inUse": False,
                            }
                            for p in _PARTITIONS
                        ],
                    }
                ],
                "groups": [
                    {
                        "group": "orders-etl",
                        "consumers": 1,
                        "readAt": 1795730000000,
                        "lag": 2,
                        "partitions": [
                            {
                                **p,
                                "topic": "demo",
                                "store": f"1:demo:{int(p['partitionId']) // 10000}",
                                "committedOffset": 0,
                                "endOffset": 28,
                                "lag": 1,
                            }
                            for p in _PARTITIONS
                        ],
                    }
                ],
                "incompleteWorkers": [],
            }
        }
    },
    "liveness": {"responses": {"200": {"status": "ok"}}},
    "listSubscriptions": {"responses": {"200": {"subscriptions": [_SUBSCRIPTION]}}},
    "getSubscription": {"responses": {"200": _SUBSCRIPTION, "404": _NO_SUBSCRIPTION}},
    "createSubscription": {
        "request": _DEFINITION,
        "responses": {"201": {**_SUBSCRIPTION, "state": _STARTED}, "409": _FILE_DEFINED},
    },
    "replaceSubscription": {
        "request": {**_DEFINITION, "maxConcurrency": 32},
        "responses": {"200": {**_SUBSCRIPTION, "maxConcurrency": 32}, "409": _FILE_DEFINED},
    },
    "deleteSubscription": {"responses": {"404": _NO_SUBSCRIPTION, "409": _FILE_DEFINED}},
    "pauseSubscription": {
        "responses": {
            "200": {
                **_SUBSCRIPTION,
                "paused": True,
                "state": {"status": "paused", "inFlight": 0, "deliveries": {}},
            },
            "409": _FILE_DEFINED,
        }
    },
    "resumeSubscription": {
        "responses": {"200": {**_SUBSCRIPTION, "state": _STARTED}, "404": _NO_SUBSCRIPTION}
    },
    "getPushKeys": {
        "responses": {
            "200": {
                "keys": [
                    {
                        "kty": "EC",
                        "crv": "P-256",
                        "x": "nWRakzA8ugadQYkRDQbpcs5N7KI0jL7eG5HmRjtnLAM",
                        "y": "5dIdNsEX1sLHJbxOqumKxlcD_5ELKvmkLoDFNr6lbmE",
                        "kid": "qzt7c-DyQOFXRqXR3R5kfnOaRq-xOo_zXCxXmP3wDbc",
                        "alg": "ES256",
                        "use": "sig",
                    }
                ]
            }
        }
    },
    "readiness": {
        "responses": {
            "200": {
                "ready": True,
                "checks": {
                    "draining": False,
                    "auth": "open",
                    "masterSession": True,
                    "masterFailures": 0,
                    "usableRoutes": 1,
                    "usableBrokers": 1,
                },
            }
        }
    },
    "getPartitionOffsets": {
        "responses": {
            "200": {
                "topic": "demo",
                "partitions": [
                    {**p, "broker": "127.0.0.1:18123", "minOffset": 0, "maxOffset": 56} for p in _PARTITIONS
                ],
            },
            "400": _BAD_TOPIC,
        }
    },
    "readRange": {
        "responses": {
            "200": {
                "topic": "demo",
                "partitionKey": "1:demo:10000",
                "from": 0,
                "to": 56,
                "next": 56,
                "messages": [
                    {
                        "messageId": "3002347702949249024",
                        "offset": None,
                        "value": "aGVsbG8=",
                        "key": "customer-42",
                        "attributes": {"region": "eu"},
                        "streamId": None,
                        "msgTime": None,
                    }
                ],
            },
            "400": _BAD_TOPIC,
        }
    },
    "metrics": {
        "responses": {
            "200": "# HELP tubemq_gateway_published_messages_total Messages stored by a broker.\n"
            "# TYPE tubemq_gateway_published_messages_total counter\n"
            'tubemq_gateway_published_messages_total{topic="demo"} 2.0\n'
        }
    },
}


def add_examples(operation: dict[str, Any]) -> None:
    """Put the operation's examples under its JSON request body and its answers' first media type."""
    examples = OPERATION_EXAMPLES.get(operation.get("operationId", ""))
    if examples is None:
        return
    if "request" in examples:
        body = operation["requestBody"]["content"]["application/json"]
        body["example"] = examples["request"]
    for status, example in examples["responses"].items():
        content = operation["responses"][status].setdefault("content", {})
        media_type = next(iter(content))
        content[media_type]["example"] = example
