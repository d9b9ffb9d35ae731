"""Consumer instance ids that name the gateway replica owning the instance.

Several replicas serve one consumer group behind a plain load balancer. A request for an instance can land on
any of them, so the id itself says where the instance lives: ``{owner}.{nonce}.{tag}``, all base64url without
padding, where

* ``owner`` is the owning replica's advertised base URL (``http://10.0.0.7:8080``); when the replica runs
  several worker processes (``serve --workers N``), followed by ``#`` and the owning worker's index
  (``http://10.0.0.7:8080#2``: a fragment, never part of a URL that is connected to), and, when the replica
  serves gRPC, ``;`` and its gRPC port (``http://10.0.0.7:8080#2;9090``, ``http://10.0.0.7:8080#;9090``
  without workers), where another replica relays the instance's gRPC calls,
* ``nonce`` is 16 random bytes, and
* ``tag`` is the first 12 bytes of ``HMAC-SHA256(secret, group "\\n" owner "." nonce)``.

The tag binds the id to its group (an id used under another group's path is malformed) and, with a secret
shared by the replicas, stops a forged id from making a replica send requests to an arbitrary address. Without
a secret the tag still catches typos and truncation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "InstanceRef",
    "MalformedInstanceId",
    "decode_instance_id",
    "new_instance_id",
    "normalize_base_url",
    "redact",
    "redact_text",
]

NONCE_BYTES = 16
TAG_BYTES = 12
#: owner URLs longer than this are refused when decoding (an id travels in a URL path)
MAX_OWNER_URL = 512
#: characters of an id that logs keep (its end: the start encodes the owner URL, the same for every id of
#: a replica); the rest is the bearer-like part and never reaches a log line
REDACTED_KEEP = 8


class MalformedInstanceId(ValueError):
    """The text is not an instance id of this group (bad shape, bad owner URL, or a tag mismatch)."""


#: worker indexes an id may name (``serve --workers`` allows fewer)
MAX_WORKER = 9999


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """A decoded instance id: the id text itself, the owner replica's base URL and, when the replica runs
    several worker processes, the owning worker's index; the owner's gRPC port when it serves gRPC."""

    instance_id: str
    owner_url: str
    worker: int | None = None
    grpc_port: int | None = None


def normalize_base_url(url: str) -> str:
    """Check an advertised base URL (``http(s)://host[:port]``, no path, query or credentials) and return it
    without a trailing slash. Raises ValueError naming the problem."""
    text = url.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"advertised URL {url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"advertised URL {url!r} must look like http://host:port")
    if (
        parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or parts.password is not None
    ):
        raise ValueError(f"advertised URL {url!r} must not carry a path, query, fragment or credentials")
    if port == 0:
        raise ValueError(f"advertised URL {url!r} has port 0")
    return text


def new_instance_id(
    group: str, owner_url: str, secret: bytes = b"", worker: int | None = None, grpc_port: int | None = None
) -> str:
    """A fresh id for an instance of ``group`` owned by the replica at ``owner_url`` (normalized) and, in a
    replica of several worker processes, by its worker ``worker``; ``grpc_port``: the replica's gRPC port."""
    if worker is not None and not 0 <= worker <= MAX_WORKER:
        raise ValueError(f"worker index {worker} is not in 0..{MAX_WORKER}")
    if grpc_port is not None and not 0 < grpc_port < 65536:
        raise ValueError(f"gRPC port {grpc_port} is not in 1..65535")
    text = owner_url
    if worker is not None or grpc_port is not None:
        text += "#" + ("" if worker is None else str(worker))
        if grpc_port is not None:
            text += f";{grpc_port}"
    owner = _b64(text.encode("utf-8"))
    nonce = _b64(secrets.token_bytes(NONCE_BYTES))
    return f"{owner}.{nonce}.{_tag(secret, group, owner, nonce)}"


def decode_instance_id(group: str, instance_id: str, secret: bytes = b"") -> InstanceRef:
    """Verify an id against ``group`` and the shared ``secret``; raises MalformedInstanceId."""
    pieces = instance_id.split(".")
    if len(pieces) != 3 or not all(pieces):
        raise MalformedInstanceId("an instance id has three dot-separated parts")
    owner, nonce, tag = pieces
    if len(owner) > MAX_OWNER_URL * 4 // 3 + 4:
        raise MalformedInstanceId("the instance id is too long")
    # as bytes: compare_digest refuses a str with non-ASCII characters (a hostile id gets 404, not a crash)
    if not hmac.compare_digest(tag.encode(), _tag(secret, group, owner, nonce).encode()):
        raise MalformedInstanceId(f"the instance id does not belong to group {group!r} (or was altered)")
    try:
        owner_url = _unb64(owner).decode("utf-8")
        nonce_bytes = _unb64(nonce)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise MalformedInstanceId("the instance id is not base64url text") from None
    if len(nonce_bytes) != NONCE_BYTES:
        raise MalformedInstanceId("the instance id's nonce has the wrong length")
    owner_url, hashed, fragment = owner_url.partition("#")
    worker_text, has_port, port_text = fragment.partition(";")
    worker: int | None = None
    grpc_port: int | None = None
    if has_port:
        grpc_port = _number(port_text, "gRPC port", 5)
        if not 0 < grpc_port < 65536:
            raise MalformedInstanceId("the instance id's gRPC port is out of range")
    if worker_text or (hashed and not has_port):
        worker = _number(worker_text, "worker index", len(str(MAX_WORKER)))
    try:
        checked = normalize_base_url(owner_url)
    except ValueError as exc:
        raise MalformedInstanceId(str(exc)) from None
    if checked != owner_url:
        raise MalformedInstanceId("the instance id's owner URL is not normalized")
    return InstanceRef(instance_id, owner_url, worker, grpc_port)


def _number(text: str, what: str, digits: int) -> int:
    """A canonical decimal number of at most ``digits`` digits; raises MalformedInstanceId."""
    canonical = text == "0" or not text.startswith("0")
    if not (text.isascii() and text.isdigit() and canonical and len(text) <= digits):
        raise MalformedInstanceId(f"the instance id's {what} is not a number")
    return int(text)


def redact(instance_id: str) -> str:
    """What logs show of an instance id: ``...`` and its last few characters (none of a short text), enough
    to tell instances apart in a log, not enough to use one."""
    return "..." + (instance_id[-REDACTED_KEEP:] if len(instance_id) > 2 * REDACTED_KEEP else "")


#: an instance id inside any text: owner, 22-character nonce, 16-character tag (see the module docstring)
_ID_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{16}(?![A-Za-z0-9_-])"
)


#: a cheap first look (a nonce between dots), so that lines without an id cost under a microsecond
_NONCE_IN_TEXT = re.compile(r"\.[A-Za-z0-9_-]{22}\.")


def redact_text(text: str) -> str:
    """``text`` with every instance id in it redacted (log lines, URL paths, tracebacks)."""
    if _NONCE_IN_TEXT.search(text) is None:
        return text
    return _ID_IN_TEXT.sub(lambda match: redact(match.group()), text)


def _tag(secret: bytes, group: str, owner: str, nonce: str) -> str:
    signed = f"{group}\n{owner}.{nonce}".encode()
    return _b64(hmac.new(secret, signed, hashlib.sha256).digest()[:TAG_BYTES])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii() or any(ch in text for ch in "+/="):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
