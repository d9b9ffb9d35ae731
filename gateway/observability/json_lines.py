"""JSON log lines: :class:`JsonFormatter` (one JSON object per record) and a record-less way to write a line
(the access line of every HTTP request: :func:`direct_handler`, :func:`write_direct`).

Building a LogRecord and passing it through the logger and handler was half of an access line's cost (a
microbenchmark: makeRecord 3.2 us, formatting 6.1 us, the dispatch and write the rest of 13.5 us). When the
logging set-up is ``configure_logging``'s, where nothing but the one JSON handler would see the record, the
line is formatted from its fields by the same formatter and written as the handler would write it.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from gateway.observability.request_id import current_request_id
from gateway.service.instance_id import redact_text

__all__ = ["JsonFormatter", "direct_handler", "write_direct"]

#: Attributes every LogRecord has; anything else on a record came from ``extra=`` and is logged as a field.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime", "taskName"}
)
#: Extras that only make sense on a terminal (uvicorn's ANSI-coloured copy of the message).
_DROPPED_EXTRAS = frozenset({"color_message"})


#: Values written to JSON as they are (checked by exact type: the common case, before the general rules).
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    """Make event and extra values JSON-friendly: enums by value, addresses and other objects by str()."""
    if type(value) in _PLAIN or value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


#: What a line's fields are not: the record's own attributes and the dropped extras, in one lookup.
_NOT_FIELDS = _STANDARD_ATTRS | _DROPPED_EXTRAS

#: One encoder for every line: ``json.dumps`` with non-default options builds a new encoder per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class _Timestamps:
    """``ts`` text (UTC, ISO 8601, milliseconds): the date and time to the second are formatted once per
    second, the milliseconds appended (datetime formatting was a tenth of an access line's cost)."""

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        micros = round((created - second) * 1e6)  # as datetime.fromtimestamp rounds, then truncated
        if micros >= 1_000_000:
            second, micros = second + 1, 0
        if second != self._second:
            self._prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            self._second = second
        return f"{self._prefix}.{micros // 1000:03d}+00:00"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; see ``gateway/observability/logging.py``'s docstring for the fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ts = _Timestamps()

    def _head(self, created: float, levelname: str, name: str, message: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "ts": self._ts(created),
            "level": levelname.lower(),
            "logger": name,
            "msg": message,
        }
        request_id = current_request_id()
        if request_id is not None:
            entry["request_id"] = request_id
        return entry

    def format(self, record: logging.LogRecord) -> str:
        entry = self._head(record.created, record.levelname, record.name, record.getMessage())
        for key, value in vars(record).items():
            if key not in _NOT_FIELDS and key not in entry:
                entry[key] = value if type(value) in _PLAIN else _jsonable(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return redact_text(_ENCODE(entry))

    def line(self, created: float, level: int, name: str, message: str, fields: dict[str, Any]) -> str:
        """The line ``format`` writes for a record of ``level`` made at ``created`` by logger ``name`` with
        ``message`` (no arguments, no exception, no stack) and ``fields`` as its extras (none of them a
        LogRecord attribute)."""
        entry = self._head(created, logging.getLevelName(level), name, message)
        for key, value in fields.items():
            if key not in entry:
                entry[key] = value if type(value) in _PLAIN else _jsonable(value)
        return redact_text(_ENCODE(entry))


def direct_handler(log: logging.Logger, level: int) -> logging.StreamHandler[Any] | None:
    """The handler a record of ``level`` logged on ``log`` would reach alone, with nothing on the way that
    could look at or change the record, when that handler is a plain :class:`logging.StreamHandler` with
    a :class:`JsonFormatter` (what ``configure_logging`` installs); else None (another record factory,
    filters, a handler on ``log`` or a logger between it and the root, several handlers, ...). A line
    for it can be written by :func:`write_direct` without a LogRecord."""
    if log.disabled or log.filters or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    node: logging.Logger = log
    while node.parent is not None:
        if node.handlers or not node.propagate:
            return None
        node = node.parent
    handlers = node.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if (
        type(handler) is not logging.StreamHandler
        or type(handler.formatter) is not JsonFormatter
        or handler.filters
        or level < handler.level
    ):
        return None
    return handler


def write_direct(
    handler: logging.StreamHandler[Any], log: logging.Logger, level: int, message: str, fields: dict[str, Any]
) -> None:
    """Write what ``handler`` (from :func:`direct_handler`) would for a record of ``level`` on ``log`` with
    ``message`` and ``fields`` as extras, as StreamHandler.emit writes it (under the handler's lock, then
    flushed), without building the record: only a failed write builds one, for ``handleError``."""
    formatter = handler.formatter
    assert type(formatter) is JsonFormatter
    created = time.time()
    handler.acquire()
    try:
        try:
            line = formatter.line(created, level, log.name, message, fields)
            handler.stream.write(line + handler.terminator)
            handler.flush()
        except RecursionError:
            raise
        except Exception:
            record = log.makeRecord(log.name, level, __file__, 0, message, (), None, extra=fields)
            record.created = created
            handler.handleError(record)
    finally:
        handler.release()
