"""The time of a seek by time: what a client may send and the ``$msgTime$`` minute it is compared with.

A client names the time as Unix milliseconds (an integer) or as RFC 3339 text with its UTC offset
(``2026-11-27T01:30:00Z``, ``2026-11-27T09:30:00+08:00``). Messages carry the ``$msgTime$`` their producer
stamped: ``yyyyMMddHHmm`` on the producer's local wall clock, without a zone (the Java client's
``DateTimeConvertUtils`` formats with the JVM's default zone; this gateway's producer with its local zone).
So the time is turned into that text in ``timeZone`` (an IANA name, default: the gateway's local zone) and
truncated to its minute: a seek to 01:30:45 lands on the first message stamped 01:30 or later.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.service.errors import InvalidInput

__all__ = ["MAX_TIME_MS", "minute_text", "parse_time"]

#: 9999-12-31T23:59:59.999Z, the last instant ``yyyyMMddHHmm`` can spell
MAX_TIME_MS = 253_402_300_799_999
_MAX_TEXT = 64


def parse_time(value: object, field: str = "time") -> int:
    """Unix milliseconds from an integer (ms) or RFC 3339 text with a UTC offset; InvalidInput naming
    ``field`` otherwise."""
    if isinstance(value, bool):
        raise InvalidInput(f"{field} must be Unix milliseconds or RFC 3339 text", field=field)
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        ms = _parse_text(value, field)
    else:
        raise InvalidInput(f"{field} must be Unix milliseconds or RFC 3339 text", field=field)
    if not 0 <= ms <= MAX_TIME_MS:
        raise InvalidInput(f"{field} must be 0 to {MAX_TIME_MS} ms (1970 to 9999)", field=field)
    return ms


def _parse_text(text: str, field: str) -> int:
    shown = repr(text[:40])
    if len(text) > _MAX_TEXT or not text.isascii():
        raise InvalidInput(f"{field} {shown} is not RFC 3339 text (e.g. 2026-11-27T01:30:00Z)", field=field)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"{field} {shown} is not RFC 3339 text (e.g. 2026-11-27T01:30:00Z)", field=field
        ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput(f"{field} {shown} needs its UTC offset (Z or +hh:mm)", field=field)
    try:
        delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    except OverflowError:
        raise InvalidInput(f"{field} {shown} is out of range", field=field) from None
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def minute_text(ms: int, zone: str | None, field: str = "time_zone") -> str:
    """``yyyyMMddHHmm`` of Unix ``ms`` on the wall clock of IANA ``zone`` (None: the gateway's local zone),
    truncated to the minute."""
    instant = datetime.fromtimestamp(ms // 1000, UTC)
    target = None if zone is None else _zone(zone, field)
    try:
        local = instant.astimezone(target)
    except (OverflowError, ValueError):
        raise InvalidInput(f"the time is out of range in {zone or 'the local zone'}", field="time") from None
    return f"{local.year:04d}{local.month:02d}{local.day:02d}{local.hour:02d}{local.minute:02d}"


def _zone(name: str, field: str) -> ZoneInfo:
    if not name or len(name) > _MAX_TEXT or not name.isascii() or not name.isprintable():
        raise InvalidInput(
            f"{field} must be an IANA time zone name such as UTC or Asia/Shanghai", field=field
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(
            f"{field} {name[:40]!r} is not an IANA time zone name known here (e.g. UTC, Asia/Shanghai)",
            field=field,
        ) from None
