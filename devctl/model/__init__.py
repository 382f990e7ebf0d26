"""Plain data: what discovery and the probe produce and the renderers consume.

Field names carry their unit (`total_bytes`, `median_s`, `gbps`). Unknown is
None, with the reason recorded beside it, never a string such as "N/A".

The dataclasses here are the source of truth for every `--json` document:
to_jsonable() writes one, from_dict() reads it back, and devctl.model.schema
generates the JSON Schemas in devctl/schemas/ from the same type hints (a
field's trailing comment is its description; `json_schema(...)` metadata adds
the constraints its type cannot say). Stdlib only: the CLI imports this
without jax.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, TypeVar, Union

T = TypeVar("T")

# The key under which a field's metadata carries extra JSON Schema keywords (devctl.model.schema reads it).
SCHEMA_METADATA = "json_schema"


class _Keywords(dict[str, Any]):
    """JSON Schema keywords; hashable, so that they can stand in Annotated[...] inside a union too."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(repr(sorted(self.items(), key=lambda kv: kv[0])))


def json_schema(**keywords: Any) -> dict[str, Any]:
    """JSON Schema keywords a field's type cannot say: `field(metadata=json_schema(minimum=1))` on a dataclass
    field, `Annotated[int, json_schema(minimum=1)]` on a TypedDict key (devctl.model.schema reads both)."""
    return _Keywords({SCHEMA_METADATA: keywords})


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


# ---- reading a document back ------------------------------------------------------------------------


def from_dict(cls: type[T], data: Any) -> T:
    """The value of type `cls` (a dataclass, possibly parametrized: ClusterReport[Inventory, DeviceInfo]) that
    to_jsonable() turned into `data`: from_dict(type(x), to_jsonable(x)) == x for every report type.

    It rebuilds structure, not trust: nested dataclasses, enums and tuples come back as the type hints say,
    numbers and strings are taken as they are (validating a document is its JSON Schema's work). Keys the
    type does not know are ignored and a missing field takes its default, so a document from a newer devctl
    still reads; a missing field without a default raises TypeError, an unknown enum value ValueError.
    """
    return typing.cast(T, _decode(cls, data, {}))


def _decode(tp: Any, value: Any, subst: dict[Any, Any]) -> Any:
    if isinstance(tp, TypeVar):
        return _decode(subst[tp], value, subst) if tp in subst else value
    if value is None:
        return None  # None is None whatever the hint (an Optional field, or a value the writer left unknown)
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _decode_union(typing.get_args(tp), value, subst)
    if origin in (list, tuple, dict):
        return _decode_container(origin, typing.get_args(tp), value, subst)
    cls = origin if origin is not None else tp
    if dataclasses.is_dataclass(cls) and isinstance(value, dict):
        return _decode_dataclass(cls, _bindings(tp, subst), value)
    if typing.is_typeddict(cls) and isinstance(value, dict):
        hints = _hints(cls)
        return {k: _decode(hints[k], v, subst) if k in hints else v for k, v in value.items()}
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return cls(value)
    if cls in (list, tuple, dict):  # bare: nothing more is known of the items
        return _decode_container(cls, (), value, subst)
    return value  # str, int, float, bool, Literal, Any: as written


def _decode_union(options: tuple[Any, ...], value: Any, subst: dict[Any, Any]) -> Any:
    """The first member of the union that has the JSON value's shape (an object, an array, or a scalar)."""
    for option in options:
        if _shape_fits(option, value, subst):
            return _decode(option, value, subst)
    return value


def _shape_fits(tp: Any, value: Any, subst: dict[Any, Any]) -> bool:
    if isinstance(tp, TypeVar):
        return tp not in subst or _shape_fits(subst[tp], value, subst)
    if tp is type(None):
        return False
    origin = typing.get_origin(tp)
    cls = origin if origin is not None else tp
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if isinstance(value, dict):
        return cls is dict or dataclasses.is_dataclass(cls) or typing.is_typeddict(cls) or tp is Any
    if isinstance(value, (list, tuple)):
        return cls in (list, tuple) or tp is Any
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return value in {m.value for m in cls}
    if isinstance(value, bool):
        return cls is bool or tp is Any
    if isinstance(value, (int, float)):
        return cls in (int, float) or tp is Any
    return cls is str or tp is Any


def _decode_container(origin: Any, args: tuple[Any, ...], value: Any, subst: dict[Any, Any]) -> Any:
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        key_type, value_type = args or (str, Any)
        # JSON keys are text: an int-keyed dict comes back with its keys turned into numbers again.
        return {(int(k) if key_type is int else k): _decode(value_type, v, subst) for k, v in value.items()}
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected an array, got {type(value).__name__}")
    if origin is list:
        item = args[0] if args else Any
        return [_decode(item, v, subst) for v in value]
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        item = args[0] if args else Any
        return tuple(_decode(item, v, subst) for v in value)
    if len(args) != len(value):
        raise ValueError(f"expected {len(args)} items, got {len(value)}")
    return tuple(_decode(a, v, subst) for a, v in zip(args, value))


def _decode_dataclass(cls: Any, subst: dict[Any, Any], value: dict[str, Any]) -> Any:
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            try:
                values[f.name] = _decode(hints[f.name], value[f.name], subst)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{cls.__name__}.{f.name}: {e}") from None
    return cls(**values)


def _bindings(tp: Any, outer: dict[Any, Any]) -> dict[Any, Any]:
    """TypeVar -> type for a parametrized generic dataclass (ClusterReport[Inventory, DeviceInfo])."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args:
        return dict(outer)
    params = getattr(origin, "__parameters__", ())
    return {p: (outer.get(a, a) if isinstance(a, TypeVar) else a) for p, a in zip(params, args)}


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)
