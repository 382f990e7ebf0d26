"""The JSON Schemas are generated from the model, and the model reads back what it writes.

devctl/schemas/*.json are written by `python -m devctl.model.schema` from the dataclasses in devctl/model; a
test here fails when a file is stale (edit the model, then regenerate). The commands' own tests validate
their real output against these schemas (conftest.validate_schema); here every report type is written with
to_jsonable and read back with from_dict, unchanged, and the publisher's real snapshot document is checked
against its schema.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Generic, Literal, TypedDict, TypeVar

import golden_chip_reports as golden_chip
import golden_reports as golden
import jsonschema
import pytest
from conftest import ROOT, devctl_env, validate_schema

from devctl.model import from_dict, json_schema, to_jsonable
from devctl.model.schema import (
    SCHEMAS_DIR,
    Document,
    document_schema,
    documents,
    main,
    render,
    stale,
)

REGENERATE = "python -m devctl.model.schema"


# ---- the files ----------------------------------------------------------------------------------------


def test_schema_files_are_generated_from_the_model():
    """A stale file means the model changed and the schemas were not regenerated (or a file was edited by hand)."""
    assert stale() == [], f"run `{REGENERATE}` and commit devctl/schemas"


def test_stale_names_every_file_that_differs(tmp_path):
    assert main(["--check"]) == 0
    for doc in documents():
        (tmp_path / f"{doc.name}.json").write_text(render(doc))
    assert stale(tmp_path) == []
    (tmp_path / "doctor.json").write_text((tmp_path / "doctor.json").read_text().replace('"minimum": 0', '"minimum": 1'))
    (tmp_path / "env.json").unlink()
    assert stale(tmp_path) == ["env.json", "doctor.json"]
    assert main(["--bogus"]) == 2


def test_check_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "devctl.model.schema", "--check"], cwd=ROOT, env=devctl_env(),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_every_file_is_a_generated_draft_2020_12_schema():
    names = {doc.name for doc in documents()}
    assert {p.stem for p in SCHEMAS_DIR.glob("*.json")} == names, "a schema file no document generates"
    for doc in documents():
        schema = json.loads((SCHEMAS_DIR / f"{doc.name}.json").read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == doc.schema_id == schema["properties"]["schema"]["const"]
        assert re.fullmatch(r"devctl\.[a-z.]+/\d+", doc.schema_id)
        assert schema["additionalProperties"] is False


def test_every_object_is_closed():
    """Every object the model knows is closed; the only open ones are the few the model says are open."""
    open_objects = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if "object" in (node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]):
                if "additionalProperties" not in node and "properties" not in node:
                    open_objects.append(where)
                elif "properties" in node:
                    assert node.get("additionalProperties") is False, where
                    assert set(node["required"]) <= set(node["properties"]), where
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    for doc in documents():
        walk(document_schema(doc), doc.name)
    # Open on purpose (the model's comments say why): a check's details, a plugin's create options.
    assert sorted({re.sub(r"^[a-z.]+", "", w) for w in open_objects}) == [
        "/$defs/CheckResult/properties/details",
        "/$defs/PluginReport/properties/create_options",
    ]


def test_every_document_has_a_table_and_every_table_a_document():
    from devctl.render.emit import TABLES

    assert set(TABLES) == {doc.schema_id for doc in documents()} - {"devctl.publisher/1"}


def test_schema_ids_live_in_the_model():
    """Every `devctl.<name>/<n>` id is defined in devctl/model, nowhere else."""
    defined = re.compile(r'^\s*[A-Z_]*SCHEMA\w*\s*(?::\s*\w+\s*)?=\s*"devctl\.', re.MULTILINE)
    outside = [str(p.relative_to(ROOT)) for p in (ROOT / "devctl").rglob("*.py") if "model" not in p.parts and defined.search(p.read_text())]
    assert outside == []


# ---- the real publisher document -----------------------------------------------------------------------


_SNAPSHOT = """
import json, sys
if sys.argv[1] == "devices":
    import jax, jax.numpy as jnp
    keep = [jnp.ones((256, 1024)), jnp.arange(7)]
    jax.device_put(jnp.zeros(1000), jax.devices()[1])
from devctl.publish.document import build_snapshot
print(json.dumps(build_snapshot(interval_s=1.0 if sys.argv[1] == "devices" else None, top_k=5, initialize=sys.argv[1] == "devices", cache=None)))
"""


@pytest.mark.parametrize("state", ["devices", "not-started"])
def test_publisher_document_as_written_matches_its_schema_and_model(state):
    from devctl.model.publishers import PublisherDocument

    proc = subprocess.run([sys.executable, "-c", _SNAPSHOT, state], env=devctl_env(devices=2), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    validate_schema(document, "publisher")
    assert list(document) == [f.name for f in dataclasses.fields(PublisherDocument)], "the model lists the keys as written"
    assert to_jsonable(from_dict(PublisherDocument, document)) == document
    if state == "devices":
        assert len(document["devices"]) == 2 and document["largest_arrays"] and document["backend_initialized"]
    else:
        assert document["devices"] == [] and document["backend_initialized"] is False


def test_publisher_schema_refuses_what_the_reader_refuses():
    from devctl.discovery.snapshot_format import parse_snapshot

    good = {
        "schema": "devctl.publisher/1", "pid": 42, "process_create_time": None, "command": ["python", "train.py"],
        "hostname": "node-1", "timestamp": 1700000000.0, "interval_s": 1.0, "jax_version": "0.10.2",
        "jaxlib_version": "0.10.2", "backend_initialized": True,
        "devices": [{"id": 0, "platform": "gpu", "device_kind": "H100", "process_index": 0, "live_bytes": 10,
                     "live_arrays": 1, "memory_stats": {"bytes_in_use": 5, "bytes_limit": None}, "memory_stats_error": None,
                     "pci_bus_id": "00000000:18:00.0"}],
        "largest_arrays": [{"shape": [2, 5], "dtype": "uint8", "nbytes": 10, "local_bytes": 10, "devices": [0]}],
        "snapshot_s": 0.001, "error": None,
    }  # fmt: skip
    validate_schema(good, "publisher")
    parse_snapshot(good)
    for bad in ({"pid": 0}, {"interval_s": 0}, {"devices": [{**good["devices"][0], "live_bytes": -1}]},
                {"devices": [{**good["devices"][0], "pci_bus_id": "../etc"}]}):
        doc = {**good, **bad}
        with pytest.raises(jsonschema.ValidationError):
            validate_schema(doc, "publisher")
        with pytest.raises(ValueError):
            parse_snapshot(doc)


# ---- every report type reads back what it writes ------------------------------------------------------


def _cluster(kind: str):
    from devctl.model.distributed import (
        LIST_SCHEMA,
        MEMSTATS_SCHEMA,
        ClusterDevice,
        ClusterFinding,
        ClusterHeadroom,
        ClusterReport,
        ProcessSummary,
    )

    report = golden.list_gpu8() if kind == "list" else golden.memstats_gpu8()
    summary = ProcessSummary(0, "dgx-h100-07", 8, ["NVIDIA H100 80GB HBM3"], "gpu", "0.10.2", "0.10.2", None,
                             {"jax-cuda12-plugin": "0.10.2"}, "570.124.06", 16, notes=["a note"])  # fmt: skip
    devices = [
        ClusterDevice(0, "dgx-h100-07", f"cuda:{d.id}", d.platform, d.id, d.device_kind, 0, 1 << 30, 0, 1 << 30, d)
        for d in report.devices
    ]
    findings = [
        ClusterFinding("version-mismatch", "error", "plugin_versions", "differs", [1], ["b"], [{"jax-cuda12-plugin": "0.10.1"}],
                       {"jax-cuda12-plugin": "0.10.2"}, "install the same versions on every host"),
        ClusterFinding("not-multi-process", "warning", None, "cpu only", [0, 1], ["a", "b"], [["cpu: no"], ["cpu: no"]]),
        ClusterFinding("device-count-mismatch", "error", "device_count", "7 vs 8", [1], ["b"], [7], 8),
    ]  # fmt: skip
    return ClusterReport(
        schema=LIST_SCHEMA if kind == "list" else MEMSTATS_SCHEMA, devctl_version="0.1.0", timestamp=1.5, coordinator="10.0.0.7:8476",
        num_processes=1, processes=[summary], devices=devices, findings=findings,
        headroom=ClusterHeadroom(1 << 30, 0, "dgx-h100-07", "cuda:0", (1 << 30) // 3), reports=[report],
        elapsed_s=2.0, join_s=0.5, gather_s=None,
    )  # fmt: skip


def _reports():
    from devctl.model.distributed import ListClusterReport, MemstatsClusterReport

    # The golden tables' reports (tests/golden_reports.py): realistic GPU hosts, with the fields CPU runs leave empty.
    builders = ("list_gpu8", "list_cpu_broken", "plugins_gpu", "env_gpu", "memstats_gpu8", "bench_gpu8", "bench_cpu_quick",
                "check_gpu8", "doctor_cpu_broken", "doctor_gpu8_ok")  # fmt: skip
    out = {name: (type(getattr(golden, name)()), getattr(golden, name)) for name in builders}
    # bench memory and bench matmul (tests/golden_chip_reports.py), as their golden tables show them.
    out.update({name: (type(build()), build) for name, build in golden_chip.VIEWS.items()})
    # bench collective (tests/golden_collective.py): the 8-GPU run, with its link matrix and straggler.
    out["bench-collective-gpu8"] = (type(golden.collective_gpu8()), golden.collective_gpu8)
    # What holds a job's memory (tests/golden_holders.py): --top, --postmortem and --distributed --top.
    import golden_holders

    out.update({name: (type(build()), build) for name, build in golden_holders.VIEWS.items()})
    out["list-distributed"] = (ListClusterReport, lambda: _cluster("list"))
    out["memstats-distributed"] = (MemstatsClusterReport, lambda: _cluster("memstats"))
    return out


REPORTS = _reports()


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_from_dict_reads_back_what_to_jsonable_wrote(name):
    kind, build = REPORTS[name]
    report = build()
    document = json.loads(json.dumps(to_jsonable(report)))  # through JSON, as another process hands it over
    again = from_dict(kind, document)
    assert again == report
    assert to_jsonable(again) == document


def test_every_document_type_is_read_back_somewhere():
    """The round trip above covers every report type that has a schema (the publisher's is tested on its real document)."""
    covered = {kind for kind, _ in REPORTS.values()}
    wanted = {doc.report for doc in documents() if doc.name != "publisher"}
    assert wanted <= covered, wanted - covered


def test_from_dict_is_a_tolerant_reader():
    from devctl.model.bench_transfer import Cell

    cell = from_dict(Cell, {"event": "cell", "direction": "h2d", "variant": "pinned", "layout": "single", "size_bytes": 8,
                            "src": "host", "dst": "cpu:0", "a_newer_field": 1})  # fmt: skip
    assert cell == Cell("h2d", "pinned", "single", 8, "host", "cpu:0")
    with pytest.raises(TypeError):
        from_dict(Cell, {"direction": "h2d"})


# ---- the generator on small types ---------------------------------------------------------------------

P = TypeVar("P")


class _Link(TypedDict):
    """A typed dict."""

    gen: Annotated[int, json_schema(minimum=1)]  # PCIe generation


class _LinkMore(_Link, total=False):
    width: int


class _Color:
    pass


@dataclass(frozen=True)
class _Inner(Generic[P]):
    payload: P
    pair: tuple[int, str] | None = None


@dataclass(frozen=True)
class _Toy:
    """A toy report.

    Second paragraph."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = {"allOf": [{"required": ["schema"]}]}

    schema: str
    size_bytes: int = field(metadata=json_schema(minimum=1))  # a size
    # the comment above
    kind: Literal["a", "b"] | None
    ratio: float | None
    link: _LinkMore
    inner: _Inner[str]
    inners: list[_Inner[str]] = field(default_factory=list)
    stats: dict[str, int | None] = field(default_factory=dict)  # fmt: skip
    anything: dict[str, Any] = field(default_factory=dict)


def test_generator_on_small_types():
    s = document_schema(Document("toy", "devctl.toy/1", _Toy, "toy --json"))
    assert s["description"] == "A toy report.\n\nSecond paragraph."
    assert s["required"] == [f.name for f in dataclasses.fields(_Toy)] and s["additionalProperties"] is False
    assert s["allOf"] == [{"required": ["schema"]}]
    p = s["properties"]
    assert p["schema"] == {"const": "devctl.toy/1"}
    assert p["size_bytes"] == {"type": "integer", "description": "a size", "minimum": 1}
    assert p["kind"] == {"enum": ["a", "b", None], "description": "the comment above"}
    assert p["ratio"] == {"type": ["number", "null"]}
    assert p["stats"] == {"type": "object", "additionalProperties": {"type": ["integer", "null"]}}  # no description from `fmt: skip`
    assert p["anything"] == {"type": "object"}
    link = s["$defs"]["_LinkMore"]
    assert link["required"] == ["gen"] and link["additionalProperties"] is False
    assert link["properties"]["gen"] == {"type": "integer", "description": "PCIe generation", "minimum": 1}
    inner = s["$defs"]["_Inner"]["properties"]
    assert inner["payload"] == {"type": "string"}
    assert inner["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}] and inner["pair"]["type"] == ["array", "null"]
    doc = {"schema": "devctl.toy/1", "size_bytes": 1, "kind": None, "ratio": 0.5, "link": {"gen": 4}, "inner": {"payload": "x", "pair": [1, "y"]},
           "inners": [], "stats": {"a": None}, "anything": {"b": [1]}}  # fmt: skip
    jsonschema.validate(doc, s)
    toy = from_dict(_Toy, doc)
    assert toy.inner == _Inner("x", (1, "y")) and to_jsonable(toy) == doc
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "extra": 1}, s)
    with pytest.raises(TypeError):
        document_schema(Document("bad", "devctl.bad/1", _Bad, "bad"))


@dataclass(frozen=True)
class _Bad:
    color: _Color


@pytest.mark.parametrize("fixture, schema", [("list-2026-11-27.json", "list")])
def test_documents_a_real_h200_gave_match_their_schemas(fixture, schema):
    """What devctl printed with --json on a real NVIDIA H200 (tests/fixtures/h200/, today's schema versions; the
    older documents there are read by from_dict's tolerant reader, tests/test_units_memory.py) is what its schema
    says."""
    import json
    from pathlib import Path

    from conftest import validate_schema

    doc = json.loads((Path(__file__).parent / "fixtures" / "h200" / fixture).read_text())
    validate_schema(doc, schema)
