"""Plugin discovery and PJRT library introspection against real libraries and packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # conftest adds it; this keeps the file runnable under --import-mode=importlib
    sys.path.insert(0, _TESTS)

from pjrt_fixtures import (  # noqa: E402
    ERROR_DESTROYED_MARKER_ENV,
    IMPORT_MARKER_ENV,
    NEVER_CALL_MARKER_ENV,
    pjrt_libs,  # noqa: F401  (fixture)
    write_dist_info,
    write_module_package,
)

from devctl.discovery.plugins import (  # noqa: E402
    MODULE_MISSING_TEXT,
    find_plugin_packages,
    parse_pjrt_env,
)
from devctl.model import to_jsonable  # noqa: E402
from devctl.model.plugins import PjrtApiVersion, PluginSource, PluginStatus  # noqa: E402
from devctl.probe.pjrt_library import introspect_libraries  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOOD_ATTRIBUTES = {
    "xla_version": 2,
    "stablehlo_current_version": [1, 2, 3],
    "cuda_version": 12090,
    "platform_note": "hello devctl",
    "scale": 1.5,
    "experimental": True,
}


# ------------------------------------------------------------- introspection


@pytest.fixture(scope="module")
def probed(pjrt_libs, tmp_path_factory):
    """Every library but the hanging one, probed in one concurrent batch; markers record forbidden calls."""
    markers = tmp_path_factory.mktemp("markers")
    not_elf = markers / "not_elf.so"
    not_elf.write_text("this is text\n")
    paths = {v: str(p) for v, p in pjrt_libs.items() if v != "hang"}
    paths["not_elf"] = str(not_elf)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(NEVER_CALL_MARKER_ENV, str(markers / "never_called"))
        mp.setenv(ERROR_DESTROYED_MARKER_ENV, str(markers / "error_destroyed"))
        infos = introspect_libraries(list(paths.values()), timeout_s=30)
    return {v: infos[p] for v, p in paths.items()}, markers


def test_good_library_reports_version_attributes_and_extensions(probed):
    infos, markers = probed
    info = infos["good"]
    assert info.status is PluginStatus.OK, info
    assert info.error is None
    assert info.pjrt_api_version == PjrtApiVersion(0, 54)
    assert info.struct_size == 144
    assert info.attributes == GOOD_ATTRIBUTES
    assert info.extension_types == (20, 1, 9999)  # 9999 is unknown to any header: tolerated
    assert info.load_s is not None and info.load_s >= 0
    assert info.notes == ()


def test_probe_never_calls_initialize_or_anything_past_attributes(probed):
    infos, markers = probed
    # Initialize, Client_Create and the rest abort after writing this marker.
    assert not (markers / "never_called").exists()
    assert [v for v, info in infos.items() if info.status is PluginStatus.CRASHED] == ["segfault"]


def test_library_without_get_pjrt_api(probed, pjrt_libs):
    info = probed[0]["no_get_pjrt_api"]
    assert info.status is PluginStatus.NO_GET_PJRT_API
    assert info.error == f"GetPjrtApi not found in {pjrt_libs['no_get_pjrt_api']}"
    assert info.pjrt_api_version is None


def test_crash_in_get_pjrt_api_is_attributed_to_that_library(probed):
    infos = probed[0]
    info = infos["segfault"]
    assert info.status is PluginStatus.CRASHED
    assert "SIGSEGV" in info.error and "GetPjrtApi()" in info.error
    assert info.load_s is not None  # what was read before the crash survives
    assert infos["good"].status is PluginStatus.OK


def test_tiny_struct_size_stops_before_the_version(probed):
    info = probed[0]["tiny"]
    assert info.status is PluginStatus.OK
    assert info.struct_size == 16
    assert info.pjrt_api_version is None
    assert info.attributes == {} and info.extension_types == ()
    assert any("16" in note and "version" in note for note in info.notes), info.notes


def test_attributes_error_is_read_and_destroyed(probed):
    infos, markers = probed
    info = infos["attributes_error"]
    assert info.status is PluginStatus.OK
    assert info.pjrt_api_version == PjrtApiVersion(0, 54)
    assert info.attributes == {}
    assert any("UNIMPLEMENTED: attributes are not supported here" in note for note in info.notes), info.notes
    assert (markers / "error_destroyed").exists()  # PJRT_Error_Destroy was called on the returned error


def test_unknown_major_version_reads_nothing_past_the_version(probed):
    info = probed[0]["major_1"]
    assert info.pjrt_api_version == PjrtApiVersion(1, 54)
    assert info.attributes == {} and info.extension_types == ()
    assert any("major version 1" in note for note in info.notes), info.notes


def test_dlopen_failure_carries_dlerror_text(probed):
    info = probed[0]["not_elf"]
    assert info.status is PluginStatus.LOAD_FAILED
    assert "not_elf.so" in info.error and ("invalid ELF header" in info.error or "too short" in info.error)


def test_hanging_library_times_out(pjrt_libs):
    path = str(pjrt_libs["hang"])
    info = introspect_libraries([path], timeout_s=1.5)[path]
    assert info.status is PluginStatus.TIMEOUT
    assert "GetPjrtApi()" in info.error


def test_same_file_under_two_paths_is_probed_once(pjrt_libs, tmp_path):
    link = tmp_path / "alias.so"
    link.symlink_to(pjrt_libs["good"])
    paths = [str(pjrt_libs["good"]), str(link), str(link)]
    infos = introspect_libraries(paths, timeout_s=30)
    assert set(infos) == {str(pjrt_libs["good"]), str(link)}
    assert infos[str(link)].path == str(link)
    assert infos[str(link)].pjrt_api_version == infos[str(pjrt_libs["good"])].pjrt_api_version
    assert introspect_libraries([], timeout_s=1) == {}


# ------------------------------------------------------- PJRT_NAMES_AND_LIBRARY_PATHS


def _by_name(entries):
    return {e.name: e for e in entries}


def test_env_parsing_verdicts(pjrt_libs, tmp_path):
    text_so = tmp_path / "text.so"
    text_so.write_text("not a library\n")
    relocatable = tmp_path / "object.o.so"
    relocatable.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + (1).to_bytes(2, "little") + bytes(40))  # ET_REL
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    no_lib_json = tmp_path / "nolib.json"
    no_lib_json.write_text(json.dumps({"create_options": {"a": 1}}))
    list_json = tmp_path / "list.json"
    list_json.write_text("[]")
    ok_json = tmp_path / "ok.json"
    ok_json.write_text(json.dumps({"library_path": str(pjrt_libs["good"]), "create_options": {"visible": "0,1"}}))
    singular_json = tmp_path / "singular.json"
    singular_json.write_text(json.dumps({"library_path": str(pjrt_libs["good"]), "create_option": {"x": 1}}))
    sep = os.pathsep
    items = [
        f"good{sep}{pjrt_libs['good']}",
        "justaname",
        f"three{sep}parts{sep}here",
        f"missing{sep}{tmp_path / 'nope.so'}",
        f"text{sep}{text_so}",
        f"reloc{sep}{relocatable}",
        f"dir{sep}{tmp_path}",
        f"badjson{sep}{bad_json}",
        f"nolib{sep}{no_lib_json}",
        f"listjson{sep}{list_json}",
        f"okjson{sep}{ok_json}",
        f"singular{sep}{singular_json}",
        f"missingjson{sep}{tmp_path / 'nope.json'}",
    ]
    entries = parse_pjrt_env(",".join(items))
    assert [e.source for e in entries] == [PluginSource.ENV] * len(items)
    got = _by_name(entries)
    expected = {
        "good": PluginStatus.OK,
        "justaname": PluginStatus.MALFORMED_ITEM,
        f"three{sep}parts{sep}here": PluginStatus.MALFORMED_ITEM,
        "missing": PluginStatus.FILE_MISSING,
        "text": PluginStatus.NOT_SHARED_LIBRARY,
        "reloc": PluginStatus.NOT_SHARED_LIBRARY,
        "dir": PluginStatus.NOT_SHARED_LIBRARY,
        "badjson": PluginStatus.INVALID_JSON,
        "nolib": PluginStatus.JSON_WITHOUT_LIBRARY_PATH,
        "listjson": PluginStatus.INVALID_JSON,
        "okjson": PluginStatus.OK,
        "singular": PluginStatus.OK,
        "missingjson": PluginStatus.FILE_MISSING,
    }
    assert {name: e.status for name, e in got.items()} == expected
    assert got["good"].library_path == str(pjrt_libs["good"]) and got["good"].error is None
    assert 'should contain "library_path" field.' in got["nolib"].error
    assert got["okjson"].config_path == str(ok_json)
    assert got["okjson"].library_path == str(pjrt_libs["good"])
    assert got["okjson"].create_options == {"visible": "0,1"}
    assert got["okjson"].notes == ()
    assert got["singular"].create_options is None
    assert any('"create_option"' in n and '"create_options"' in n for n in got["singular"].notes)
    assert got["missingjson"].config_path == str(tmp_path / "nope.json")
    assert all(e.error for e in entries if e.status is not PluginStatus.OK)


def test_env_trailing_comma_empty_value_and_duplicates(pjrt_libs):
    assert parse_pjrt_env(None) == [] and parse_pjrt_env("") == []
    good = str(pjrt_libs["good"])
    entries = parse_pjrt_env(f"a{os.pathsep}{good},")
    assert [e.status for e in entries] == [PluginStatus.OK, PluginStatus.MALFORMED_ITEM]
    assert entries[1].name == "" and "empty item" in entries[1].error  # JAX warns and skips it too
    first, second = parse_pjrt_env(f"a{os.pathsep}{good},a{os.pathsep}{good}")
    assert any("overridden" in n for n in first.notes) and second.notes == ()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_env_unreadable_file(tmp_path):
    lib = tmp_path / "locked.so"
    lib.write_bytes(b"\x7fELF")
    lib.chmod(0)
    (entry,) = parse_pjrt_env(f"x{os.pathsep}{lib}")
    assert entry.status is PluginStatus.UNREADABLE


# ------------------------------------------------------------------- packages


@pytest.fixture(scope="module")
def site(pjrt_libs, tmp_path_factory) -> Path:
    """Plugin packages, their dist-infos and a libtpu package; every __init__ refuses to be imported."""
    site = tmp_path_factory.mktemp("site")
    good = pjrt_libs["good"]
    extension_module = "helper.cpython-311-x86_64-linux-gnu.so"  # a Python extension, not a candidate
    write_module_package(site, "jax_plugins.fakegpu", {"xla_cuda_plugin.so": good, extension_module: b"x"})
    write_module_package(site, "jax_plugins.nsonly", {"libcustom.so": good})
    write_module_package(site, "jax_plugins.nolib")
    write_module_package(site, "jax_plugins.twolibs", {"liba.so": good, "libb.so": good})
    write_module_package(site, "jax_plugins.textlib", {"xla_cuda_plugin.so": b"text, not ELF\n"})
    write_module_package(site, "libtpu", {"libtpu.so": good})
    write_dist_info(
        site,
        "fake-gpu-pjrt",
        "1.2.3",
        ["jax_plugins/fakegpu/__init__.py", "jax_plugins/fakegpu/xla_cuda_plugin.so"],
        entry_points={"fakegpu": "jax_plugins.fakegpu", "ghost": "jax_plugins.ghost"},
    )
    write_dist_info(site, "fake-ns", "0.1", ["jax_plugins/nsonly/__init__.py", "jax_plugins/nsonly/libcustom.so"])
    write_dist_info(site, "libtpu", "0.0.99", ["libtpu/__init__.py", "libtpu/libtpu.so"])
    return site


def test_find_plugin_packages_without_importing_them(site, monkeypatch, tmp_path):
    marker = tmp_path / "imported"
    monkeypatch.setenv(IMPORT_MARKER_ENV, str(marker))
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.syspath_prepend(str(site))  # also invalidates importlib's caches
    before = set(sys.modules)

    entries = find_plugin_packages()

    assert not marker.exists()
    assert not {m for m in set(sys.modules) - before if m.startswith(("jax_plugins", "libtpu", "jax"))}
    assert "TPU_LIBRARY_PATH" not in os.environ
    got = _by_name(entries)
    assert set(got) >= {"fakegpu", "nsonly", "nolib", "twolibs", "textlib", "ghost", "libtpu"}

    fakegpu = got["fakegpu"]
    assert fakegpu.source is PluginSource.NAMESPACE_AND_ENTRY_POINT
    assert fakegpu.module == "jax_plugins.fakegpu"
    assert (fakegpu.distribution, fakegpu.distribution_version) == ("fake-gpu-pjrt", "1.2.3")
    assert fakegpu.directory == str(site / "jax_plugins" / "fakegpu")
    assert fakegpu.library_path == str(site / "jax_plugins" / "fakegpu" / "xla_cuda_plugin.so")
    assert fakegpu.status is PluginStatus.OK

    nsonly = got["nsonly"]  # distribution found through RECORD, not an entry point
    assert nsonly.source is PluginSource.NAMESPACE
    assert (nsonly.distribution, nsonly.distribution_version) == ("fake-ns", "0.1")
    assert nsonly.library_path.endswith("libcustom.so") and nsonly.status is PluginStatus.OK

    assert got["nolib"].status is PluginStatus.NO_LIBRARY and got["nolib"].distribution is None
    assert got["twolibs"].status is PluginStatus.NO_LIBRARY and "liba.so, libb.so" in got["twolibs"].error
    assert got["textlib"].status is PluginStatus.NOT_SHARED_LIBRARY

    ghost = got["ghost"]
    assert ghost.source is PluginSource.ENTRY_POINT and ghost.status is PluginStatus.MODULE_MISSING
    assert ghost.error == MODULE_MISSING_TEXT.format("jax_plugins.ghost")
    assert ghost.error == "Jax plugin configuration error: Plugin module jax_plugins.ghost does not exist"

    libtpu = got["libtpu"]
    assert libtpu.source is PluginSource.LIBTPU and libtpu.status is PluginStatus.OK
    assert libtpu.library_path == str(site / "libtpu" / "libtpu.so")
    assert (libtpu.distribution, libtpu.distribution_version) == ("libtpu", "0.0.99")


def test_tpu_library_path_env(site, pjrt_libs, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    package_lib = str(site / "libtpu" / "libtpu.so")
    env = {"TPU_LIBRARY_PATH": str(pjrt_libs["good"])}
    other = [e for e in find_plugin_packages(environ=env) if e.name == "libtpu"]
    assert [e.library_path for e in other] == [str(pjrt_libs["good"]), package_lib]
    assert "TPU_LIBRARY_PATH" in other[0].notes[0]
    same = [e for e in find_plugin_packages(environ={"TPU_LIBRARY_PATH": package_lib}) if e.name == "libtpu"]
    assert [e.library_path for e in same] == [package_lib]
    assert same[0].distribution == "libtpu"


def test_plugins_report_json_in_a_fresh_interpreter(site, pjrt_libs, tmp_path):
    """End to end as `devctl plugins` calls it: discovery, then every library probed in its own child."""
    marker = tmp_path / "imported"
    never = tmp_path / "never_called"
    env = dict(os.environ)
    env.pop("TPU_LIBRARY_PATH", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
        PJRT_NAMES_AND_LIBRARY_PATHS=",".join(
            f"{name}{os.pathsep}{pjrt_libs[variant]}" for name, variant in (("envgood", "good"), ("envcrash", "segfault"))
        ),
        **{IMPORT_MARKER_ENV: str(marker), NEVER_CALL_MARKER_ENV: str(never)},
    )
    script = (
        "import json, sys\n"
        "from devctl.collect.plugins import plugins_report\n"
        "from devctl.model import to_jsonable\n"
        "doc = to_jsonable(plugins_report(timeout_s=30))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'jax_plugins', 'libtpu'))\n"
        "print(json.dumps({'plugins': doc, 'modules': bad}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["modules"] == []
    assert not marker.exists() and not never.exists()
    plugins = {p["name"]: p for p in out["plugins"]}
    for p in plugins.values():
        assert {"name", "source", "library_path", "status", "pjrt_api_version", "attributes", "error"} <= set(p)
    fakegpu = plugins["fakegpu"]
    assert fakegpu["status"] == "ok" and fakegpu["source"] == "namespace+entry_point"
    assert fakegpu["pjrt_api_version"] == {"major": 0, "minor": 54}
    assert fakegpu["attributes"] == GOOD_ATTRIBUTES
    assert fakegpu["distribution"] == "fake-gpu-pjrt" and fakegpu["error"] is None
    assert plugins["libtpu"]["pjrt_api_version"] == {"major": 0, "minor": 54}
    assert plugins["envgood"]["source"] == "env" and plugins["envgood"]["status"] == "ok"
    assert plugins["envcrash"]["status"] == "crashed" and "SIGSEGV" in plugins["envcrash"]["error"]
    assert plugins["ghost"]["status"] == "module missing" and plugins["ghost"]["pjrt_api_version"] is None
    assert plugins["nolib"]["status"] == "no library" and plugins["nolib"]["attributes"] == {}
    assert to_jsonable(PluginStatus.OK) == "ok"
