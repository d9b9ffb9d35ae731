"""Authorization rules: which principals may do which actions on which topics and consumer groups.

The rules file (``auth.rules_file``) is JSON::

    {"rules": [
      {"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]},
      {"principals": ["api_key:billing"], "actions": ["publish", "describe"], "topics": ["orders_*"]},
      {"principals": ["jwt:svc-42", "mtls:CN=ingest,O=Acme"], "actions": ["publish"], "topics": ["in_*"]},
      {"scopes": ["tubemq.consume"], "actions": ["consume"], "topics": ["*"], "groups": ["*"]},
      {"claims": {"tenant": "acme"}, "actions": ["consume"], "topics": ["acme_*"], "groups": ["acme_*"]}
    ]}

A rule applies to a principal named in ``principals``, or holding one of ``roles`` (API key roles, JWT
roles from ``auth.jwt.roles_claim``), or one of ``scopes`` (a JWT's OAuth ``scope`` / ``scp``: scopes are
never roles), or whose verified JWT ``claims`` have every listed value (a list claim must contain it; dots
descend into objects; values compare with their JSON types: ``true`` is not ``1``, ``"1"`` is not ``1``).
A principal is named with its authentication method, ``<method>:<name>`` (:attr:`Principal.label`):
``api_key:<principal of the keys file>``, ``jwt:<subject>`` (of the configured issuer), ``mtls:<certificate
subject>``, so a JWT whose subject is ``alice`` is not the API key principal ``alice``. ``"*"`` in
``principals`` means every authenticated principal. A bare name (the form before methods were part of a
principal) is refused with the message saying which forms to write (docs/security.md: migrating a rules
file). ``actions`` are those of :mod:`gateway.service.access` or ``"*"``. ``topics`` and ``groups`` are
fnmatch-style patterns (``*``, ``?``, ``[...]``, case-sensitive); ``consume`` and ``manage_subscriptions``
need both to match,
``publish``, ``read_ranges`` and ``describe`` need ``topics``; ``describe_cluster`` and ``admin`` take no
resource. Nothing is allowed unless a rule allows it; there are no deny rules.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.security.jsonfile import read_json
from gateway.service.access import ACTIONS, ADMIN, DESCRIBE_CLUSTER, GROUP_ACTIONS
from gateway.service.errors import PermissionDenied
from gateway.service.principal import AUTH_METHODS, Principal

__all__ = ["Rule", "RuleSet", "claim_matches", "claim_values", "load_rules", "parse_principal", "parse_rules"]

_TOPIC_ACTIONS = ACTIONS - {DESCRIBE_CLUSTER, ADMIN}
_FIELDS = frozenset({"principals", "roles", "scopes", "claims", "actions", "topics", "groups", "comment"})

Matcher = Callable[[str], bool]


def _matcher(patterns: list[str]) -> Matcher | None:
    if not patterns:
        return None
    if "*" in patterns:
        return lambda _: True
    regex = re.compile("|".join(fnmatch.translate(p) for p in patterns))
    return lambda value: regex.match(value) is not None


def claim_values(claims: Mapping[str, object], path: str) -> list[object]:
    """The value(s) of the claim at ``path`` (dots descend into objects); a list gives its items."""
    node: object = claims
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]
    return list(node) if isinstance(node, list) else [node]


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def claim_matches(claims: Mapping[str, object], path: str, wanted: object) -> bool:
    """Whether the claim at ``path`` is (or, a list, holds) ``wanted``, compared with JSON types: Python's
    ``True == 1`` must not let a token's ``1`` satisfy a rule's ``true``."""
    kind = _json_kind(wanted)
    return any(_json_kind(v) == kind and v == wanted for v in claim_values(claims, path))


def parse_principal(name: str, where: str) -> str:
    """A rule's (or an override's) principal name: ``*`` or ``<method>:<name>``; raises ValueError saying
    how to write a bare name."""
    method, colon, rest = name.partition(":")
    if name == "*" or (colon and method in AUTH_METHODS and rest):
        return name
    raise ValueError(
        f"{where}: principal {name!r} does not say how it authenticates: write 'api_key:{name}' (a "
        f"principal of auth.api_keys_file), 'jwt:{name}' (a JWT subject) or 'mtls:{name}' (a client "
        "certificate subject); see docs/security.md, migrating a rules file"
    )


@dataclass(frozen=True, slots=True)
class Rule:
    principals: frozenset[str]  # labels (``api_key:alice``) or ``*``
    roles: frozenset[str]
    scopes: frozenset[str]
    claims: tuple[tuple[str, object], ...]
    actions: frozenset[str]
    topics: Matcher | None  # None: no topic patterns (grants no topic action)
    groups: Matcher | None  # None: no group patterns (grants no consume)
    index: int

    def applies_to(self, principal: Principal) -> bool:
        if principal.label in self.principals or ("*" in self.principals and not principal.anonymous):
            return True
        if self.roles and not self.roles.isdisjoint(principal.roles):
            return True
        if self.scopes and not self.scopes.isdisjoint(principal.scopes):
            return True
        return bool(self.claims) and all(
            claim_matches(principal.claims, name, value) for name, value in self.claims
        )

    def grants(self, action: str, topic: str | None, group: str | None) -> bool:
        if action not in self.actions and "*" not in self.actions:
            return False
        if action in _TOPIC_ACTIONS:
            if self.topics is None or (topic is not None and not self.topics(topic)):
                return False
            if action in GROUP_ACTIONS and (
                self.groups is None or (group is not None and not self.groups(group))
            ):
                return False
        return True


def _strings(item: Mapping[str, object], name: str, where: str) -> list[str]:
    value = item.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: {name} must be a list of non-empty strings")
    return list(value)


def _rule(item: object, index: int, source: str) -> Rule:
    where = f"{source}: rules[{index}]"
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected an object")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown} (allowed: {sorted(_FIELDS)})")
    principals = [parse_principal(p, f"{where}.principals") for p in _strings(item, "principals", where)]
    roles, scopes = _strings(item, "roles", where), _strings(item, "scopes", where)
    claims = item.get("claims", {})
    if not isinstance(claims, Mapping) or not all(
        isinstance(v, str | int | float | bool) for v in claims.values()
    ):
        raise ValueError(f"{where}: claims must map claim names to strings, numbers or booleans")
    if not (principals or roles or scopes or claims):
        raise ValueError(f"{where}: name whom it applies to with principals, roles, scopes or claims")
    actions = _strings(item, "actions", where)
    bad = sorted(set(actions) - ACTIONS - {"*"})
    if bad or not actions:
        raise ValueError(f"{where}: actions {bad or actions} are not among {sorted(ACTIONS)} or '*'")
    topics, groups = _strings(item, "topics", where), _strings(item, "groups", where)
    if not topics and _TOPIC_ACTIONS & set(actions):
        raise ValueError(f"{where}: grants {sorted(_TOPIC_ACTIONS & set(actions))} but lists no topics")
    if not groups and GROUP_ACTIONS & set(actions):
        raise ValueError(f"{where}: grants {sorted(GROUP_ACTIONS & set(actions))} but lists no groups")
    return Rule(
        frozenset(principals),
        frozenset(roles),
        frozenset(scopes),
        tuple(claims.items()),
        frozenset(actions),
        _matcher(topics),
        _matcher(groups),
        index,
    )


def parse_rules(data: object, source: str = "the rules") -> RuleSet:
    if not isinstance(data, Mapping) or not isinstance(data.get("rules"), list):
        raise ValueError(f'{source}: expected {{"rules": [{{"roles": [...], "actions": [...], ...}}]}}')
    return RuleSet([_rule(item, i, source) for i, item in enumerate(data["rules"])])


def load_rules(path: Path) -> RuleSet:
    return parse_rules(read_json(path, "auth.rules_file"), f"auth.rules_file {path}")


def _resource(action: str, topic: str | None, group: str | None) -> str:
    if action == ADMIN:
        return "the admin endpoints"
    if action == DESCRIBE_CLUSTER:
        return "the cluster"
    parts = [f"group {group!r}"] if group is not None else []
    if topic is not None:
        parts.insert(0, f"topic {topic!r}")
    return " in ".join(parts) or "any topic"


class RuleSet:
    """An :class:`~gateway.service.access.AccessPolicy` over rules; deny unless a rule allows."""

    enforcing = True

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules

    def __repr__(self) -> str:
        return f"<RuleSet rules={len(self.rules)}>"

    def allows(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> bool:
        if action not in ACTIONS:  # e.g. an operation missing from the table: nothing grants it
            return False
        return any(r.grants(action, topic, group) and r.applies_to(principal) for r in self.rules)

    def check(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> None:
        if self.allows(principal, action, topic=topic, group=group):
            return
        resource = _resource(action, topic, group)
        raise PermissionDenied(
            f"principal {principal.label!r} may not {action} on {resource}: no rule in auth.rules_file "
            "allows it; ask the operator for one",
            action=action,
            resource=resource,
        )
