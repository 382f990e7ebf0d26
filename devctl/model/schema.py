"""The JSON Schemas of every document devctl writes, generated from the model's dataclasses.

    python -m devctl.model.schema            rewrite devctl/schemas/*.json from the model
    python -m devctl.model.schema --check    exit 1, naming them, when a file differs from what the model says

A report type's schema comes from its type hints, nothing else:

- str, int, float, bool and None are "string", "integer", "number", "boolean" and "null"; a union of them is
  a list of types; `X | None` adds "null" to X;
- a Literal is an "enum" of its values; an Enum class an "enum" of its members' values (in $defs);
- list[X] and tuple[X, ...] are arrays of X; tuple[A, B] an array of exactly those;
- dict[str, X] is an object whose every value is X; dict[str, Any] an open object (the model says why where
  it uses one);
- a dataclass or a TypedDict is a closed object in $defs (`additionalProperties: false`), every dataclass field
  required (to_jsonable writes them all), a TypedDict's keys required unless it is total=False; a generic
  dataclass is read with its type arguments (ClusterReport[Inventory, DeviceInfo]);
- a field's description is its trailing comment in the source (`name: type = default  # comment`), else the
  comment lines right above it; a class's is its docstring;
- what a type cannot say comes from the model too: `field(metadata=json_schema(minimum=1))` adds keywords to
  one field, and a class attribute `JSON_SCHEMA: ClassVar[dict]` to the class's object (rules that tie
  fields together, such as a zero-copy cell having no bandwidth).

Generation reads the model's source (inspect, tokenize): it runs here and in the tests, never when devctl runs.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import io
import json
import pkgutil
import sys
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union

from devctl.model import SCHEMA_METADATA

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "schemas"


@dataclass(frozen=True)
class Document:
    """One `--json` document (or the publisher's snapshot file) and the report type that writes it."""

    name: str  # devctl/schemas/<name>.json
    schema_id: str  # the document's `schema` value, also the JSON Schema's $id
    report: Any  # the dataclass, or a parametrized generic one
    title: str
    description: str | None = None  # None: the report type's docstring


def documents() -> list[Document]:
    from devctl.model import (
        bench_collective,
        bench_matmul,
        bench_memory,
        bench_transfer,
        check,
        distributed,
        doctor,
        env,
        holders,
        list_,
        memstats,
        plugins,
        publishers,
    )

    def cluster(of: str) -> str:
        return (
            f"Every process of a JAX cluster, assembled on process 0. Each entry of `reports` is that process's own "
            f"{of} document, and each device's `detail` that document's record of the device."
        )

    return [
        Document("list", list_.SCHEMA, list_.Inventory, "devctl list --json"),
        Document("list.distributed", distributed.LIST_SCHEMA, distributed.ListClusterReport,
                 "devctl list --distributed --json", cluster(list_.SCHEMA)),
        Document("memstats", memstats.SCHEMA, memstats.MemSnapshot, "devctl memstats --json (one document; one per line with --watch)"),
        Document("memstats.distributed", distributed.MEMSTATS_SCHEMA, distributed.MemstatsClusterReport,
                 "devctl memstats --distributed --json", cluster(memstats.SCHEMA)),
        Document("memstats.top", holders.TOP_SCHEMA, holders.TopReport, "devctl memstats --pid PID --top N --json"),
        Document("memstats.top.distributed", holders.FLEET_TOP_SCHEMA, holders.FleetTopReport, "devctl memstats --distributed --top N --json"),
        Document("memstats.postmortems", holders.POSTMORTEMS_SCHEMA, holders.PostMortemReport, "devctl memstats --postmortem --json"),
        Document("plugins", plugins.SCHEMA, plugins.PluginsReport, "devctl plugins --json"),
        Document("env", env.SCHEMA, env.EnvironmentReport, "devctl env --json"),
        Document("check", check.CHECK_SCHEMA, check.CheckReport, "devctl check --json"),
        Document("doctor", doctor.DOCTOR_SCHEMA, doctor.DoctorReport, "devctl doctor --json"),
        Document("bench.transfer", bench_transfer.SCHEMA, bench_transfer.TransferReport, "devctl bench transfer --json"),
        Document("bench.memory", bench_memory.SCHEMA, bench_memory.MemoryReport, "devctl bench memory --json"),
        Document("bench.matmul", bench_matmul.SCHEMA, bench_matmul.MatmulReport, "devctl bench matmul --json"),
        Document("bench.collective", bench_collective.SCHEMA, bench_collective.CollectiveReport, "devctl bench collective --json"),
        Document("publisher", publishers.SCHEMA, publishers.PublisherDocument,
                 "<pid>.json in the snapshot directory, written by a job that calls devctl.publish.publish()"),
    ]  # fmt: skip


def document_schema(doc: Document) -> dict[str, Any]:
    """The JSON Schema of one document."""
    builder = _Builder()
    body = builder.object_schema(doc.report, {})
    body["properties"]["schema"] = {"const": doc.schema_id}
    description = doc.description or body.pop("description", None)
    body.pop("description", None)
    head: dict[str, Any] = {"$schema": DRAFT, "$id": doc.schema_id, "title": doc.title}
    if description:
        head["description"] = description
    out = {**head, **body}
    if builder.defs:
        out["$defs"] = builder.defs
    return out


def render(doc: Document) -> str:
    return _compact(document_schema(doc), 0) + "\n"


def _compact(value: Any, indent: int, used: int = 0, width: int = 120) -> str:
    """JSON indented by two, with an object or array kept on one line where it fits in `width` columns
    (`used`: the columns its line already holds, a key's)."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or max(indent, used) + len(flat) <= width:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, list):
        items = [pad + _compact(v, indent + 2) for v in value]
    else:
        items = []
        for k, v in value.items():
            key = f"{json.dumps(k, ensure_ascii=False)}: "
            items.append(pad + key + _compact(v, indent + 2, indent + 2 + len(key)))
    opening, closing = ("[", "]") if isinstance(value, list) else ("{", "}")
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing


# ---- types to schemas ----------------------------------------------------------------------------------


_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._named: dict[str, Any] = {}  # $defs name -> the type it was made for: two types never share a name

    def of(self, tp: Any, subst: dict[Any, Any]) -> dict[str, Any]:
        if isinstance(tp, TypeVar):
            return self.of(subst[tp], subst)
        if tp is Any:
            return {}
        if typing.get_origin(tp) is typing.Annotated:  # Annotated[int, json_schema(minimum=1)]: a TypedDict key's constraints
            base, *extras = typing.get_args(tp)
            out = self.of(base, subst)
            for extra in extras:
                if isinstance(extra, dict) and SCHEMA_METADATA in extra:
                    out = _merged(out, extra[SCHEMA_METADATA])
            return out
        if tp in _PRIMITIVES:
            return {"type": _PRIMITIVES[tp]}
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Union or origin is types.UnionType:
            alias = _union_aliases().get(tp)
            if alias is not None:
                name, note = alias
                return self._ref_named(name, tp, lambda: _with_description(self._union(args, subst), note))
            return self._union(args, subst)
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (list, tuple) or tp in (list, tuple):
            if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
                items = [self.of(a, subst) for a in args]
                return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}
            return {"type": "array", "items": self.of(args[0], subst)} if args else {"type": "array"}
        if origin is dict or tp is dict:
            if args and args[0] is not str:
                raise TypeError(f"{tp}: JSON object keys are strings")
            values = self.of(args[1], subst) if args else {}
            return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
        cls = origin or tp
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            return self._ref(cls, tp, lambda: _with_description({"enum": [m.value for m in cls]}, _class_doc(cls)))
        if dataclasses.is_dataclass(cls) or typing.is_typeddict(cls):
            return self._ref(cls, tp, lambda: self.object_schema(tp, subst))
        raise TypeError(f"no JSON Schema for {tp!r}")

    def _union(self, args: tuple[Any, ...], subst: dict[Any, Any]) -> dict[str, Any]:
        members = [self.of(a, subst) for a in args if a is not type(None)]
        nullable = type(None) in args
        simple = all(set(m) == {"type"} and isinstance(m["type"], str) for m in members)
        if simple:
            kinds = [m["type"] for m in members] + (["null"] if nullable else [])
            return {"type": kinds[0] if len(kinds) == 1 else kinds}
        if len(members) == 1:
            return _nullable(members[0]) if nullable else members[0]
        return {"anyOf": members + ([{"type": "null"}] if nullable else [])}

    def _ref(self, cls: type, tp: Any, make: Any) -> dict[str, Any]:
        return self._ref_named(cls.__name__, tp, make)

    def _ref_named(self, name: str, tp: Any, make: Any) -> dict[str, Any]:
        known = self._named.get(name)
        if known is None:
            self._named[name] = tp
            self.defs[name] = {}  # reserved first: a type that contains itself refers to its own entry
            self.defs[name] = make()
        elif known != tp:
            raise TypeError(f"two types are both called {name} in one schema: {known!r} and {tp!r}")
        return {"$ref": f"#/$defs/{name}"}

    def object_schema(self, tp: Any, outer: dict[Any, Any]) -> dict[str, Any]:
        """A dataclass or TypedDict as a closed object (not in $defs: the caller places it)."""
        origin = typing.get_origin(tp)
        cls = origin or tp
        subst = _bindings(tp, outer)
        hints = typing.get_type_hints(cls, include_extras=True)
        notes = _field_notes(cls)
        if dataclasses.is_dataclass(cls):
            fields = [(f.name, f.metadata.get(SCHEMA_METADATA, {})) for f in dataclasses.fields(cls)]
            required = [name for name, _ in fields]
        else:
            fields = [(name, {}) for name in hints]
            required = [name for name in hints if name in cls.__required_keys__]
        properties = {}
        for name, extra in fields:
            prop = self.of(hints[name], subst)
            prop = _with_description(prop, notes.get(name))
            properties[name] = _merged(prop, extra)
        out: dict[str, Any] = _with_description({"type": "object"}, _class_doc(cls))
        out.update({"additionalProperties": False, "required": required, "properties": properties})
        extra_class = getattr(cls, "JSON_SCHEMA", None)
        if extra_class:
            out = _merged(out, extra_class)
        return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema.get("type"), str) and set(schema) <= {"type", "items", "additionalProperties", "prefixItems", "minItems", "maxItems"}:
        return {**schema, "type": [schema["type"], "null"]}
    if set(schema) == {"enum"}:
        return {"enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def _merged(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra`'s keywords added to `schema`; `items` and `allOf` merge rather than replace."""
    out = dict(schema)
    for key, value in extra.items():
        if key == "items" and isinstance(out.get("items"), dict):
            out["items"] = {**out["items"], **value}
        elif key == "allOf" and key in out:
            out["allOf"] = [*out["allOf"], *value]
        else:
            out[key] = value
    return out


def _with_description(schema: dict[str, Any], text: str | None) -> dict[str, Any]:
    if not text:
        return schema
    if "$ref" in schema and len(schema) == 1:
        return {"$ref": schema["$ref"], "description": text}
    return {**schema, "description": text} if "description" not in schema else schema


def _bindings(tp: Any, outer: dict[Any, Any]) -> dict[Any, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args:
        return dict(outer)
    return {p: (outer[a] if isinstance(a, TypeVar) else a) for p, a in zip(origin.__parameters__, args)}


# ---- descriptions from the source ----------------------------------------------------------------------


@functools.cache
def _union_aliases() -> dict[Any, tuple[str, str | None]]:
    """The model's named unions (`AttributeValue = str | int | ...`): each becomes one $defs entry, described by
    the comment above it, instead of being spelled out wherever it is used."""
    import devctl.model

    out: dict[Any, tuple[str, str | None]] = {}
    for info in sorted(pkgutil.iter_modules(devctl.model.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"devctl.model.{info.name}")
        try:
            lines = inspect.getsource(module).splitlines()
        except (OSError, TypeError):
            continue
        for number, line in enumerate(lines):
            name = line.split("=", 1)[0].strip() if "=" in line and not line.startswith((" ", "#")) else ""
            value = getattr(module, name, None) if name.isidentifier() else None
            if typing.get_origin(value) not in (Union, types.UnionType) or value in out:
                continue
            above: list[str] = []
            while number > 0 and lines[number - 1].startswith("#"):
                number -= 1
                above.insert(0, lines[number].lstrip("#").strip())
            out[value] = (name, " ".join(above) or None)
    return out

_TOOL_COMMENTS = ("fmt:", "noqa", "type:", "pragma")


def _class_source(cls: type) -> ast.ClassDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return None
    node = ast.parse(source).body[0]
    return node if isinstance(node, ast.ClassDef) else None


def _class_doc(cls: type) -> str | None:
    node = _class_source(cls)
    doc = ast.get_docstring(node) if node is not None else None
    return _prose(doc) if doc else None


def _prose(text: str) -> str:
    """Paragraphs on one line each: the line breaks of a docstring are the source's, not the reader's."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _field_notes(cls: type) -> dict[str, str]:
    """Each field's trailing comment, else the comment lines right above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.ClassDef):
        return {}
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text and not text.startswith(_TOOL_COMMENTS):
                comments[tok.start[0]] = (text, not tok.line[: tok.start[1]].strip())
    notes = {}
    module = sys.modules.get(cls.__module__)
    for base in node.bases:  # a TypedDict's inherited keys (its runtime class keeps no bases to walk)
        inherited = getattr(module, base.id, None) if isinstance(base, ast.Name) else None
        if inherited is not None and typing.is_typeddict(inherited):
            notes.update(_field_notes(inherited))
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        end = stmt.end_lineno or stmt.lineno
        trailing = [comments[n][0] for n in range(stmt.lineno, end + 1) if n in comments and not comments[n][1]]
        above: list[str] = []
        line = stmt.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        text = " ".join(trailing) or " ".join(above)
        if text:
            notes[stmt.target.id] = text
    return notes


# ---- the files -------------------------------------------------------------------------------------------


def stale(directory: Path = SCHEMAS_DIR) -> list[str]:
    """The schema files that differ from what the model generates (or are missing)."""
    out = []
    for doc in documents():
        path = directory / f"{doc.name}.json"
        if not path.is_file() or path.read_text(encoding="utf-8") != render(doc):
            out.append(path.name)
    return out


def write(directory: Path = SCHEMAS_DIR) -> list[str]:
    written = []
    for doc in documents():
        path = directory / f"{doc.name}.json"
        text = render(doc)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path.name)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python -m devctl.model.schema [--check]", file=sys.stderr)
        return 2
    if args == ["--check"]:
        old = stale()
        if old:
            print(f"stale JSON Schemas in devctl/schemas: {', '.join(old)}; run python -m devctl.model.schema", file=sys.stderr)
            return 1
        return 0
    for name in write():
        print(f"wrote devctl/schemas/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
