"""The gateway draws from generators of its own, never from the process-wide ``random`` state
(gateway/tubemq/randomness.py): a host application may seed that state, and hypothesis fails a test whose
strategies see it move (a gateway thread left running by an earlier test once did so in CI)."""

from __future__ import annotations

import logging
import os
import random

from gateway.observability.access_log import AccessLog
from gateway.tubemq.net.backoff import ExponentialBackoff
from gateway.tubemq.randomness import private_random
from gateway.tubemq.wire.client_id import consumer_id, producer_id


def test_jitter_ids_and_access_sampling_leave_the_process_random_state_alone() -> None:
    random.seed(1234)
    before = random.getstate()
    backoff = ExponentialBackoff(0.1, 10.0, jitter=1.0)
    delays = {backoff.compute(failures) for failures in range(1, 50)}
    ids = {producer_id("127.0.0.1") for _ in range(20)} | {consumer_id("g", "127.0.0.1") for _ in range(20)}
    quiet = logging.getLogger("test.private_random")
    quiet.disabled = True
    access = AccessLog(logger=quiet, sample=0.5)
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b""}
    for _ in range(50):
        access.log_request(scope, 200, 0.001)
    assert random.getstate() == before
    assert len(delays) > 40 and len(ids) == 40  # the draws did happen, from the gateway's own generators


def test_a_forked_child_draws_other_numbers_than_its_parent() -> None:
    generator = private_random()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first draw, to the parent
        try:
            os.write(write, repr(generator.random()).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = float(os.read(read, 64).decode())
    os.close(read)
    os.waitpid(pid, 0)
    assert child != generator.random()
