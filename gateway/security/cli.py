"""``tubemq-gateway keys new --principal NAME [--role R ...]``: make an API key.

Prints the key (shown this once; the gateway stores only its hash) and the JSON entry to add to the
``keys`` list of ``auth.api_keys_file``. Nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gateway.security.api_keys import KeyEntry, hash_key, new_key, parse_keys

__all__ = ["add_keys_parser"]


def add_keys_parser(commands: Any) -> None:
    keys = commands.add_parser(
        "keys",
        help="make API keys for auth.api_keys_file",
        description="Manage API keys. The gateway keeps only SHA-256 hashes of keys in auth.api_keys_file.",
    )
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="<action>")
    new = actions.add_parser(
        "new",
        help="print a fresh random key and its keys-file entry",
        description="Print a fresh random API key (shown only this once: hand it to the client) and the "
        "JSON entry to add to the keys list of auth.api_keys_file.",
    )
    new.add_argument("--principal", required=True, help="the principal the key authenticates as")
    new.add_argument(
        "--role", action="append", default=[], metavar="ROLE", help="a role for rules to grant on (repeat)"
    )
    new.set_defaults(handler=_new, fail=new.error)


def _new(args: argparse.Namespace) -> int:
    key = new_key()
    entry = KeyEntry(args.principal, hash_key(key), tuple(args.role))
    try:
        parse_keys({"keys": [entry.to_json()]}, "the new entry")
    except ValueError as exc:
        args.fail(str(exc))
    print(f"key: {key}")
    print("  (shown only now; the gateway stores its hash. Send it as 'Authorization: Bearer <key>'.)")
    print(f'entry for the "keys" list of auth.api_keys_file:\n{json.dumps(entry.to_json())}')
    sys.stdout.flush()
    return 0
