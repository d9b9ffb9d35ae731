from collections.abc import Callable
from typing import Any

def set_rules(
    separators: bytes, reserved_in_text: tuple[bytes, ...], reserved_in_names: tuple[bytes, ...], /
) -> None: ...
def usual_batch(body: bytes, max_messages: int, make: Callable[..., Any], /) -> list[Any] | None: ...
