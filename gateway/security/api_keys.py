"""API keys: stored as SHA-256 hashes only, each naming its principal and roles.

The keys file (``auth.api_keys_file``) is JSON::

    {"keys": [{"principal": "alice", "hash": "sha256:<64 lower-case hex>", "roles": ["publisher"]}]}

where the hash is SHA-256 of the key's UTF-8 bytes. Keys are random, high-entropy strings
(:func:`new_key`: 256 random bits), so a fast unsalted hash is right: there is nothing to guess, and it
keeps the check cheap. ``tubemq-gateway keys new`` prints a fresh key once together with its entry.

A presented key is hashed and its digest looked up in a table built once from the file (the verified
hashes); the stored digest is then compared with :func:`hmac.compare_digest`, so no comparison of secret
material stops early on a matching prefix. A request costs one SHA-256 of a short string and one dictionary
lookup (``bench/bench_auth.py`` measures it); the clear key is never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.security.jsonfile import read_json
from gateway.service.errors import Unauthenticated
from gateway.service.principal import Principal

__all__ = ["KEY_PREFIX", "ApiKeyAuthenticator", "KeyEntry", "hash_key", "load_keys", "new_key"]

#: Every generated key starts with this, so that secret scanners can spot leaked keys and the gateway can
#: tell a key from a JWT at a glance.
KEY_PREFIX = "tmq_"
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")


@dataclass(frozen=True, slots=True)
class KeyEntry:
    principal: str
    hash: str
    roles: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"principal": self.principal, "hash": self.hash, "roles": list(self.roles)}


def hash_key(key: str) -> str:
    """The stored form of ``key``: ``sha256:`` and the lower-case hex SHA-256 of its UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh random API key (256 bits, URL-safe)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _entry(item: object, where: str) -> KeyEntry:
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected an object with principal, hash and roles")
    principal, digest, roles = item.get("principal"), item.get("hash"), item.get("roles", [])
    if not isinstance(principal, str) or not _NAME.match(principal):
        raise ValueError(f"{where}: principal must be a non-empty string without control characters")
    if not isinstance(digest, str) or not _HASH.match(digest):
        raise ValueError(
            f"{where}: hash must be 'sha256:' and 64 lower-case hex digits (run `tubemq-gateway keys new`)"
        )
    if not isinstance(roles, list) or not all(isinstance(r, str) and _NAME.match(r) for r in roles):
        raise ValueError(f"{where}: roles must be a list of role names")
    unknown = sorted(set(item) - {"principal", "hash", "roles", "comment"})
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown} (allowed: principal, hash, roles, comment)")
    return KeyEntry(principal, digest, tuple(roles))


def parse_keys(data: object, source: str = "the API keys") -> list[KeyEntry]:
    """Entries of a parsed keys document; raises ValueError naming ``source`` and the bad entry."""
    if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
        raise ValueError(f'{source}: expected {{"keys": [{{"principal", "hash", "roles"}}, ...]}}')
    entries = [_entry(item, f"{source}: keys[{i}]") for i, item in enumerate(data["keys"])]
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.hash in seen:
            raise ValueError(f"{source}: keys[{i}] repeats the hash of keys[{seen[entry.hash]}]")
        seen[entry.hash] = i
    return entries


def load_keys(path: Path) -> list[KeyEntry]:
    """Read the keys file; raises ValueError saying what is wrong (never echoing a hash)."""
    return parse_keys(read_json(path, "auth.api_keys_file"), f"auth.api_keys_file {path}")


class ApiKeyAuthenticator:
    """Maps a presented key to its principal."""

    def __init__(self, entries: Iterable[KeyEntry]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, Principal]] = {}
        for entry in entries:
            digest = bytes.fromhex(entry.hash.removeprefix("sha256:"))
            principal = Principal(entry.principal, "api_key", roles=frozenset(entry.roles))
            self._by_digest[digest] = (digest, principal)

    def __repr__(self) -> str:
        return f"<ApiKeyAuthenticator keys={len(self._by_digest)}>"

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate(self, key: str) -> Principal:
        """The key's principal; raises Unauthenticated (without repeating the key) for an unknown key."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            raise Unauthenticated(
                "unknown API key: send a key listed in auth.api_keys_file (create one with "
                "`tubemq-gateway keys new`)"
            )
        return found[1]

    @property
    def principals(self) -> Sequence[Principal]:
        return [p for _, p in self._by_digest.values()]
