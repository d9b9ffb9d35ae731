"""A TubeMQ link that multiplexes requests by serial number: :class:`Connection`.

A :class:`Connection` is a :class:`~gateway.tubemq.net.multiplex.Multiplexed` link (the socket, its reads,
its close, and who waits for which serial number) that writes each request as one pre-encoded frame, frames
queued in one loop iteration leaving in one write, and waits for its answer, which the reader files as it
arrives, in whatever order the node sends them (§1.1, §1.6).

Failure rules:

* each request has its own timeout (seconds); on expiry it fails with ``RequestTimeout`` and a late
  answer is counted in ``unknown_answers`` and dropped;
* a timeout with nothing read on the link since the request was sent means the path is dead (a
  black-holed node, a vanished NAT entry): the link is closed (``NO_ANSWER``) so that the next request
  opens a new one instead of waiting in the dead socket until the kernel gives up (about 15 minutes);
  TCP keepalive (``link.KEEPALIVE_*``) finds a dead idle link the same way;
* an RPC exception answer fails that request with the matching ``RemoteException``; for the Java
  IOException types (standby master, server not ready, unknown protocol) the link is closed right
  after delivering it, as the Java client does;
* end of stream, a socket error or garbage from the peer closes the link and fails every pending
  request at once with ``ConnectionClosed``, chained to the cause (a ``ProtocolError`` for garbage).

The connection only reports its state (``in_flight``, ``is_idle``, ``is_closed``); the pool decides.
Events (connect, close, request completed) go to an optional :class:`~gateway.tubemq.events.EventBus`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from google.protobuf.message import Message

from gateway.tubemq.errors import (
    ConnectionClosed,
    ProtocolError,
    RemoteException,
    RequestTimeout,
    TubeMQError,
)
from gateway.tubemq.net.link import CloseReason, ConnectionState
from gateway.tubemq.net.multiplex import Multiplexed
from gateway.tubemq.net.outcomes import AnswersDecoder, BatchWait, Outcome, RequestCompleted, outcome_of
from gateway.tubemq.wire.frame import Frame
from gateway.tubemq.wire.rpc import (
    RpcResponse,
    decode_response,
    encode_request,
    encode_requests,
    parse_response,
)

__all__ = ["AnswersDecoder", "Connection", "Outcome", "RequestCompleted"]  # the last three: net/outcomes.py

_WRITE_HIGH_WATER = 4 * 1024 * 1024


class Connection(Multiplexed):
    """A multiplexed link to one node. Create it, ``await connect(timeout)``, then ``request`` freely.

    The options are the :class:`~gateway.tubemq.net.link.Link`'s (``max_frame_bytes`` bounds one answer).
    """

    def __repr__(self) -> str:
        tls = " tls" if self._ssl is not None else ""
        state = self._state.value
        if self._close_reason is not None:
            state = f"{state} ({self._close_reason.value})"
        return (
            f"<Connection {self.address}{tls} {state} in_flight={self.in_flight} "
            f"sent={self.requests_sent} unknown_answers={self.unknown_answers}>"
        )

    # --- requests ------------------------------------------------------------------------------------

    async def request(
        self,
        method: int,
        request: Message | bytes,
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
    ) -> Message:
        """Send ``request`` (a message, or a serialized one as ``rpc.encode_request`` takes it) as
        ``method`` and return the parsed response message of that method.

        ``timeout`` (seconds, > 0) bounds the whole call and is sent to the node in ms. Raises
        ``ConnectionClosed``, ``RequestTimeout``, ``ProtocolError`` or a ``RemoteException``;
        application errCodes inside the response are the caller's business.
        """
        answer = await self.request_decoded(method, request, timeout, service)
        assert isinstance(answer, Message)
        return answer

    async def request_decoded(
        self,
        method: int,
        request: Message | bytes,
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
        decode: AnswersDecoder | None = None,
    ) -> object:
        """:meth:`request`, with the answer read by ``decode`` when given (as ``request_many`` reads a
        batch's: ``send_answers.decode_send_answers`` gives a send's fields without a protobuf message):
        its value, or the parsed response message where it gives None. Raises as :meth:`request`."""
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        transport = self._transport
        if self._state is not ConnectionState.OPEN or transport is None:
            raise self._closed_error()
        serial = self._next_serial()
        data = encode_request(serial, method, request, max(1, round(timeout * 1000)), service)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RpcResponse | Frame] = loop.create_future()
        pending = self.pending
        pending[serial] = future
        self.idle_since = None
        started = self._clock()
        outcome = Outcome.OK
        # The link's deadline watch fails the future (Multiplexed._watch), not asyncio.timeout() nor a loop
        # timer of its own: the answer is the only thing awaited (almost always), and either costs more than
        # the rest of this method.
        deadline = loop.time() + timeout
        self._watch(loop, deadline, future)
        try:
            outbox = self._outbox
            outbox.append(data)
            if len(outbox) == 1:
                loop.call_soon(self._flush)
            self.requests_sent += 1
            self.last_activity = started
            if transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                async with asyncio.timeout_at(deadline):
                    await self._drain()
            answer = await future
            if decode is not None:  # it reads a frame (the usual answer: Multiplexed._dispatch) or not
                (value,) = decode((answer,), method)
                if value is not None:
                    return value
            response = decode_response(answer) if type(answer) is Frame else answer
            assert isinstance(response, RpcResponse)  # failures were raised by the reader
            if response.method != method:
                raise ProtocolError(
                    f"{self.address} answered a method {method} call as method {response.method}"
                )
            # Parsed here, not in the reader: a bad inner message fails only its own request.
            return parse_response(method, response.data)
        except RemoteException:
            outcome = Outcome.REMOTE_EXCEPTION
            raise
        except ConnectionClosed:
            outcome = Outcome.CLOSED
            _retrieved(future)  # failed by the close while this call waited to write, never awaited
            raise
        except ProtocolError:
            outcome = Outcome.PROTOCOL_ERROR
            raise
        except TimeoutError:
            outcome = Outcome.TIMEOUT
            _retrieved(future)
            if self.last_read < started:
                self._terminate(CloseReason.NO_ANSWER, None)
            raise RequestTimeout(
                f"no answer from {self.address} to method {method} (serial {serial}) within {timeout:g}s"
            ) from None
        except asyncio.CancelledError:
            outcome = Outcome.CANCELLED
            _retrieved(future)
            raise
        finally:
            pending.pop(serial, None)
            now = self._clock()
            if not pending and not self._waits:
                self.idle_since = now
            events = self._events
            if events is not None and events.has_subscribers:
                events.emit(RequestCompleted(self.address, method, outcome, now - started))

    async def request_many(
        self,
        method: int,
        requests: Sequence[Message | bytes],
        timeout: float,  # noqa: ASYNC109 - sent on the wire, so it is part of the request
        service: int | None = None,
        decode: AnswersDecoder | None = None,
    ) -> list[object]:
        """Send ``requests`` (messages, or serialized ones as ``rpc.encode_requests`` takes) as ``method``
        in one write and return, in order, each one's parsed response or the error that ended it
        (``ConnectionClosed``, ``RequestTimeout``, ``ProtocolError``, a ``RemoteException``): one failure
        never hides another request's answer.

        Each request keeps its own serial number and answer; only the bookkeeping is shared: one waiter
        and one timer for the whole batch (``timeout`` seconds, sent to the node in ms), and no future per
        request (the reader files each answer in the batch's slot for it). ``decode``, when given, reads
        every answer of the batch in one call (``send_answers.decode_send_answers``): each answer it gives
        a value for is returned as that value instead of a parsed message; an answer it gives None for is
        parsed as without it (``parse_response``). Raises only what stops the batch before anything is
        sent (a closed link, a bad ``timeout`` or message) and ``CancelledError``.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        transport = self._transport
        if self._state is not ConnectionState.OPEN or transport is None:
            raise self._closed_error()
        count = len(requests)
        if count == 0:
            return []
        timeout_ms = max(1, round(timeout * 1000))
        serials = self._next_serials(count)
        frames = encode_requests(serials, method, requests, timeout_ms, service)
        loop = asyncio.get_running_loop()
        # The reader files each answer in the batch's slots and counts them down: see _dispatch.
        batch = BatchWait(serials, loop.create_future())
        waits = self._waits
        waits.update(dict.fromkeys(serials, batch))
        waiter = batch.waiter
        self.idle_since = None
        started = self._clock()
        deadline = loop.time() + timeout
        timer = loop.call_at(deadline, batch.wake)
        results: list[object] = []
        all_read = False  # every answer read by the decoder: each an OK outcome
        try:
            outbox = self._outbox
            was_empty = not outbox
            outbox.extend(frames)
            if was_empty:
                loop.call_soon(self._flush)
            self.requests_sent += count
            self.last_activity = started
            if transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                try:
                    async with asyncio.timeout_at(deadline):
                        await self._drain()
                except TimeoutError:
                    batch.wake()  # what is unanswered has timed out
                except ConnectionClosed:
                    pass  # _terminate filed the reason as every unanswered request's answer
            await waiter
            slots = batch.slots
            decoded = decode(slots, method) if decode is not None else None
            if decoded is not None and None not in decoded:  # the decoder read every answer
                results = list(decoded)
                all_read = True
                return results
            timed_out = False
            for i, slot in enumerate(slots):
                value = decoded[i] if decoded is not None else None
                if value is None:
                    value = self._answer_of(slot, method, timeout)
                    if type(value) is RequestTimeout:
                        timed_out = True
                results.append(value)
            if timed_out and self.last_read < started:
                self._terminate(CloseReason.NO_ANSWER, None)
            return results
        finally:
            timer.cancel()
            if batch.left > 0:  # what was answered has left already (_dispatch)
                for serial in serials:
                    waits.pop(serial, None)
            now = self._clock()
            if not self.pending and not waits:
                self.idle_since = now
            events = self._events
            if events is not None and events.has_subscribers:
                # One event per outcome, not per request: the batch shares its duration.
                tally: dict[Outcome, int] = {Outcome.OK: count} if all_read else {}
                for result in () if all_read else results:
                    outcome = outcome_of(result)
                    tally[outcome] = tally.get(outcome, 0) + 1
                if len(results) < count:
                    tally[Outcome.CANCELLED] = count - len(results)
                for outcome, n in tally.items():
                    events.emit(RequestCompleted(self.address, method, outcome, now - started, n))

    def _answer_of(self, slot: object, method: int, timeout: float) -> Message | TubeMQError:
        """A batch member's answer from what the reader filed for it (None: nothing came in time)."""
        if slot is None:
            return RequestTimeout(f"no answer from {self.address} to method {method} within {timeout:g}s")
        if isinstance(slot, TubeMQError):
            return slot
        if isinstance(slot, Frame):  # a usual answer filed as it came (_file)
            try:
                slot = decode_response(slot)
            except ProtocolError as error:
                return error
        assert isinstance(slot, RpcResponse)
        if slot.method != method:
            return ProtocolError(f"{self.address} answered a method {method} call as method {slot.method}")
        try:
            return parse_response(method, slot.data)
        except ProtocolError as error:
            return error


def _retrieved(future: asyncio.Future[RpcResponse | Frame]) -> None:
    """Mark a future's exception as seen when its call ends without awaiting it (else asyncio logs it)."""
    if future.done() and not future.cancelled():
        future.exception()
