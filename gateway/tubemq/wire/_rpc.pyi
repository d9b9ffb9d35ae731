from collections.abc import Callable, Sequence
from typing import Any

def frame_requests(
    serials: Sequence[int],
    prefix: bytes,
    body_head: bytes,
    requests: Sequence[Any],
    frame_one: Callable[[int, Any], bytes],
    /,
) -> list[bytes]: ...
def usual_answer(payload: bytes, prefix: bytes, /) -> bool: ...
