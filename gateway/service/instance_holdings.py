"""What one consumer instance holds, shared by the collaborators that make it up
(:mod:`gateway.service.instance`): its identity and core consumer, the buffer of fetched messages, the
delivered messages pending a commit (per handed-out run), the batches being handed out, the retried
messages not due yet, and the open/closed state."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from gateway.service.errors import Gone
from gateway.service.instance_pending import PendingRuns
from gateway.service.instance_records import Batch, Segment
from gateway.service.redelivery import AttemptMemory, RedeliveryPolicy
from gateway.tubemq.consumer import Consumer

__all__ = ["Holdings"]


class Holdings:
    """The state of one consumer instance that its settler, redeliverer and fetcher read and change; times
    in seconds (``clock``'s). Every change is synchronous: no collaborator awaits between reading a field
    and changing it."""

    __slots__ = (
        "attempts",
        "batches",
        "buffer",
        "clock",
        "closed_reason",
        "commits_due",
        "consumer",
        "delayed",
        "group",
        "instance_id",
        "next_deadline",
        "pending",
        "policy",
        "seeking",
        "wall",
    )

    def __init__(
        self,
        instance_id: str,
        group: str,
        consumer: Consumer,
        policy: RedeliveryPolicy,
        *,
        clock: Callable[[], float],
        wall: Callable[[], int],
    ) -> None:
        self.instance_id = instance_id
        self.group = group
        self.consumer = consumer
        self.policy = policy
        self.clock = clock
        #: Unix milliseconds (what deadlines and retry due times tell clients)
        self.wall = wall
        #: why the instance closed (deleted, expired, the gateway stopped); None while it is open
        self.closed_reason: str | None = None
        #: fetched messages not delivered yet, in delivery order
        self.buffer: deque[Segment] = deque()
        #: delivered, uncommitted messages, by run, in delivery (token) order
        self.pending = PendingRuns()
        #: batches being handed out by confirm context
        self.batches: dict[str, Batch] = {}
        #: retried messages not due yet, a heap of (due, order, one-message segment)
        self.delayed: list[tuple[float, int, Segment]] = []
        #: no pending message's deadline is earlier (a lower bound: extensions only move deadlines later)
        self.next_deadline = math.inf
        #: delivery attempts of rolled-back messages, for when they come back to this instance
        self.attempts = AttemptMemory()
        #: partitions whose last batch an auto-commit confirmed in the core alone
        #: (``Consumer.confirm_local``): a poll sends, before it answers, what no fetch carries (its own, or
        #: the one it starts ahead of the next poll)
        self.commits_due: set[str] = set()
        #: partitions a seek is moving: a batch fetched meanwhile is rolled back, not delivered
        self.seeking: set[str] = set()

    def buffered(self) -> int:
        """How many messages the buffer holds."""
        return sum(s.end - s.start for s in self.buffer)

    def check_open(self) -> None:
        """Gone, telling the client to create a new instance, once the instance closed."""
        if self.closed_reason is not None:
            raise Gone(
                f"consumer instance {self.instance_id} was {self.closed_reason}; create a new instance with "
                f"POST /v1/consumers/{self.group}",
                resource_name=self.instance_id,
            )
