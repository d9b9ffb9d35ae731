from collections.abc import Callable, Iterable
from typing import Any

def set_message_type(cls: type, field_names: tuple[str, ...], /) -> None: ...
def set_crc32(crc32: Callable[[Any], int], /) -> None: ...
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
def decode_answer(
    buffer: bytes,
    enveloped: bool,
    prefix: bytes,
    method: int,
    filters: frozenset[str] | None,
    parse_prefix: Callable[
        [bytes, int], tuple[int, dict[str, str], str | None, str | None, str | None] | None
    ],
    /,
) -> tuple[int, int, int, int, list[Any], int, int, int, int] | None: ...
