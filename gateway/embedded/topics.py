"""Topic deployment specs of the embedded cluster (``demo:4,orders:8`` on the command line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_MSG_SIZE = 1024 * 1024
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic as deployed on every embedded broker.

    ``partitions`` and ``stores`` mean what TubeMQ's ``numPartitions`` and ``numTopicStores`` mean: each
    broker holds ``stores`` index stores of ``partitions`` partitions each, with partition ids
    ``store * 10000 + index``.
    """

    name: str
    partitions: int = 1
    stores: int = 1
    accept_publish: bool = True
    accept_subscribe: bool = True

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        if not 1 <= self.partitions <= 10000:
            raise ValueError(f"topic {self.name!r}: partitions must be in 1..10000, got {self.partitions}")
        if not 1 <= self.stores <= 100:
            raise ValueError(f"topic {self.name!r}: stores must be in 1..100, got {self.stores}")

    def partition_ids(self) -> list[int]:
        """Every partition id of this topic on one broker, in store order."""
        return [s * 10000 + i for s in range(self.stores) for i in range(self.partitions)]


def validate_topic_name(name: str) -> None:
    """Topic names follow TubeMQ's rule ``^[a-zA-Z]\\w+$``, at most 64 characters."""
    if not (2 <= len(name) <= 64 and name[0].isascii() and name[0].isalpha() and set(name) <= _NAME_CHARS):
        raise ValueError(
            f"invalid topic name {name!r}: "
            "use 2-64 characters (letters, digits and '_'), starting with a letter"
        )


def parse_topic_specs(text: str) -> list[TopicSpec]:
    """Parse ``name[:partitions[:stores]][,...]``, e.g. ``demo:4,orders:8:2``."""
    specs: dict[str, TopicSpec] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) > 3:
            raise ValueError(f"bad topic spec {item!r}: expected name[:partitions[:stores]]")
        try:
            numbers = [int(p) for p in parts[1:]]
        except ValueError:
            raise ValueError(f"bad topic spec {item!r}: partitions and stores must be integers") from None
        spec = TopicSpec(parts[0], numbers[0] if numbers else 1, numbers[1] if len(numbers) > 1 else 1)
        if spec.name in specs:
            raise ValueError(f"topic {spec.name!r} is given twice")
        specs[spec.name] = spec
    if not specs:
        raise ValueError("no topic given: expected name[:partitions[:stores]][,...]")
    return list(specs.values())


def load_topic_file(path: Path) -> list[TopicSpec]:
    """Load topics from a JSON file: ``{"topics": [{"name": "demo", "partitions": 4, "stores": 1}, ...]}``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    items = data.get("topics") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path}: expected an object with a non-empty 'topics' list")
    specs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"{path}: topics[{i}] must be an object with a string 'name'")
        specs.append(
            TopicSpec(
                item["name"],
                int(item.get("partitions", 1)),
                int(item.get("stores", 1)),
                bool(item.get("accept_publish", True)),
                bool(item.get("accept_subscribe", True)),
            )
        )
    return specs
