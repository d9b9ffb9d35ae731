from collections.abc import Sequence
from typing import Any

def encode_sends(
    prefix: bytes, fields: bytes, auth: bytes, partition_ids: Sequence[int], messages: Sequence[Any], /
) -> list[bytes]: ...
