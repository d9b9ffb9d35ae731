"""The compiled loops over a list call Python code per item (getattr, ``__eq__``, the callbacks head_of,
meta_of and frame_one): code that empties the list meanwhile must not make them read freed items. Each
function walks the items as they were when it was called (issue #26).

Run in a child process: before the fix this crashed the interpreter (a segmentation fault), which must fail
one test rather than end the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.speedups_support import extension

CASES = {
    "render_base64": """
        from gateway.api import _consumer_render, consumer_render
        batch = [delivered_message(seq=n, topic=f"t{n}") for n in range(1, 40)]
        given = list(batch)
        def head(*args):
            batch.clear()
            return consumer_render._head(*args)
        meta = consumer_render._meta
        got = _consumer_render.render_base64(batch, False, head, meta)
        assert got == _consumer_render.render_base64(given, False, consumer_render._head, meta)
    """,
    "encode_consumed": """
        import dataclasses
        from gateway.grpc import _consumed_wire
        from gateway.grpc.consumed_wire import encode_consumed_py
        from gateway.service.delivery import Delivery, runs_of
        class Message:
            def __init__(self, message):
                self._message = message
            def __getattr__(self, name):
                messages.clear()
                runs.clear()
                return getattr(self._message, name)
        run = runs_of([delivered_message(seq=n) for n in range(1, 40)]).runs[0]
        messages = [Message(m) for m in run.messages]
        runs = [dataclasses.replace(run, messages=messages)]
        given = Delivery([dataclasses.replace(run, messages=list(messages))])
        got = _consumed_wire.encode_consumed(runs)
        # the loop may hand what it does not read itself back (NotImplemented); what it writes is as given
        assert got is NotImplemented or got == encode_consumed_py(given), got
    """,
    "encode_receipts": """
        from gateway.grpc import _publish_wire
        from gateway.grpc.publish_wire import encode_stored_py
        class Outcome:
            def __init__(self, outcome):
                self.result = outcome.result
                self._index = outcome.index
            @property
            def index(self):
                outcomes.clear()
                return self._index
        outcomes = [Outcome(stored_outcome(index=i)) for i in range(40)]
        given = list(outcomes)
        assert _publish_wire.encode_receipts(outcomes, 0, 0x12) == encode_stored_py(0x12, 0, given)
    """,
    "send_answers": """
        from gateway.tubemq.wire import _send_answers
        from gateway.tubemq.wire.frame import Frame
        from gateway.tubemq.wire.rpc import SUCCESS_PREFIX
        class Answer:
            @property
            def method(self):
                answers.clear()
                return 13
            data = b"\\x08\\x01\\x10\\xc8\\x01\\x1a\\x00"
        answers = [Answer() for _ in range(40)]
        got = _send_answers.send_answers(answers, 13, Answer, Frame, SUCCESS_PREFIX)
        assert got == [(True, 200, "", None, None, None)] * 40, got
    """,
    "frame_requests": """
        from gateway.tubemq.wire import _rpc
        requests = [bytearray(b"r%d" % n) for n in range(40)]
        def frame_one(serial, request):
            requests.clear()
            return b"framed " + bytes(request)
        got = _rpc.frame_requests(list(range(40)), b"p", b"h", requests, frame_one)
        assert got == [b"framed r%d" % n for n in range(40)], got
    """,
    "encode_sends": """
        from gateway.tubemq.producer import _send_request
        from gateway.tubemq.wire.payload import PreparedMessage
        class Message:
            def __init__(self, n):
                self.prepared = PreparedMessage(b"x%d" % n, 0, None, None, 1)
            def __getattr__(self, name):
                messages.clear()
                return getattr(self.prepared, name)
        messages = [Message(n) for n in range(40)]
        given = [m.prepared for m in messages]
        got = _send_request.encode_sends(b"p", b"f", b"a", [1] * 40, messages)
        assert got == _send_request.encode_sends(b"p", b"f", b"a", [1] * 40, given), got
    """,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_list_emptied_while_it_is_walked_is_read_as_given(name: str) -> None:
    extension()  # skips (or fails) alike where the extensions are not built
    imports = "from tests.support.speedups_support import delivered_message, stored_outcome\n"
    code = imports + textwrap.dedent(CASES[name])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
