from collections.abc import Sequence
from typing import Any

def encode_consumed(messages: Sequence[Any], /) -> Any: ...
