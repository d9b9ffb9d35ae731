from collections.abc import Callable
from typing import Any

def slots_maker(cls: type, field_names: tuple[str, ...], /) -> Callable[..., Any]: ...
