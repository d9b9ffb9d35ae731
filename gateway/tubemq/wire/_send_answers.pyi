from collections.abc import Sequence
from typing import Any

def send_answers(
    answers: Sequence[Any], method: int, response_type: type, frame_type: type, prefix: bytes, /
) -> list[tuple[bool, int, str, int | None, int | None, int | None] | None]: ...
