"""Plain data: what discovery and the probe produce and the renderers consume.

Field names carry their unit (`total_bytes`, `median_s`, `gbps`). Unknown is
None, with the reason recorded beside it, never a string such as "N/A".
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, enums, tuples and dicts as JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
