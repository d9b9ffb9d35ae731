"""Options of the ``tubemq`` Spark data source, parsed and checked once on the driver.

* ``masters``: master addresses ``host:port[,host:port...]`` (port 8715 when left out); required unless
  ``gateway`` is given.
* ``gateway``: base URL of a tubemq-gateway (``http://host:8080``); executors then read and write through
  its REST API instead of talking to brokers.
* ``gatewayToken``: with ``gateway``, the API key (or JWT) sent as ``Authorization: Bearer`` when the
  gateway requires authentication (the principal needs ``read_ranges`` to read, ``publish`` to write).
  Spark's default ``spark.redaction.regex`` hides options named like ``token`` in its UI and logs.
* ``topic``: the topic, or several as a comma list (Spark's Kafka source calls that ``subscribe``, which is
  accepted too; both may be given and their topics add up). Writing needs exactly one topic.
* ``startingOffsets``: ``earliest``, ``latest`` or JSON ``{"brokerId:topic:partitionId": offset}`` where -2
  means earliest and -1 latest; a partition left out of the JSON starts at earliest. Default: ``earliest``
  for batch reads, ``latest`` for streams.
* ``endingOffsets``: batch reads only (a stream refuses it, as Kafka's does); ``latest`` (default) or JSON
  as above (a partition left out ends at latest). Ends past the store's current end are cut to it.

JSON offsets are index offsets: multiples of 28 (one 28-byte index entry per message); any other value is
refused rather than rounded. A JSON key must name a partition the topics have when the read is planned.
* ``maxMessagesPerTrigger`` (or Kafka's name ``maxOffsetsPerTrigger``: one offset step, a 28-byte index
  entry, is one message): streams; a micro-batch holds exactly this many messages when that many are
  waiting (see :mod:`gateway.spark.stream_reader` for the one case where it holds fewer).
* ``failOnDataLoss``: ``true`` (default) fails the query when messages it should read are gone: a checkpoint
  past its partition's end (the store was lost or replaced) or before its oldest retained message (expired);
  ``false`` logs a warning and reads on from what exists (from the oldest message after a replaced store).
* ``minPartitions``: at least this many Spark tasks per read; large ranges are split (exactly) to get there.
* ``streamId``: only messages with one of these stream ids (``$msgType$``; a comma list, at most 500, each
  at most 256 characters), filtered by the broker (TubeMQ's filter items): messages of other stream ids, or
  sent without one, are not fetched. A batch query's ``where stream_id = 'x'`` or ``stream_id in (...)``
  does the same when ``spark.sql.python.filterPushdown.enabled`` is true (see
  :mod:`gateway.spark.batch_reader`).
* ``timeout``: seconds for one TubeMQ or gateway call (default 10).
* ``groupPrefix``: prefix of the private consumer groups range reads use (default ``tubemq_spark``).
* ``writeBatchRows``, ``writeBatchBytes``: writes send a task's rows in batches of at most this many rows
  (default 1000) and this many bytes of values and attribute text (default 4 MiB; a row larger than that
  goes alone); see :mod:`gateway.spark.batches`.
* ``tls`` (``true``/``false``), ``tls.caFile``, ``tls.certFile``, ``tls.keyFile``, ``tls.serverHostname``,
  ``tls.verify``, ``auth.username``, ``auth.password``: TLS and authentication towards TubeMQ, as the
  gateway's ``tubemq`` settings (docs/security.md, "TLS and authentication towards TubeMQ"); files are read
  where the task runs. Spark redacts options named like ``password`` in its UI and logs.

Offsets are broker index offsets (see :mod:`gateway.tubemq.ranges.reader`).

Every option must be one of :data:`KNOWN_OPTIONS` (Spark's own ``checkpointLocation`` and ``queryName`` of
a stream write pass too); any other name is refused with the list of known ones, so a misspelt or a Kafka
option that means nothing here does not pass silently.

Kafka options TubeMQ cannot honour are refused with the reason (:data:`REFUSED_OPTIONS`): starting or ending
by timestamp (the broker's binary protocol has no time-to-offset look-up; only its admin web API has one),
``subscribePattern`` (a client cannot list the master's topics) and ``assign``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.config import TubeMQSettings
from gateway.tubemq.consumer import INDEX_ENTRY_SIZE
from gateway.tubemq.names import check_group_prefix

__all__ = [
    "DEFAULT_WRITE_BATCH_BYTES",
    "DEFAULT_WRITE_BATCH_ROWS",
    "EARLIEST",
    "KNOWN_OPTIONS",
    "LATEST",
    "REFUSED_OPTIONS",
    "OffsetSpec",
    "SourceOptions",
    "parse_offset_spec",
]

EARLIEST = -2
LATEST = -1

DEFAULT_WRITE_BATCH_ROWS = 1000
"""Rows of one write batch unless ``writeBatchRows`` says otherwise (a gateway's default request limit)."""
DEFAULT_WRITE_BATCH_BYTES = 4 * 1024 * 1024
"""Bytes of one write batch unless ``writeBatchBytes`` says otherwise."""

KNOWN_OPTIONS = (
    "masters",
    "gateway",
    "gatewayToken",
    "topic",
    "subscribe",
    "startingOffsets",
    "endingOffsets",
    "maxMessagesPerTrigger",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "minPartitions",
    "streamId",
    "timeout",
    "groupPrefix",
    "writeBatchRows",
    "writeBatchBytes",
    "tls",
    "tls.caFile",
    "tls.certFile",
    "tls.keyFile",
    "tls.serverHostname",
    "tls.verify",
    "auth.username",
    "auth.password",
)
"""Every option the source reads (the module docstring says what each means); names are case-insensitive."""

_SPARK_OWN = frozenset({"checkpointlocation", "queryname"})
"""Options Spark itself adds to a stream write's options."""

_BY_TIME = (
    "TubeMQ cannot start or end a read at a time: its broker protocol has no time-to-offset look-up (only "
    "the broker's admin web API has one); use startingOffsets/endingOffsets with index offsets instead"
)
REFUSED_OPTIONS = {
    "startingtimestamp": _BY_TIME,
    "startingoffsetsbytimestamp": _BY_TIME,
    "startingoffsetsbytimestampstrategy": _BY_TIME,
    "endingtimestamp": _BY_TIME,
    "endingoffsetsbytimestamp": _BY_TIME,
    "subscribepattern": (
        "TubeMQ clients cannot list the master's topics, so a pattern cannot be resolved: name the topics "
        "in option 'topic' (or 'subscribe') as a comma list"
    ),
    "assign": (
        "TubeMQ partitions are assigned by key: name the topics in option 'topic' and pick partitions with "
        'startingOffsets JSON {"brokerId:topic:partitionId": offset}'
    ),
}
"""Kafka source options (lower case) whose meaning TubeMQ cannot provide, with the reason given."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where ranges start or end: ``default`` (EARLIEST or LATEST) for partitions ``per_partition`` does not
    name; values there are offsets >= 0, or EARLIEST / LATEST."""

    default: int
    per_partition: Mapping[str, int]

    def resolve(self, key: str, earliest: int, latest: int) -> int:
        """The offset for partition ``key`` given its store's bounds; a fixed offset is kept as given."""
        value = self.per_partition.get(key, self.default)
        if value == EARLIEST:
            return earliest
        if value == LATEST:
            return latest
        return value


def parse_offset_spec(
    text: str | None, default: int, option: str, json_default: int | None = None
) -> OffsetSpec:
    """Parse ``earliest`` / ``latest`` / JSON; ``default`` applies when ``text`` is empty, ``json_default``
    (else ``default``) to partitions a JSON object leaves out. Raises ValueError naming ``option``."""
    if text is None or not text.strip():
        return OffsetSpec(default, {})
    word = text.strip().lower()
    if word == "earliest":
        return OffsetSpec(EARLIEST, {})
    if word == "latest":
        return OffsetSpec(LATEST, {})
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"{option} must be 'earliest', 'latest' or a JSON object, got {text!r}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{option} JSON must be an object of partition key -> offset")
    offsets: dict[str, int] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise ValueError(f"{option}: offset of {key!r} must be an integer >= -2, got {value!r}")
        if value >= 0 and value % INDEX_ENTRY_SIZE:
            step = INDEX_ENTRY_SIZE
            below = value - value % step
            raise ValueError(
                f"{option}: offset {value} of {key!r} is not an index offset (a multiple of {step}: one "
                f"index entry per message); the entries around it start at {below} and {below + step}"
            )
        if key.count(":") != 2:
            raise ValueError(f"{option}: {key!r} is not a partition key brokerId:topic:partitionId")
        offsets[key] = value
    return OffsetSpec(default if json_default is None else json_default, offsets)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The checked options (module docstring); picklable, so tasks carry them to executors."""

    topics: tuple[str, ...]
    masters: str | None
    gateway: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_messages_per_trigger: int | None
    timeout: float
    group_prefix: str
    tubemq: TubeMQSettings = field(default_factory=TubeMQSettings)
    gateway_token: str | None = field(default=None, repr=False)
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    stream_ids: tuple[str, ...] = ()
    """Only these stream ids (empty: all)."""
    write_batch_rows: int = DEFAULT_WRITE_BATCH_ROWS
    write_batch_bytes: int = DEFAULT_WRITE_BATCH_BYTES

    @property
    def topic(self) -> str:
        """The one topic a write goes to (ValueError when the options name several)."""
        if len(self.topics) != 1:
            raise ValueError(f"writing needs exactly one topic in option 'topic', got {list(self.topics)}")
        return self.topics[0]

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
        """Read Spark's options (keys are case-insensitive); raises ValueError for a bad or missing one."""
        lower = {k.lower(): v for k, v in options.items()}
        _check_names(options, lower, streaming=streaming)
        topics = _topics(lower)
        masters = (lower.get("masters") or "").strip() or None
        gateway = (lower.get("gateway") or "").strip().rstrip("/") or None
        if masters is None and gateway is None:
            raise ValueError("give option 'masters' (host:port,...) or option 'gateway' (http://host:port)")
        if gateway is not None and not gateway.startswith(("http://", "https://")):
            raise ValueError(f"option 'gateway' must be an http:// or https:// URL, got {gateway!r}")
        cap = _positive_int(lower, "maxmessagespertrigger", "maxMessagesPerTrigger")
        offsets_cap = _positive_int(lower, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
        if cap is not None and offsets_cap is not None and cap != offsets_cap:
            raise ValueError(
                f"maxMessagesPerTrigger ({cap}) and maxOffsetsPerTrigger ({offsets_cap}) mean the same "
                "here (one index offset step per message): give one of them"
            )
        cap = cap if cap is not None else offsets_cap
        timeout = float(lower.get("timeout") or 10.0)
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        prefix = (lower.get("groupprefix") or "tubemq_spark").strip()
        check_group_prefix(prefix, "option 'groupPrefix'")
        token = (lower.get("gatewaytoken") or "").strip() or None
        if token is not None and gateway is None:
            raise ValueError("option 'gatewayToken' needs option 'gateway'")
        return cls(
            topics=topics,
            masters=masters,
            gateway=gateway,
            starting=parse_offset_spec(
                lower.get("startingoffsets"), LATEST if streaming else EARLIEST, "startingOffsets", EARLIEST
            ),
            ending=parse_offset_spec(lower.get("endingoffsets"), LATEST, "endingOffsets"),
            max_messages_per_trigger=cap,
            timeout=timeout,
            group_prefix=prefix,
            tubemq=_tubemq_settings(lower),
            gateway_token=token,
            fail_on_data_loss=_boolean(lower, "failondataloss", "failOnDataLoss", default=True),
            min_partitions=_positive_int(lower, "minpartitions", "minPartitions"),
            stream_ids=stream_id_filter(lower.get("streamid") or "", "streamId"),
            write_batch_rows=_positive_int(lower, "writebatchrows", "writeBatchRows")
            or DEFAULT_WRITE_BATCH_ROWS,
            write_batch_bytes=_positive_int(lower, "writebatchbytes", "writeBatchBytes")
            or DEFAULT_WRITE_BATCH_BYTES,
        )


_KNOWN_LOWER = frozenset(name.lower() for name in KNOWN_OPTIONS)


def _check_names(options: Mapping[str, str], lower: Mapping[str, str], *, streaming: bool) -> None:
    """Refuse Kafka options TubeMQ cannot honour (with the reason), ``endingOffsets`` on a stream, and any
    name that is not a known option (naming the known ones)."""
    refused = sorted(set(lower) & set(REFUSED_OPTIONS))
    if refused:
        raise ValueError(f"option {refused[0]!r} is not supported: {REFUSED_OPTIONS[refused[0]]}")
    if streaming and "endingoffsets" in lower:
        raise ValueError(
            "option 'endingOffsets' is for batch reads only: a stream reads on as messages arrive (use "
            "spark.read for a fixed range, or trigger(availableNow=True) to stop at what is there now)"
        )
    unknown = sorted(k for k in options if k.lower() not in _KNOWN_LOWER | _SPARK_OWN)
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r} for format('tubemq'); the known options are: "
            + ", ".join(KNOWN_OPTIONS)
        )


MAX_STREAM_IDS = 500
MAX_STREAM_ID_LENGTH = 256


def stream_id_filter(text: str | Sequence[str], name: str) -> tuple[str, ...]:
    """Stream ids to filter on (a comma list or the values of a pushed-down filter), sorted, each once;
    ValueError naming ``name`` past TubeMQ's limits (§6.10: 500 items of at most 256 characters)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    ids = tuple(sorted({item.strip() for item in items if item.strip()}))
    if len(ids) > MAX_STREAM_IDS:
        raise ValueError(f"{name}: at most {MAX_STREAM_IDS} stream ids, got {len(ids)}")
    long = [item for item in ids if len(item) > MAX_STREAM_ID_LENGTH]
    if long:
        raise ValueError(
            f"{name}: stream id {long[0][:40]!r}... is longer than {MAX_STREAM_ID_LENGTH} characters"
        )
    return ids


def _topics(lower: Mapping[str, str]) -> tuple[str, ...]:
    """The topics of ``topic`` and ``subscribe`` (comma lists), in order, each once."""
    named = [t.strip() for key in ("topic", "subscribe") for t in (lower.get(key) or "").split(",")]
    topics = tuple(dict.fromkeys(t for t in named if t))
    if not topics:
        raise ValueError("option 'topic' is required: a topic or a comma list of topics")
    return topics


def _positive_int(lower: Mapping[str, str], key: str, name: str) -> int | None:
    text = (lower.get(key) or "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _boolean(lower: Mapping[str, str], key: str, name: str, *, default: bool) -> bool:
    text = (lower.get(key) or "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise ValueError(f"{name} must be 'true' or 'false', got {lower[key]!r}")
    return text == "true"


_TLS_OPTIONS = {
    "tls.cafile": "ca_file",
    "tls.certfile": "cert_file",
    "tls.keyfile": "key_file",
    "tls.serverhostname": "server_hostname",
    "tls.verify": "verify",
}


def _tubemq_settings(lower: Mapping[str, str]) -> TubeMQSettings:
    """The ``tls*`` and ``auth.*`` options as the gateway's ``tubemq`` settings (ValueError when wrong)."""
    tls: dict[str, str] = {name: lower[key] for key, name in _TLS_OPTIONS.items() if lower.get(key)}
    if lower.get("tls"):
        tls["enabled"] = lower["tls"]
    auth = {name: lower[f"auth.{name}"] for name in ("username", "password") if lower.get(f"auth.{name}")}
    return TubeMQSettings.model_validate({"tls": tls, "auth": auth})
