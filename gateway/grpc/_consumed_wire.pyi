from collections.abc import Sequence
from types import NotImplementedType
from typing import Any

def encode_consumed(runs: Sequence[Any], /) -> bytes | NotImplementedType: ...
