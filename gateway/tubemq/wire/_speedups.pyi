from collections.abc import Callable, Iterable, Sequence
from typing import Any

def set_message_type(cls: type, field_names: tuple[str, ...], /) -> None: ...
def slots_maker(cls: type, field_names: tuple[str, ...], /) -> Callable[..., Any]: ...
def decode_messages(
    wire: Iterable[Any],
    filters: frozenset[str] | None,
    curr_offset: int,
    exact: bool,
    parse_prefix: Callable[
        [bytes, int], tuple[int, dict[str, str], str | None, str | None, str | None] | None
    ],
    /,
) -> tuple[list[Any], int, int, int, int]: ...
def encode_sends(
    prefix: bytes, fields: bytes, auth: bytes, partition_ids: Sequence[int], messages: Sequence[Any], /
) -> list[bytes]: ...
def frame_requests(
    serials: Sequence[int],
    prefix: bytes,
    body_head: bytes,
    requests: Sequence[Any],
    frame_one: Callable[[int, Any], bytes],
    /,
) -> list[bytes]: ...
def send_answers(
    answers: Sequence[Any], method: int, response_type: type, frame_type: type, prefix: bytes, /
) -> list[tuple[bool, int, str, int | None, int | None, int | None] | None]: ...
def usual_answer(payload: bytes, prefix: bytes, /) -> bool: ...
def set_frame_type(cls: type, /) -> None: ...
def whole_frames(data: Any, pos: int, limit: int, frames: list[Any], /) -> int: ...
