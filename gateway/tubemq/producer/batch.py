"""The one send path: prepared messages of one topic sent together, requests batched per broker (§7.4-7.6).

TubeMQ takes one message per ``SendMessageRequestP2B``, so each message is still its own request with its own
serial number and its own broker answer; what a batch shares is the bookkeeping around them (a single send
is a batch of one). Each attempt round chooses a partition for every message still unsent (``send._choose``:
round robin for a free message, the key's or the named partition for a pinned one; shielding and back-off),
groups the requests by broker and writes each group in one go over the pooled link
(``ConnectionPool.request_many``: one waiter and one timer per group, no task per message; a group of one
is a plain ``request``). Every answer is then judged alone (``send`` module docstring): 200 is success;
transport errors and retriable codes move that message to the next round, avoiding what failed it (a pinned
message stays on its partition); other codes end it at once. Rounds stop after ``max_attempts`` or at the
deadline. A pinned broker that is shielded ends its message at once with ``ServiceUnavailable``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

from google.protobuf.message import Message

from gateway.tubemq.errors import (
    RemoteException,
    RequestTimeout,
    ServerError,
    TransportError,
    TubeMQError,
    for_code,
)
from gateway.tubemq.producer.events import SendCompleted
from gateway.tubemq.producer.partitioner import PartitionRef
from gateway.tubemq.producer.routes import TopicRoute
from gateway.tubemq.producer.send import (
    SERVICE_UNAVAILABLE,
    SUCCESS,
    SendContext,
    SendResult,
    _choose,
    _result,
    place_of,
    send_template,
)
from gateway.tubemq.wire.payload import PreparedMessage
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import Method, Service
from gateway.tubemq.wire.send_answers import SendAnswer, decode_send_answers, send_answer_of
from gateway.tubemq.wire.slots import slots_constructor

__all__ = ["report_round", "send_batch"]

#: (broker id, outcome, error code) -> [attempts, stored bytes] of one round, for ``SendCompleted``.
_Tally = dict[tuple[int, str, int | None], list[int]]

#: ``SendResult(*fields)``, compiled where the extension is (``_book_stored`` builds one per message)
_new_result = slots_constructor(SendResult)

_NO_AVOID: set[PartitionRef] = set()  # never written: _avoid() gives a message its own set


async def send_batch(
    ctx: SendContext, topic: str, items: Sequence[PreparedMessage], *, deadline: float
) -> list[SendResult | Exception]:
    """Send every item before the loop time ``deadline``; returns, in order, each item's result or the
    error that ended it."""
    loop = asyncio.get_running_loop()
    # Each message's result, or the error of its last attempt while it may go again.
    results: list[SendResult | Exception | None] = [None] * len(items)
    avoids: dict[int, set[PartitionRef]] = {}  # what failed each message so far
    places: dict[PartitionRef, tuple[str, int]] | None = {} if len(items) > 1 else None
    todo: Sequence[int] = range(len(items))
    for _ in range(ctx.max_attempts):
        now = loop.time()
        if deadline <= now:
            break
        route = ctx.routes.route(topic)
        groups = _choose_calmly(ctx, topic, route, items, todo) if not avoids else None
        if groups is None:
            groups = _choose_each(ctx, topic, route, items, todo, avoids, results)
        if not groups:
            todo = ()
            break
        assert route is not None
        timeout = min(max(deadline - now, 0.001), ctx.rpc_timeout)
        if len(groups) == 1:  # one broker: its answers, without a task per broker
            for broker_id, members in groups.items():
                answers = await _send_group(ctx, topic, route, broker_id, members, items, timeout)
                answered = [(members, answers)]
        else:
            rounds = await asyncio.gather(
                *(
                    _send_group(ctx, topic, route, broker_id, members, items, timeout)
                    for broker_id, members in groups.items()
                )
            )
            answered = list(zip(groups.values(), rounds, strict=True))
        tally: _Tally = {}
        again: list[int] = []
        for members, answers in answered:
            if len(members) > 1 and places is not None and _all_stored(answers):
                _book_stored(ctx, topic, route, members, answers, items, tally, places, results)
                continue
            for (i, target), answer in zip(members, answers, strict=True):
                outcome = _judge(ctx, topic, route, target, answer, items[i], tally, places, avoids, i)
                results[i] = outcome
                if not isinstance(outcome, SendResult) and _retriable(outcome):
                    again.append(i)
        todo = again
        if ctx.events is not None:
            report_round(ctx, topic, tally, loop.time() - now)
        if not todo:
            break
    for i in todo:  # out of attempts or of time: the last attempt's error, if there was one
        if results[i] is None:
            results[i] = RequestTimeout(f"no time left to send to topic {topic!r} within the deadline")
    # Every message has its result now. (A string for cast: the type expression would be built on every
    # call.)
    return cast("list[SendResult | Exception]", results)


def report_round(ctx: SendContext, topic: str, tally: _Tally, seconds: float) -> None:
    """The round's ``SendCompleted`` events: one per (broker, outcome), not per message (they share one
    duration, ``seconds``)."""
    if ctx.events is not None:
        for (broker_id, kind, code), (n, size) in tally.items():
            ctx.events.emit(SendCompleted(topic, broker_id, kind, seconds, code, size, n))


_Groups = dict[int, list[tuple[int, PartitionRef]]]


def _choose_calmly(
    ctx: SendContext,
    topic: str,
    route: TopicRoute | None,
    items: Sequence[PreparedMessage],
    todo: Sequence[int],
) -> _Groups | None:
    """The usual round: free messages, no broker shielded, no partition in back-off: the partitions that
    ``_choose`` would give one message after another, chosen in one step (``round_robin_many``), and each
    broker's attempts counted at once. None when the round is not that (``_choose_each`` then)."""
    if route is None or not ctx.breaker.all_closed():
        return None
    for i in todo:
        item = items[i]
        if item.key is not None or item.partition is not None:
            return None
    targets = ctx.partitioner.round_robin_many(topic, route.partitions, len(todo))
    if targets is None:
        return None
    groups: _Groups = {}
    for i, target in zip(todo, targets, strict=True):
        group = groups.get(target.broker_id)
        if group is None:
            groups[target.broker_id] = [(i, target)]
        else:
            group.append((i, target))
    for broker_id, members in groups.items():
        ctx.breaker.begin_attempt(broker_id, len(members))  # every broker CLOSED: no trial to claim
    return groups


def _choose_each(
    ctx: SendContext,
    topic: str,
    route: TopicRoute | None,
    items: Sequence[PreparedMessage],
    todo: Sequence[int],
    avoids: dict[int, set[PartitionRef]],
    results: list[SendResult | Exception | None],
) -> _Groups:
    """A partition for each message of the round by ``_choose`` (a message it cannot place gets its error in
    ``results``), grouped by broker."""
    groups: _Groups = {}
    for i in todo:
        item = items[i]
        try:
            target = _choose(ctx, topic, route, item.key, item.partition, avoids.get(i, _NO_AVOID))
        except TubeMQError as exc:
            results[i] = exc
            continue
        # Counted at once: a HALF_OPEN broker admits one trial, so the next choice sees it taken.
        ctx.breaker.begin_attempt(target.broker_id)
        group = groups.get(target.broker_id)
        if group is None:
            groups[target.broker_id] = [(i, target)]
        else:
            group.append((i, target))
    return groups


def _all_stored(answers: Sequence[object]) -> bool:
    """Whether every answer is a broker's 200 (``SendAnswer`` fields, as ``decode_send_answers`` reads)."""
    return all(type(a) is tuple and a[0] and a[1] == SUCCESS for a in answers)


def _book_stored(
    ctx: SendContext,
    topic: str,
    route: TopicRoute,
    members: list[tuple[int, PartitionRef]],
    answers: Sequence[object],
    items: Sequence[PreparedMessage],
    tally: _Tally,
    places: dict[PartitionRef, tuple[str, int]],
    results: list[SendResult | Exception | None],
) -> None:
    """``_judge`` of a broker's answers that all say stored, booked at once: the breaker's successes and the
    tally in one step each (nothing else came between them), the partitions' back-off only when any is in
    it, a result per message."""
    broker_id = members[0][1].broker_id
    ctx.breaker.record_success(broker_id, len(members))
    if not ctx.partitioner.calm:
        for _, target in members:
            ctx.partitioner.record_success(topic, target)
    size = 0
    make = _new_result
    for (i, target), answer in zip(members, answers, strict=True):
        size += len(items[i].data)
        place = places.get(target)
        if place is None:
            place = places[target] = place_of(topic, route, target)
        _, _, _, message_id, append_time, append_offset = cast(SendAnswer, answer)
        if message_id is None or append_time is None or append_offset is None:
            results[i] = _result(topic, route, target, cast(SendAnswer, answer), place)
        else:  # what _result builds, without its call and checks (every field came)
            results[i] = make(
                topic,
                target.partition_id,
                place[0],
                target.broker_id,
                message_id,
                append_time,
                append_offset,
                place[1],
            )
    entry = tally.get((broker_id, "ok", None))
    if entry is None:
        tally[(broker_id, "ok", None)] = [len(members), size]
    else:
        entry[0] += len(members)
        entry[1] += size


async def _send_group(
    ctx: SendContext,
    topic: str,
    route: TopicRoute,
    broker_id: int,
    members: list[tuple[int, PartitionRef]],
    items: Sequence[PreparedMessage],
    timeout: float,  # noqa: ASYNC109 - sent on the wire with each request
) -> list[object]:
    """One broker's requests of a round; a failure before sending becomes every member's answer."""
    template = send_template(ctx, topic)
    if len(members) == 1:  # a lone send: no lists to build around one request
        i, target = members[0]
        m = items[i]
        requests: list[Message | bytes] = [
            template.encode(target.partition_id, m.data, m.flag, m.msg_type, m.msg_time)
        ]
    else:
        requests = list(
            template.encode_many(
                [target.partition_id for _, target in members], [items[i] for i, _ in members]
            )
        )
    address, method, service = route.brokers[broker_id], Method.SEND_MESSAGE, Service.BROKER_WRITE
    try:
        # the answers read in one call (decode_send_answers: a tuple of fields each, no protobuf message)
        decode = decode_send_answers
        if len(requests) == 1:  # one waiter and timer of its own: less bookkeeping than a batch's
            return [await ctx.pool.request_decoded(address, method, requests[0], timeout, service, decode)]
        answers = await ctx.pool.request_many(address, method, requests, timeout, service, decode)
    except Exception as exc:  # connect failure, pool closed (for one request: its answer): every member's
        return [exc] * len(members)
    return answers


def _retriable(outcome: Exception) -> bool:
    """Whether a message whose attempt ended with ``outcome`` goes to the next round."""
    if isinstance(outcome, TransportError):
        return True
    return isinstance(outcome, (RemoteException, ServerError)) and outcome.retriable


def _judge(
    ctx: SendContext,
    topic: str,
    route: TopicRoute,
    target: PartitionRef,
    answer: object,
    item: PreparedMessage,
    tally: _Tally,
    places: dict[PartitionRef, tuple[str, int]] | None,
    avoids: dict[int, set[PartitionRef]],
    i: int,
) -> SendResult | Exception:
    """Book one answer: breaker, partition back-off, event, what to avoid next."""
    if type(answer) is not tuple and isinstance(answer, broker_pb.SendMessageResponseB2P):
        answer = send_answer_of(answer)  # a lone send's answer, or one the batch's reader left parsed
    if type(answer) is tuple:
        fields = cast(SendAnswer, answer)
        success, code, err_msg = fields[0], fields[1], fields[2]
        if success and code == SUCCESS:
            ctx.breaker.record_success(target.broker_id)
            ctx.partitioner.record_success(topic, target)
            _tally(tally, target.broker_id, "ok", None, len(item.data))
            if places is None:
                return _result(topic, route, target, fields)
            place = places.get(target)
            if place is None:
                place = places[target] = place_of(topic, route, target)
            return _result(topic, route, target, fields, place)
        error = for_code(code if code != SUCCESS else 500, err_msg)
        ctx.partitioner.record_failure(topic, target)
        if error.errno == SERVICE_UNAVAILABLE:
            ctx.breaker.record_unavailable(target.broker_id)
            _tally(tally, target.broker_id, "unavailable", error.errno)
            _avoid(avoids, i).update(p for p in route.partitions if p.broker_id == target.broker_id)
        else:
            ctx.breaker.record_rejected(target.broker_id)
            _tally(tally, target.broker_id, "rejected", error.errno)
            _avoid(avoids, i).add(target)
        return error
    if isinstance(answer, (TransportError, RemoteException)):
        if isinstance(answer, RemoteException) and not answer.retriable:
            ctx.breaker.record_rejected(target.broker_id)
            _tally(tally, target.broker_id, "transport")
            return answer
        ctx.breaker.record_failure(target.broker_id)
        ctx.partitioner.record_failure(topic, target)
        _tally(tally, target.broker_id, "transport")
        _avoid(avoids, i).update(p for p in route.partitions if p.broker_id == target.broker_id)
        return answer
    assert isinstance(answer, Exception)
    return answer  # not a send outcome (a closed pool, a bug): the caller maps or raises it


def _tally(tally: _Tally, broker_id: int, outcome: str, code: int | None = None, size: int = 0) -> None:
    entry = tally.get((broker_id, outcome, code))
    if entry is None:
        tally[(broker_id, outcome, code)] = [1, size]
    else:
        entry[0] += 1
        entry[1] += size


def _avoid(avoids: dict[int, set[PartitionRef]], i: int) -> set[PartitionRef]:
    avoid = avoids.get(i)
    if avoid is None:
        avoid = avoids[i] = set()
    return avoid
