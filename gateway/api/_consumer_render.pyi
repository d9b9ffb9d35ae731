from collections.abc import Callable, Sequence
from types import NotImplementedType
from typing import Any

def render_base64(
    runs: Sequence[Any],
    events: bool,
    head_of: Callable[..., bytes],
    meta_of: Callable[..., bytes],
    /,
) -> bytes | NotImplementedType: ...
