"""The compiled per-message loops (the ``_*.c`` file beside each module) against their pure-Python references.

Each compiled function must give what its reference gives, byte for byte, on any input: generated batches
of valid messages, and hostile ones (truncated payloads, attribute lengths that are negative, huge or past
the end, bad UTF-8, wrong checksums, odd flags): the same result or the same error, never a crash. Both
functions are called here directly, whichever one the process selected, so CI compares the two even with
TUBEMQ_GATEWAY_NO_EXTENSIONS set; and a test fails when a machine that can build the extension did not
(so CI cannot test the fallback twice without noticing).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.grpc.consumed_wire import encode_consumed, encode_consumed_py
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as grpc_pb
from gateway.grpc.publish_wire import PublishBatch, decode_publish_py, encode_stored, encode_stored_py
from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import Delivery, runs_of
from gateway.service.errors import Unavailable
from gateway.service.publish import OutgoingMessage, PublishOutcome
from gateway.tubemq.consumer import batch
from gateway.tubemq.consumer.batch import ConsumedMessage, DecodeStats, decode_messages_py, parse_prefix
from gateway.tubemq.errors import ProtocolError
from gateway.tubemq.producer import SendResult
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire import rpc, speedups
from gateway.tubemq.wire.frame import Frame, encode_varint
from gateway.tubemq.wire.payload import PreparedMessage, crc32, crc32_checksum, encode_key, encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from tests.support.build_support import built_and_installed, compiler
from tests.support.files import ROOT
from tests.support.grpc_wire_strategies import delivered_messages as consumed_wire_messages
from tests.support.grpc_wire_strategies import publish_messages as publish_wire_messages
from tests.support.speedups_support import (
    ODD_MESSAGE_CHANGES,
    delivered_message,
    error_of,
    extension,
    foreign_slot_message,
    stored_outcome,
)

# Hypothesis warns when the global ``random`` state moves while it generates data. No strategy here uses
# ``random``; in the whole suite another test's leftover thread (a backoff's jitter) can move it meanwhile,
# which made the first full CI run fail here with a FlakyStrategyDefinition. That warning alone is not an
# error in this module.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)


def compiled_decode(
    wire: Any, filters: frozenset[str] | None, curr_offset: int, exact: bool
) -> tuple[list[ConsumedMessage], DecodeStats]:
    messages, kept_bytes, bad_checksum, bad_payload, filtered = extension().decode_messages(
        wire, filters, curr_offset, exact, parse_prefix
    )
    return messages, DecodeStats(len(messages), kept_bytes, bad_checksum, bad_payload, filtered)


# --- which path runs ------------------------------------------------------------------------------------


def test_the_compiled_path_is_loaded_where_it_can_be_built() -> None:
    if os.environ.get(speedups.ENV_SWITCH, "") not in ("", "0"):
        assert speedups.ACTIVE == speedups.PURE and isinstance(batch._loops, batch._Python)
        pytest.skip(f"{speedups.ENV_SWITCH} is set: this run tests the pure path")
    if compiler() is None:
        assert speedups.ACTIVE == speedups.PURE
        pytest.skip("no C compiler or Python headers on this machine: the pure path only")
    assert speedups.ACTIVE == speedups.COMPILED, speedups.REASON
    assert not isinstance(batch._loops, batch._Python)
    for name in speedups.EXTENSIONS:
        assert speedups.load_extension(name) is not None, name


def test_every_c_file_sits_beside_the_module_it_speeds_up() -> None:
    """Each C file under gateway/ (the shared headers' directory aside) builds a module that EXTENSIONS
    names, beside the Python module of the same name without the underscore and with its stub."""
    sources = {p for p in (ROOT / "gateway").rglob("_*.c") if "_cext" not in p.parts}
    assert {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in sources} == set(speedups.EXTENSIONS)
    for source in sources:
        assert source.with_name(source.name[1:]).with_suffix(".py").is_file(), source
        assert source.with_suffix(".pyi").is_file(), source
    with pytest.raises(ValueError, match="not one of the compiled modules"):
        speedups.load_extension("gateway.tubemq.wire._speedups")


def _twins_marked(path: Path) -> set[str]:
    """The modules a test file names in ``pytest.mark.compiled_twins(...)``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr == "compiled_twins":
            names |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return names


def test_every_compiled_module_has_tests_on_the_pure_path() -> None:
    """scripts/test.sh runs the tests marked compiled_twins again with TUBEMQ_GATEWAY_NO_EXTENSIONS=1: each
    compiled module is named by such a mark, and each name is a compiled module."""
    marked = {
        path.relative_to(ROOT).as_posix(): _twins_marked(path) for path in (ROOT / "tests").rglob("test_*.py")
    }
    # scripts/test.sh finds them by the line that marks the whole module
    for path, names in marked.items():
        starts = "\npytestmark = pytest.mark.compiled_twins(" in (ROOT / path).read_text(encoding="utf-8")
        assert starts or not names, f"{path}: mark the whole module"
    named = set().union(*marked.values())
    assert named <= set(speedups.EXTENSIONS), named - set(speedups.EXTENSIONS)
    assert set(speedups.EXTENSIONS) <= named, set(speedups.EXTENSIONS) - named
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert f"{speedups.ENV_SWITCH}=1 .venv/bin/python -m pytest -q -m compiled_twins " in script
    assert "grep -rl --include='test_*.py' '^pytestmark = pytest.mark.compiled_twins' tests" in script


#: run where no extension is built: every module that picks a compiled path imports, picks the pure one and
#: answers through it (the core's loops, the gRPC answers and requests, the poll JSON, delivered messages)
PURE_EVERYWHERE = """
from gateway.api import consumer_render, publish_parse, publish_render
from gateway.grpc import consumed_wire, publish_wire
from gateway.service import delivered, delivery
from gateway.tubemq.consumer import batch
from gateway.tubemq.wire import frame_decoder, rpc, send_answers
assert isinstance(consumer_render._loops, consumer_render._Python)
assert isinstance(consumed_wire._loops, consumed_wire._Python)
assert isinstance(publish_parse._loops, publish_parse._Python)
assert publish_parse.usual_batch(b'{"messages": [{"value": "v"}]}', 9)[0].data == b"v"
assert isinstance(publish_render._loops, publish_render._Python)
assert isinstance(publish_wire._loops, publish_wire._Python)
assert isinstance(frame_decoder._loops, frame_decoder._Python) and not rpc.usual_answer(b'', b'')
assert delivered.new_delivered is delivered.DeliveredMessage
assert isinstance(batch._loops, batch._Python)
assert batch.answer_reader(None)([batch.RpcResponse(1, 17, b"")], 17) == [None]
assert send_answers.decode_send_answers([], 13) == []
m = batch.ConsumedMessage(7, b"v", {}, None, None, 0, 0)
d = delivered.new_delivered(1, "t", "1:t:0", 1, 0, m, 1, 0.0, 0)
one = delivery.runs_of([d])
assert consumed_wire.encode_consumed(one) == consumed_wire.encode_consumed_py(one)
assert b'"value":"dg=="' in consumer_render.render_poll(one, "base64")
assert publish_wire.decode_publish(b"\\x0a\\x01t").topic == "t"
"""


def test_a_machine_without_a_compiler_installs_the_pure_path(tmp_path: Path) -> None:
    """setup.py marks the extension optional: with a compiler that fails (CC=false) the package still
    builds, without the extension, and the installed gateway runs the pure path and says why."""
    env = {**os.environ, "CC": "false", "PIP_NO_INDEX": "1"}
    env.pop(speedups.ENV_SWITCH, None)
    names, site = built_and_installed(tmp_path, env)
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    code = "from gateway.tubemq.wire import speedups as s; print(s.__file__); print(s.ACTIVE, s.REASON)"
    code += PURE_EVERYWHERE
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    where, outcome = done.stdout.splitlines()
    assert where.startswith(str(site))
    assert outcome.startswith("pure the C extensions are not built")


@pytest.mark.parametrize(("value", "active"), [("1", "pure"), ("0", "compiled"), ("", "compiled")])
def test_the_environment_switch_is_read_at_import(value: str, active: str) -> None:
    extension()
    code = (
        "from gateway.tubemq.wire import speedups; from gateway.tubemq.consumer import batch; "
        "print(speedups.ACTIVE, type(batch._loops).__name__)"
    )
    env = {**os.environ, speedups.ENV_SWITCH: value}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    name = "_Python" if active == "pure" else "module"
    assert done.stdout.split() == [active, name]


def test_a_message_class_of_another_shape_is_refused() -> None:
    module = extension()

    class Plain:
        pass

    with pytest.raises(TypeError):
        module.set_message_type(Plain, batch._MESSAGE_FIELDS)
    with pytest.raises(TypeError):
        module.set_message_type(ConsumedMessage, batch._MESSAGE_FIELDS[:-1])

    class Borrowing:  # the slots of another class (its descriptors copied), not its own
        __slots__ = ("other",)

    for name in batch._MESSAGE_FIELDS:
        setattr(Borrowing, name, ConsumedMessage.__dict__[name])
    with pytest.raises(TypeError, match="not a slot of"):
        module.set_message_type(Borrowing, batch._MESSAGE_FIELDS)
    module.set_message_type(ConsumedMessage, batch._MESSAGE_FIELDS)


def test_a_crc32_that_is_not_callable_is_refused() -> None:
    module = extension()
    with pytest.raises(TypeError, match="callable"):
        module.set_crc32(b"not a function")
    module.set_crc32(crc32)  # as batch.py sets it


# --- decode_messages: generated input -------------------------------------------------------------------

texts = st.text(alphabet=st.characters(blacklist_characters=",=$", blacklist_categories=("Cs",)), max_size=6)
names = texts.filter(lambda t: t.strip() != "")


@st.composite
def payloads(draw: st.DrawFn) -> tuple[bytes, int]:
    """A payload and its flag: a valid encoding, or one broken the ways a broker (or an attacker) could."""
    body = draw(st.binary(max_size=64))
    kind = draw(st.sampled_from(["plain", "attributes", "attributes", "truncated", "length", "utf8", "raw"]))
    if kind == "plain":
        return body, draw(st.sampled_from([0, 2, 4, -2]))
    attributes = draw(st.dictionaries(names, names, max_size=3)) or None
    msg_type = draw(st.one_of(st.none(), st.sampled_from(["a", "b", " c "]), names))
    msg_time = draw(st.sampled_from([None, "202401311530", "202613991530"]))
    key = draw(st.one_of(st.none(), st.text(max_size=5)))
    # by hand: a broker may hand over what a publish would refuse (a month 13, a blank type)
    items = [f"$msgType$={msg_type}"] if msg_type is not None else []
    items += [f"$msgTime$={msg_time}"] if msg_time is not None else []
    items += [f"$msgKey$={encode_key(key)}"] if key else []
    items += [f"{name}={value}" for name, value in (attributes or {}).items()]
    text = ",".join(items).encode("utf-8", "surrogatepass")
    data, flag = (len(text).to_bytes(4, "big") + text + body, 1) if text else (body, 0)
    flag |= draw(st.sampled_from([0, 1, 3, -1]))
    if kind == "truncated":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "length":
        length = draw(st.sampled_from([-1, -5, -(2**31), 2**31 - 1, len(data), len(data) + 1, 0]))
        data = length.to_bytes(4, "big", signed=True) + data[4:]
    elif kind == "utf8":
        data = (3).to_bytes(4, "big") + b"\xff\xfe=" + body
    elif kind == "raw":
        data = draw(st.binary(max_size=12))
    return data, flag


@st.composite
def wire_messages(draw: st.DrawFn) -> list[broker_pb.TransferedMessage]:
    shared = draw(st.lists(payloads(), min_size=1, max_size=4))  # batches repeat a few prefixes
    out = []
    for _ in range(draw(st.integers(0, 12))):
        data, flag = draw(st.one_of(st.sampled_from(shared), payloads()))
        checksum = crc32_checksum(data)
        if draw(st.integers(0, 9)) == 0:
            checksum = draw(st.integers(-(2**31), 2**31 - 1))
        out.append(
            broker_pb.TransferedMessage(
                messageId=draw(st.integers(-(2**63), 2**63 - 1)),
                checkSum=checksum,
                payLoadData=data,
                flag=flag,
            )
        )
    return out


filter_sets = st.one_of(
    st.none(), st.just(frozenset()), st.frozensets(st.sampled_from(["a", "b", " c ", ""]))
)
offsets = st.one_of(st.integers(-1, 10**6), st.integers(-(2**63), 2**63 - 1))


def _shape(messages: list[ConsumedMessage]) -> list[int]:
    """Which messages share one attributes dict (renderers cache by its identity)."""
    first: dict[int, int] = {}
    return [first.setdefault(id(m.attributes), i) for i, m in enumerate(messages)]


def assert_same(wire: Any, filters: frozenset[str] | None, curr: int, exact: bool) -> None:
    expected = decode_messages_py(wire, filters, curr, exact)
    got = compiled_decode(wire, filters, curr, exact)
    assert got == expected
    assert [type(m) for m in got[0]] == [ConsumedMessage] * len(got[0])
    assert [type(m.body) for m in got[0]] == [bytes] * len(got[0])
    assert _shape(got[0]) == _shape(expected[0])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(wire_messages(), filter_sets, offsets, st.booleans())
def test_decode_is_the_same_on_any_batch(
    messages: list[broker_pb.TransferedMessage], filters: frozenset[str] | None, curr: int, exact: bool
) -> None:
    extension()
    # as a fetch hands it over (the parsed answer's repeated field), and as the range reader does (a list)
    answer = broker_pb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK", messages=messages)
    parsed = broker_pb.GetMessageResponseB2C.FromString(answer.SerializeToString())
    assert_same(parsed.messages, filters, curr, exact)
    assert_same(list(parsed.messages)[1:], filters, curr, exact)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_decode_is_the_same_on_any_answer_bytes(raw: bytes) -> None:
    """Whatever bytes a broker sends as an answer that the protobuf library takes, both agree."""
    extension()
    try:
        parsed = broker_pb.GetMessageResponseB2C.FromString(raw)
    except Exception:  # a DecodeError: the RPC layer refuses it before decoding
        return
    assert_same(parsed.messages, frozenset({"a"}), 0, True)
    assert_same(parsed.messages, None, 0, False)


# --- decode_messages: odd objects, same error -------------------------------------------------------------


class _Item:
    def __init__(self, payload: Any, flag: Any = 0, checksum: Any = None, message_id: Any = 1) -> None:
        self.payLoadData = payload
        self.flag = flag
        self.checkSum = crc32_checksum(payload) if checksum is None else checksum
        self.messageId = message_id


class _Broken:
    @property
    def payLoadData(self) -> bytes:
        raise RuntimeError("broken item")


@pytest.mark.parametrize(
    "items",
    [
        [_Broken()],
        [_Item(b"ok"), _Broken()],
        [_Item(b"ok", flag="1", checksum=0)],
        [_Item(b"ok", flag=None)],
        [_Item(b"ok", checksum="x")],
        [_Item(b"ok", message_id=None)],
        None,
        [None],
    ],
    ids=[
        "raises",
        "raises-after-one",
        "text-flag",
        "none-flag",
        "text-checksum",
        "no-id",
        "not-iterable",
        "none",
    ],
)
def test_decode_fails_alike_on_objects_that_are_not_messages(items: Any) -> None:
    extension()
    expected = error_of(lambda: decode_messages_py(items, None, 0, True))
    got = error_of(lambda: compiled_decode(items, None, 0, True))
    if expected is None:
        assert got is None
    else:
        assert got is not None and issubclass(got[0], (expected[0], TypeError, AttributeError)), (
            got,
            expected,
        )


def test_decode_keeps_a_large_batch_and_frees_it() -> None:
    """Many messages through the C loop: the same objects as the reference, each referenced once."""
    extension()
    data, flag = encode_payload(b"x" * 1024, {"k": "v"}, "orders", "202401311530")
    answer = broker_pb.GetMessageResponseB2C(
        messages=[
            broker_pb.TransferedMessage(
                messageId=i, checkSum=crc32_checksum(data), payLoadData=data, flag=flag
            )
            for i in range(5000)
        ]
    )
    got, stats = compiled_decode(answer.messages, None, 28, True)
    assert (got, stats) == decode_messages_py(answer.messages, None, 28, True)
    assert stats.bytes == 5000 * 1024 and got[-1].offset == 28 + 28 * 4999
    message, body = got[7], got[7].body
    held = sys.getrefcount(message), sys.getrefcount(body)
    del got, message
    # the list held the message once, the message its body once: nothing else keeps either alive
    freed = sys.getrefcount(body)
    assert held[0] == 3 and freed == held[1] - 1 == 2, (held, freed)


# --- decode_answer: a GetMessage answer read from its bytes in one pass -------------------------------------

GET = rpc.Method.GET_MESSAGES


def reference_answer(data: bytes, filters: frozenset[str] | None) -> batch.DecodedAnswer | None:
    """What the general way makes of an answer's data: the strict protobuf parse, then the pure decode; None
    for an answer of another code (the fetch handles those itself)."""
    answer = rpc.parse_as(broker_pb.GetMessageResponseB2C, data)
    if answer.errCode != 200:
        return None
    curr = answer.currOffset if answer.HasField("currOffset") else -1
    end = answer.maxOffset if answer.HasField("maxOffset") else -1
    fetched = len(answer.messages)
    exact = batch.is_dense_to_end(curr, end, fetched)
    messages, stats = decode_messages_py(answer.messages, filters, curr, exact)
    lag = answer.currDataDlt if answer.HasField("currDataDlt") else -1
    return batch.DecodedAnswer(curr, end, lag, fetched, messages, stats)


def compiled_answer(item: object, filters: frozenset[str] | None) -> batch.DecodedAnswer | None:
    with pytest.MonkeyPatch.context() as patch:  # the compiled reader, whichever path this run chose
        patch.setattr(batch, "_loops", extension())
        (value,) = batch.answer_reader(filters)((item,), GET)
    assert value is None or isinstance(value, batch.DecodedAnswer)
    return value


def usual_frame(data: bytes, method: int = GET) -> Frame:
    """The frame of a success answer as a broker writes it (the envelope ``rpc.usual_answer`` accepts)."""
    body = b"\x08" + rpc.int_varint(method) + b"\x12" + encode_varint(len(data)) + data
    return Frame(7, rpc.SUCCESS_PREFIX + encode_varint(len(body)) + body)


@st.composite
def answers(draw: st.DrawFn) -> broker_pb.GetMessageResponseB2C:
    """An answer as a broker writes it: any messages, the optional fields or not, mostly code 200."""
    code = draw(st.sampled_from([200, 200, 200, 404, 452, 503]))
    out = broker_pb.GetMessageResponseB2C(success=code == 200, errCode=code, messages=draw(wire_messages()))
    if draw(st.booleans()):
        out.errMsg = draw(st.text(max_size=8))
    fetched = len(out.messages)
    curr = draw(st.one_of(st.integers(0, 10**6), offsets))
    if draw(st.integers(0, 3)):
        out.currOffset = curr
    if draw(st.integers(0, 3)):  # often dense to the end: exact offsets
        dense = curr + 28 * fetched
        out.maxOffset = dense if draw(st.booleans()) and -(2**63) <= dense < 2**63 else draw(offsets)
    for name in ("currDataDlt", "minLimitTime"):
        if draw(st.booleans()):
            setattr(out, name, draw(st.integers(-(2**31), 2**31 - 1)))
    for name in ("escFlowCtrl", "requireSlow"):
        if draw(st.booleans()):
            setattr(out, name, draw(st.booleans()))
    return out


def assert_same_answer(got: batch.DecodedAnswer | None, expected: batch.DecodedAnswer | None) -> None:
    assert got == expected
    if got is not None and expected is not None:
        assert [type(m) for m in got.messages] == [ConsumedMessage] * len(got.messages)
        assert [type(m.body) for m in got.messages] == [bytes] * len(got.messages)
        assert _shape(got.messages) == _shape(expected.messages)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), filter_sets)
def test_an_answer_read_from_its_bytes_is_the_reference_answer(
    answer: broker_pb.GetMessageResponseB2C, filters: frozenset[str] | None
) -> None:
    """Every answer as brokers write it is read in the one pass (none left to the general way) and gives
    what the protobuf library and the pure decode give: from the usual frame and from a parsed envelope."""
    data = answer.SerializeToString()
    expected = reference_answer(data, filters)
    assert_same_answer(compiled_answer(rpc.RpcResponse(7, GET, data), filters), expected)
    if batch.answer_reader(filters) is not None:
        assert_same_answer(compiled_answer(usual_frame(data), filters), expected)
    if answer.errCode == 200:
        assert expected is not None  # so the comparison above was of two decoded answers


def _mutations(data: bytes, draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["flip", "cut", "insert", "append"]))
    at = draw(st.integers(0, len(data)))
    if kind == "flip" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    if kind == "cut":
        return data[:at]
    noise = draw(st.binary(min_size=1, max_size=12))
    return data[:at] + noise + data[at:] if kind == "insert" else data + noise


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), filter_sets, st.data())
def test_a_damaged_answer_is_read_alike_or_left_to_the_general_way(
    answer: broker_pb.GetMessageResponseB2C, filters: frozenset[str] | None, data: st.DataObject
) -> None:
    """Damaged bytes (a flipped byte, cut off, noise inserted or appended): the one pass gives the
    reference's answer or none at all (never another answer, never a crash); where the general way refuses
    the bytes, the one pass gives none."""
    raw = answer.SerializeToString()
    for _ in range(data.draw(st.integers(1, 3))):
        raw = _mutations(raw, data.draw)
    try:
        expected = reference_answer(raw, filters)
    except ProtocolError:
        expected = None
        assert compiled_answer(rpc.RpcResponse(7, GET, raw), filters) is None
        return
    got = compiled_answer(rpc.RpcResponse(7, GET, raw), filters)
    if got is not None:
        assert_same_answer(got, expected)


def test_frames_of_another_method_or_envelope_are_left_to_the_general_way() -> None:
    data = broker_pb.GetMessageResponseB2C(success=True, errCode=200).SerializeToString()
    assert compiled_answer(usual_frame(data), None) is not None
    assert compiled_answer(usual_frame(data, rpc.Method.CONSUMER_COMMIT), None) is None
    framed = usual_frame(data)
    assert compiled_answer(Frame(7, b"\x00" + framed.payload[1:]), None) is None
    assert compiled_answer(rpc.RpcResponse(7, rpc.Method.CONSUMER_COMMIT, data), None) is None
    assert compiled_answer(object(), None) is None


def test_a_message_field_the_broker_schema_lacks_is_left_to_the_general_way() -> None:
    """TubeMQ's TransferedMessage has fields 1-4 only: a message carrying another (here 5, a varint) is not
    what a broker writes, so the one pass leaves the answer to the protobuf parse, which keeps the message."""
    data, flag = encode_payload(b"body", {}, None, None)
    message = broker_pb.TransferedMessage(
        messageId=1, checkSum=crc32_checksum(data), payLoadData=data, flag=flag
    )
    assert [f.number for f in broker_pb.TransferedMessage.DESCRIPTOR.fields] == [1, 2, 3, 4]
    extended = message.SerializeToString() + b"\x28\x07"
    answer = broker_pb.GetMessageResponseB2C(success=True, errCode=200, currOffset=0, maxOffset=28)
    raw = answer.SerializeToString() + b"\x22" + encode_varint(len(extended)) + extended
    expected = reference_answer(raw, None)
    assert expected is not None and [m.body for m in expected.messages] == [b"body"]
    assert compiled_answer(usual_frame(raw), None) is None
    plain = answer.SerializeToString() + b"\x22" + encode_varint(len(message.SerializeToString()))
    assert compiled_answer(usual_frame(plain + message.SerializeToString()), None) == expected


# --- the SendMessage requests and their frames ------------------------------------------------------------

int64s = st.integers(-(2**63), 2**63 - 1)
any_ints = st.one_of(st.integers(-1, 300), int64s, st.integers(-(2**70), 2**70))
optional_texts = st.one_of(st.none(), st.just(""), st.text(max_size=8))


@st.composite
def prepared(draw: st.DrawFn) -> PreparedMessage:
    size = draw(st.sampled_from([0, 1, 127, 128, 1024, 8100, 8192, 20_000]))
    data = draw(st.binary(min_size=size, max_size=size)) if size < 200 else b"d" * size
    return PreparedMessage(data, draw(any_ints), draw(optional_texts), draw(optional_texts), len(data))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.text(max_size=20),
    st.text(max_size=20),
    int64s,
    int64s,
    st.one_of(st.none(), st.text(max_size=20)),
    st.lists(st.tuples(any_ints, prepared()), max_size=6),
)
def test_send_requests_are_the_same_bytes(
    client_id: str,
    topic: str,
    sent_addr: int,
    visit_token: int,
    auth_token: str | None,
    sends: list[tuple[int, PreparedMessage]],
) -> None:
    extension()
    try:
        template = SendRequestTemplate(
            client_id, topic, sent_addr=sent_addr, visit_token=visit_token, auth_token=auth_token
        )
    except UnicodeEncodeError:
        return  # a lone surrogate in the template's own text: refused before any message
    partitions = [p for p, _ in sends]
    messages = [m for _, m in sends]
    expected = error_of(lambda: template.encode_many_py(partitions, messages))
    got = error_of(lambda: template.encode_many(partitions, messages))
    assert got == expected
    if expected is None:
        assert template.encode_many(partitions, messages) == template.encode_many_py(partitions, messages)


def test_send_requests_refuse_alike() -> None:
    extension()
    template = SendRequestTemplate("c", "t", sent_addr=1, visit_token=-2)
    good = PreparedMessage(b"x", 0, None, None, 1)
    cases: list[tuple[list[Any], list[Any]]] = [
        ([1, 2], [good]),  # one partition id per message
        (["1"], [good]),
        ([1], [PreparedMessage("text", 0, None, None, 1)]),  # type: ignore[arg-type]
        ([1], [PreparedMessage(b"x", 0, "\ud800", None, 1)]),
        ([1], [object()]),
    ]
    for partitions, messages in cases:
        expected = error_of(lambda p=partitions, m=messages: template.encode_many_py(p, m))
        got = error_of(lambda p=partitions, m=messages: template.encode_many(p, m))
        assert expected is not None and got is not None
        assert issubclass(got[0], (expected[0], TypeError)), (got, expected)


def _answer_message(i: int) -> broker_pb.SendMessageResponseB2P:
    return broker_pb.SendMessageResponseB2P(success=True, errCode=200, errMsg=str(i))


requests_or_messages = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"r" * 8150, b"r" * 8160, b"r" * 8200, b"r" * 20_000]),
    st.builds(
        lambda i: broker_pb.SendMessageResponseB2P(success=True, errCode=200, errMsg=str(i)), st.integers()
    ),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**40), 2**40)), requests_or_messages
        ),
        max_size=6,
    ),
    st.sampled_from([13, 17]),
    st.integers(1, 2**40),
    st.sampled_from([None, 1, 2, 3]),
)
def test_request_frames_are_the_same_bytes(
    calls: list[tuple[int, Any]], method: int, timeout_ms: int, service: int | None
) -> None:
    extension()
    numbers = [s for s, _ in calls]
    requests = [r for _, r in calls]

    def frames() -> list[bytes]:
        return rpc.encode_requests(numbers, method, requests, timeout_ms, service)

    got = error_of(frames)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rpc, "_loops", rpc._Python())
        expected = error_of(frames)
        reference = frames() if expected is None else None
    assert got == expected
    if expected is None:
        assert frames() == reference


def test_request_frames_around_one_block_are_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request length whose frame ends near 8192 bytes: one block up to it, two past it."""
    extension()
    requests = [b"r" * n for n in range(8100, 8200)]
    numbers = list(range(len(requests)))
    got = rpc.encode_requests(numbers, 13, requests, 5000)
    monkeypatch.setattr(rpc, "_loops", rpc._Python())
    assert got == rpc.encode_requests(numbers, 13, requests, 5000)
    assert {frame[8:12] for frame in got} == {b"\x00\x00\x00\x01", b"\x00\x00\x00\x02"}


# --- the gRPC answer of delivered messages ---------------------------------------------------------------


def _consumed_extension() -> ModuleType:
    return extension("gateway.grpc._consumed_wire")


def _publish_extension() -> ModuleType:
    return extension("gateway.grpc._publish_wire")


def _same_consumed(batch: list[Any]) -> None:
    expected = error_of(lambda: encode_consumed_py(Delivery(batch)))
    answer = _consumed_extension().encode_consumed(batch)
    if answer is NotImplemented:  # the caller runs the reference: same bytes, same error by construction
        return
    assert expected is None, expected
    assert answer == encode_consumed_py(Delivery(batch))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(consumed_wire_messages, max_size=8), st.booleans())
def test_the_grpc_answer_is_the_same_bytes(batch: list[DeliveredMessage], runs: bool) -> None:
    if runs and batch:  # one run of one partition and shared attributes, as a poll hands it out
        first = batch[0]
        batch = [
            DeliveredMessage(
                first.seq + i,
                first.topic,
                first.partition_key,
                first.broker_id,
                first.partition_id,
                m.message,
                first.attempt,
                first.deadline,
                first.deadline_ms,
            )
            for i, m in enumerate(batch)
        ]
    delivery = runs_of(batch)
    _same_consumed(delivery.runs)
    assert encode_consumed(delivery) == encode_consumed_py(delivery)


@pytest.mark.parametrize(
    "changes",
    ODD_MESSAGE_CHANGES,
    ids=repr,
)
def test_the_grpc_answer_of_odd_messages_is_the_same(changes: dict[str, Any]) -> None:
    _same_consumed(runs_of([delivered_message(**changes), delivered_message()]).runs)
    expected = error_of(lambda: encode_consumed_py(runs_of([delivered_message(**changes)])))
    got = error_of(lambda: encode_consumed(runs_of([delivered_message(**changes)])))
    assert got == expected


def test_another_classs_slot_is_read_as_python_reads_it() -> None:
    batch: Any = [foreign_slot_message()]
    with pytest.raises(TypeError, match="doesn't apply"):
        encode_consumed_py(Delivery(batch))
    assert _consumed_extension().encode_consumed(batch) is NotImplemented
    assert error_of(lambda: encode_consumed(Delivery(batch))) == error_of(
        lambda: encode_consumed_py(Delivery(batch))
    )


# --- the receipts of stored publishes (gateway/grpc/publish_wire.py) --------------------------------------

_receipt_results = st.builds(
    SendResult,
    topic=st.just("t"),
    partition_id=st.integers(-(2**31), 2**31 - 1),
    partition_key=st.sampled_from(["", "1:t:0", "2:t:1", "ż:t:9"]),
    broker_id=st.integers(-(2**31), 2**31 - 1),
    message_id=st.integers(-(2**63), 2**64 - 1),
    append_time_ms=st.sampled_from([0, 1_700_000_000_000, -1]),
    append_offset=st.integers(-(2**63), 2**63 - 1),
    partition_index=st.integers(0, 100),
)


def _same_receipts(tag: int, first: int, outcomes: list[PublishOutcome]) -> None:
    expected = error_of(lambda: encode_stored_py(tag, first, outcomes))
    answer = _publish_extension().encode_receipts(outcomes, first, tag)
    if answer is NotImplemented:  # the caller runs the reference: same bytes, same error by construction
        return
    assert expected is None, expected
    assert answer == encode_stored_py(tag, first, outcomes)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_receipt_results, max_size=12),
    st.integers(0, 2**62),
    st.sampled_from([0x0A, 0x12]),
    st.lists(st.integers(0, 2**40), max_size=12),
)
def test_publish_receipts_are_the_same_bytes(
    results: list[SendResult], first: int, tag: int, indexes: list[int]
) -> None:
    outcomes = [
        PublishOutcome(indexes[i] if i < len(indexes) else i, result=r) for i, r in enumerate(results)
    ]
    _same_receipts(tag, first, outcomes)
    assert encode_stored(tag, first, outcomes) == encode_stored_py(tag, first, outcomes)
    if outcomes and not any(r.message_id >= 2**63 for r in results):  # the compiled path took them
        assert _publish_extension().encode_receipts(outcomes, first, tag) is not NotImplemented


@pytest.mark.parametrize(
    "outcome",
    [
        stored_outcome(partition_key=None),
        stored_outcome(partition_key="\ud800"),
        stored_outcome(broker_id="1"),
        stored_outcome(message_id=2**64),
        stored_outcome(append_offset=-(2**63) - 1),
        stored_outcome(index=-1),
        stored_outcome(index=2**63),
        PublishOutcome(0, error=Unavailable("broker busy")),
    ],
    ids=repr,
)
def test_publish_receipts_of_odd_outcomes_are_the_same(outcome: PublishOutcome) -> None:
    _same_receipts(0x12, 0, [stored_outcome(), outcome])
    expected = error_of(lambda: encode_stored_py(0x12, 5, [outcome]))
    assert error_of(lambda: encode_stored(0x12, 5, [outcome])) == expected


# --- publish requests read (gateway/grpc/publish_wire.py) ----------------------------------------------


def _same_publish(raw: bytes) -> None:
    """The compiled reader gives what the Python one gives, or hands the request back."""
    expected = error_of(lambda: decode_publish_py(raw))
    read = _publish_extension().decode_publish(raw, OutgoingMessage)
    if read is NotImplemented:  # the caller runs the reference: same result, same error by construction
        return
    assert expected is None, expected
    assert PublishBatch(*read) == decode_publish_py(raw)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(max_size=20), st.lists(publish_wire_messages(), max_size=8), st.integers(0, 10_000), st.binary()
)
def test_publish_requests_are_read_alike(topic: str, batch: list[Any], cut: int, noise: bytes) -> None:
    raw = grpc_pb.PublishRequest(topic=topic, messages=batch).SerializeToString()
    read = _publish_extension().decode_publish(raw, OutgoingMessage)
    assert read is not NotImplemented  # what the protobuf library writes is read in C
    assert PublishBatch(*read) == decode_publish_py(raw)
    _same_publish(raw[: len(raw) - cut % (len(raw) + 1)])
    _same_publish(raw + noise)
    _same_publish(noise)
