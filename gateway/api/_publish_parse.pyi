from collections.abc import Callable
from typing import Any

def usual_batch(body: bytes, max_messages: int, make: Callable[..., Any], /) -> list[Any] | None: ...
