"""One message sent alone: the rounds of ``batch.send_batch`` for a batch of one, without the
batch's lists, groups and gather.

A one-message publish is what a REST or gRPC request of one message makes, so this path runs once per such
request. The rules are the batch's, from the same functions: the partition (``send._choose``, or the calm
round robin of ``batch._choose_calmly`` when no broker is shielded and nothing failed lately), the breaker's
attempt count, the request template, the answer judged by ``batch._judge`` (success only on a broker's 200;
transport errors and retriable codes go to another round, avoiding what failed; other codes end the
message), the ``SendCompleted`` event of each round (``batch.report_round``), at most ``max_attempts``
rounds and never past the deadline. The request goes over the pooled link as one call whose answer is read
by ``send_answers.decode_send_answers`` (compiled: no protobuf message, ``ConnectionPool.request_decoded``).
"""

from __future__ import annotations

import asyncio

from gateway.tubemq.errors import RequestTimeout, TubeMQError
from gateway.tubemq.producer.batch import _judge, _retriable, _Tally, report_round
from gateway.tubemq.producer.partitioner import PartitionRef
from gateway.tubemq.producer.routes import TopicRoute
from gateway.tubemq.producer.send import SendContext, SendResult, _choose, places_in, send_template
from gateway.tubemq.wire.payload import PreparedMessage
from gateway.tubemq.wire.rpc import Method, Service
from gateway.tubemq.wire.send_answers import decode_send_answers

__all__ = ["send_one"]

_SEND, _WRITE = Method.SEND_MESSAGE, Service.BROKER_WRITE


async def send_one(
    ctx: SendContext, topic: str, item: PreparedMessage, *, deadline: float
) -> SendResult | Exception:
    """Send ``item`` before the loop time ``deadline``: its result, or the error that ended it (what
    ``send_batch`` gives for a batch of one)."""
    loop = asyncio.get_running_loop()
    result: SendResult | Exception | None = None
    avoids: dict[int, set[PartitionRef]] = {}  # what failed the message so far (slot 0: _judge's shape)
    for _ in range(ctx.max_attempts):
        now = loop.time()
        if deadline <= now:
            break
        route = ctx.routes.route(topic)
        target = _target(ctx, topic, route, item, avoids)
        if not isinstance(target, PartitionRef):
            result = target  # no partition to try: that error ends the message
            break
        assert route is not None
        timeout = min(max(deadline - now, 0.001), ctx.rpc_timeout)
        data = send_template(ctx, topic).encode(
            target.partition_id, item.data, item.flag, item.msg_type, item.msg_time
        )
        address = route.brokers[target.broker_id]
        try:
            answer = await ctx.pool.request_decoded(
                address, _SEND, data, timeout, _WRITE, decode_send_answers
            )
        except Exception as exc:  # connect failure, lost link, timeout, pool closed: the attempt's answer
            answer = exc
        tally: _Tally = {}
        places = places_in(ctx, topic, route)
        result = _judge(ctx, topic, route, target, answer, item, tally, places, avoids, 0)
        if ctx.events is not None:
            report_round(ctx, topic, tally, loop.time() - now)
        if isinstance(result, SendResult) or not _retriable(result):
            break
    if result is None:
        result = RequestTimeout(f"no time left to send to topic {topic!r} within the deadline")
    return result


def _target(
    ctx: SendContext,
    topic: str,
    route: TopicRoute | None,
    item: PreparedMessage,
    avoids: dict[int, set[PartitionRef]],
) -> PartitionRef | TubeMQError:
    """The partition of this round (its broker's attempt counted), or the error that leaves none."""
    free = item.key is None and item.partition is None
    if free and not avoids and route is not None and ctx.breaker.all_closed():
        chosen = ctx.partitioner.round_robin_many(topic, route.partitions, 1)
        if chosen is not None:  # the calm round (batch._choose_calmly for one message)
            target = chosen[0]
            ctx.breaker.begin_attempt(target.broker_id, 1)  # every broker CLOSED: no trial to claim
            return target
    try:
        target = _choose(ctx, topic, route, item.key, item.partition, avoids.get(0, set()))
    except TubeMQError as exc:
        return exc
    # Counted at once: a HALF_OPEN broker admits one trial (batch._choose_each).
    ctx.breaker.begin_attempt(target.broker_id)
    return target
