"""Authorization rules: which principals may do which actions on which topics and consumer groups.

The rules file (``auth.rules_file``) is JSON::

    {"rules": [
      {"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]},
      {"principals": ["billing"], "actions": ["publish", "describe"], "topics": ["orders_*"]},
      {"claims": {"tenant": "acme"}, "actions": ["consume"], "topics": ["acme_*"], "groups": ["acme_*"]}
    ]}

A rule applies to a principal named in ``principals``, or holding one of ``roles`` (API key roles, JWT
roles and scopes), or whose verified JWT ``claims`` have every listed value (a list claim must contain
it; dotted names descend into objects); ``"*"`` in ``principals`` means every authenticated principal.
``actions`` are those of :mod:`gateway.service.access` or ``"*"``. ``topics`` and ``groups`` are
fnmatch-style patterns (``*``, ``?``, ``[...]``, case-sensitive); ``consume`` needs both to match,
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
from gateway.service.access import ACTIONS, ADMIN, CONSUME, DESCRIBE_CLUSTER
from gateway.service.errors import PermissionDenied
from gateway.service.principal import Principal

__all__ = ["Rule", "RuleSet", "claim_values", "load_rules", "parse_rules"]

_TOPIC_ACTIONS = ACTIONS - {DESCRIBE_CLUSTER, ADMIN}
_FIELDS = frozenset({"principals", "roles", "claims", "actions", "topics", "groups", "comment"})

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


@dataclass(frozen=True, slots=True)
class Rule:
    principals: frozenset[str]
    roles: frozenset[str]
    claims: tuple[tuple[str, object], ...]
    actions: frozenset[str]
    topics: Matcher | None  # None: no topic patterns (grants no topic action)
    groups: Matcher | None  # None: no group patterns (grants no consume)
    index: int

    def applies_to(self, principal: Principal) -> bool:
        if principal.name in self.principals or ("*" in self.principals and not principal.anonymous):
            return True
        if self.roles and not self.roles.isdisjoint(principal.roles):
            return True
        return bool(self.claims) and all(
            value in claim_values(principal.claims, name) for name, value in self.claims
        )

    def grants(self, action: str, topic: str | None, group: str | None) -> bool:
        if action not in self.actions and "*" not in self.actions:
            return False
        if action in _TOPIC_ACTIONS:
            if self.topics is None or (topic is not None and not self.topics(topic)):
                return False
            if action == CONSUME and (self.groups is None or (group is not None and not self.groups(group))):
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
    principals, roles = _strings(item, "principals", where), _strings(item, "roles", where)
    claims = item.get("claims", {})
    if not isinstance(claims, Mapping) or not all(isinstance(v, str | int | bool) for v in claims.values()):
        raise ValueError(f"{where}: claims must map claim names to strings, numbers or booleans")
    if not (principals or roles or claims):
        raise ValueError(f"{where}: name whom it applies to with principals, roles or claims")
    actions = _strings(item, "actions", where)
    bad = sorted(set(actions) - ACTIONS - {"*"})
    if bad or not actions:
        raise ValueError(f"{where}: actions {bad or actions} are not among {sorted(ACTIONS)} or '*'")
    topics, groups = _strings(item, "topics", where), _strings(item, "groups", where)
    if not topics and _TOPIC_ACTIONS & set(actions):
        raise ValueError(f"{where}: grants {sorted(_TOPIC_ACTIONS & set(actions))} but lists no topics")
    if not groups and CONSUME in actions:
        raise ValueError(f"{where}: grants consume but lists no groups")
    return Rule(
        frozenset(principals),
        frozenset(roles),
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
            f"principal {principal.name!r} may not {action} on {resource}: no rule in auth.rules_file "
            "allows it; ask the operator for one",
            action=action,
            resource=resource,
        )
