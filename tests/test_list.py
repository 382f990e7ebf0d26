"""`devctl list`, `devctl plugins` and `devctl env` end to end, on real CPU JAX and on host trees."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, run_json, validate_schema
from hosttrees import amd_host, base_host, nvidia_host, tpu_v4_host, tpu_v5e_host


def test_list_json_has_every_cpu_device_and_validates():
    doc = run_json("list", env=devctl_env(devices=4))
    validate_schema(doc, "list")
    cpu = [d for d in doc["devices"] if d["platform"] == "cpu"]
    assert sorted(d["id"] for d in cpu) == [0, 1, 2, 3]
    assert all(d["process_index"] == 0 and d["device_kind"] == "cpu" for d in cpu)
    assert cpu[0]["memory_kinds"] and cpu[0]["default_memory_kind"] in cpu[0]["memory_kinds"]
    backend = next(b for b in doc["backends"] if b["platform"] == "cpu")
    assert backend["status"] == "ok" and backend["device_count"] == 4
    assert doc["default_platform"] == "cpu"
    assert doc["host"]["memory_total_bytes"] > 0


def test_list_table_groups_devices_and_is_plain_off_a_terminal():
    proc = run_devctl("list", env=devctl_env(devices=2))
    assert proc.returncode == 0, proc.stderr
    assert "cpu: 2 device(s)" in proc.stdout
    assert "\x1b[" not in proc.stdout  # no colour codes into a pipe
    assert "─" not in proc.stdout and "│" not in proc.stdout  # no box drawing off a terminal
    padded = [line for line in proc.stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded  # nothing at a line's end for diff and grep '...$' to trip on


def test_list_csv_is_one_row_per_device_with_raw_values():
    proc = run_devctl("list", "--csv", env=devctl_env(devices=3))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["platform"], r["id"]) for r in rows] == [("cpu", "0"), ("cpu", "1"), ("cpu", "2")]
    assert all(r["default_memory_kind"] in r["memory_kinds"].split(";") for r in rows), rows
    assert_usage_error(run_devctl("list", "--csv", "--json"), "--json and --csv are exclusive")


def test_a_cpu_only_machine_says_no_tpu_quietly():
    """JAX skips the TPU backend without a word where there is no chip; so does the table (--json keeps the error)."""
    proc = run_devctl("list", env=devctl_env(devices=1))
    assert proc.returncode == 0, proc.stderr
    tpu = next(b for b in run_json("list", env=devctl_env(devices=1))["backends"] if b["platform"] == "tpu")
    assert tpu["status"] == "skipped" and tpu["error"]
    # jax 0.12 also skips its IFRT proxy backend here: "no TPU and no IFRT proxy here (...)".
    assert re.search(r"^no TPU( and no IFRT proxy)? here \(JAX skips", proc.stdout, re.M), proc.stdout
    assert tpu["error"] not in proc.stdout
    assert "backends not in use" not in proc.stdout, proc.stdout


def test_platform_filter_limits_backends():
    doc = run_json("list", "--platform", "cpu", env=devctl_env(devices=2))
    assert [b["platform"] for b in doc["backends"]] == ["cpu"]


def test_platform_not_installed_is_reported_not_crashed():
    # Asked for and not here: exit 1, the rule check applies to an expected platform (not 0 with nothing listed).
    doc = run_json("list", "--platform", "rocm", env=devctl_env(devices=2), expect_code=1)
    rocm = next(b for b in doc["backends"] if b["platform"] == "rocm")
    assert rocm["status"] == "skipped"
    assert "installed" in rocm["error"]
    assert doc["devices"] == []
    assert doc["platforms"] == ["rocm"]


def test_a_platform_asked_for_that_does_not_start_exits_1_and_names_the_flag():
    """`list --platform tpu` on a machine without TPU: the flag is said (JAX_PLATFORMS is unset), and it exits 1,
    as a JAX program limited to tpu fails here (the oracle: real JAX under JAX_PLATFORMS=tpu raises)."""
    env = devctl_env(devices=1)  # JAX_PLATFORMS unset
    doc = run_json("list", "--platform", "tpu", env=env, expect_code=1)
    if doc["hardware"]["tpu"]["chips"]:
        pytest.skip("this machine has TPU chips")
    oracle = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env={**env, "JAX_PLATFORMS": "tpu"},
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert oracle.returncode != 0 and "Unable to initialize backend 'tpu'" in oracle.stderr, oracle.stderr
    proc = run_devctl("list", "--platform", "tpu", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1] == "--platform tpu: tpu does not start here", proc.stdout
    assert "no TPU chip (--platform tpu asked for it)" in proc.stdout and "leave out --platform tpu" in proc.stdout
    assert "JAX_PLATFORMS" not in proc.stdout, proc.stdout
    assert "JAX sees no device at all" not in proc.stdout, proc.stdout
    (tpu,) = [b for b in doc["backends"] if b["platform"] == "tpu"]
    assert "JAX_PLATFORMS" not in tpu["summary"] + tpu["hint"] and tpu["remedies"] == []
    # What does start is listed, and still exits 1 for what was asked for and is not here.
    both = run_json("list", "--platform", "tpu", "--platform", "cpu", env=env, expect_code=1)
    assert [d["platform"] for d in both["devices"]] == ["cpu"]
    assert run_json("list", "--platform", "cpu", env=env)["platforms"] == ["cpu"]


def test_a_pjrt_c_api_version_of_0_0_is_no_version():
    """jaxlib 0.12's CPU client reports 0.0 (a placeholder: it has no C API); a plugin's real version is kept
    (tests/test_oracle_heavy.py runs jaxlib 0.12 itself)."""
    from types import SimpleNamespace

    from devctl.probe.backends import pjrt_c_api_version

    assert pjrt_c_api_version(SimpleNamespace(pjrt_c_api_major_version=0, pjrt_c_api_minor_version=0)) is None
    assert pjrt_c_api_version(SimpleNamespace()) is None
    assert pjrt_c_api_version(SimpleNamespace(pjrt_c_api_major_version=0, pjrt_c_api_minor_version=75)) == {"major": 0, "minor": 75}


def test_jax_platforms_env_is_honoured():
    doc = run_json("list", env=devctl_env(devices=2, JAX_PLATFORMS="cpu"))
    assert [b["platform"] for b in doc["backends"]] == ["cpu"]


def test_probe_does_not_preallocate_unless_asked(tmp_path):
    script = tmp_path / "echo_env.py"
    script.write_text("import os; print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))")
    from devctl.probe.runner import child_env

    assert child_env()["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true"
    try:
        assert child_env()["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    finally:
        del os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]


def _unused(doc: dict, kind: str) -> list[dict]:
    return [u for u in doc["unused_accelerators"] if u["kind"] == kind]


def test_host_root_tpu_v5e_chips_listed_as_unused_with_holder(tmp_path):
    host = tpu_v5e_host(tmp_path, chips=4)
    host.process(4242, ["python3", "train.py"], fds={7: "/dev/vfio/5"})
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    validate_schema(doc, "list")
    chips = _unused(doc, "tpu-chip")
    assert len(chips) == 4 and all(c["name"] == "TPU v5e" for c in chips)
    held = [c for c in chips if c["reason"].startswith("held by pid 4242")]
    assert len(held) == 1 and "train.py" in held[0]["reason"]
    tpu = next(b for b in doc["backends"] if b["platform"] == "tpu")
    # A job holds a chip: devctl does not even try to start TPU (a second libtpu owner would fail, or fail the job).
    assert tpu["status"] == "skipped" and "pid 4242" in tpu["error"]


def test_host_root_tpu_v4_without_libtpu_says_install_it(tmp_path):
    host = tpu_v4_host(tmp_path, chips=4)
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    chips = _unused(doc, "tpu-chip")
    assert len(chips) == 4
    assert all(c["reason"].startswith("tpu backend failed: ") and "libtpu.so" in c["reason"] for c in chips), chips
    tpu = next(b for b in doc["backends"] if b["platform"] == "tpu")
    assert tpu["status"] == "failed"  # chips present and free: JAX's quiet TPU failure is a real one here
    assert tpu["code"] == "DEVCTL_FR_LIBTPU_MISSING" and tpu["hint"] == "pip install -U 'jax[tpu]'", tpu


def test_host_root_nvidia_gpus_shown_when_jax_is_cpu_only(tmp_path):
    host = nvidia_host(tmp_path, gpus=8)
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    gpus = _unused(doc, "nvidia-gpu")
    assert len(gpus) == 8  # the NVSwitch is not a GPU
    assert all("jax[cuda" in g["reason"] for g in gpus)
    proc = run_devctl("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    assert "accelerators on this machine that JAX is not using" in proc.stdout


def test_host_root_nvidia_without_device_nodes_points_at_the_container(tmp_path):
    host = nvidia_host(tmp_path, gpus=2, nodes=False)
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    assert all("--gpus all" in g["reason"] for g in _unused(doc, "nvidia-gpu"))


def test_host_root_amd_gpus_listed_as_unused(tmp_path):
    host = amd_host(tmp_path, gpus=2)
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    assert len(_unused(doc, "amd-gpu")) == 2


def test_host_root_plain_host_has_nothing_unused(tmp_path):
    host = base_host(tmp_path)
    doc = run_json("list", "--host-root", str(host.path), env=devctl_env(devices=1))
    assert doc["unused_accelerators"] == []
    assert doc["host"]["numa_nodes"] == [0, 1]


# ------------------------------------------------------------------ plugins


def test_plugins_json_with_a_real_pjrt_library(pjrt_libs, tmp_path):
    env = devctl_env(PJRT_NAMES_AND_LIBRARY_PATHS=f"fakegpu{os.pathsep}{pjrt_libs['good']},broken{os.pathsep}/nope.so")
    doc = run_json("plugins", env=env)
    validate_schema(doc, "plugins")
    by_name = {p["name"]: p for p in doc["plugins"]}
    assert by_name["fakegpu"]["pjrt_api_version"] == {"major": 0, "minor": 54}
    assert by_name["fakegpu"]["attributes"]["xla_version"] == 2
    assert by_name["broken"]["status"] == "file missing"


def test_plugins_crashing_library_is_named_not_fatal(pjrt_libs):
    env = devctl_env(PJRT_NAMES_AND_LIBRARY_PATHS=f"bad{os.pathsep}{pjrt_libs['segfault']}")
    doc = run_json("plugins", env=env)
    bad = doc["plugins"][0]
    assert bad["status"] == "crashed" and "SIGSEGV" in bad["error"]


def test_plugins_table_without_plugins_says_so():
    proc = run_devctl("plugins", env=devctl_env())
    assert proc.returncode == 0
    assert proc.stdout == "No JAX plugins installed and PJRT_NAMES_AND_LIBRARY_PATHS is not set: JAX has its built-in CPU backend only.\n"


def test_list_includes_plugin_reports(pjrt_libs):
    env = devctl_env(devices=1, PJRT_NAMES_AND_LIBRARY_PATHS=f"fakegpu{os.pathsep}{pjrt_libs['good']}")
    doc = run_json("list", env=env, expect_code=1)
    assert [p["name"] for p in doc["plugins"]] == ["fakegpu"]
    # JAX itself then fails to create a client from the fake library: named, CPU still listed,
    # and list exits 1 because a JAX program here dies with it (tests/test_oracle.py proves that).
    fake = next(b for b in doc["backends"] if b["platform"] == "fakegpu")
    assert fake["status"] in ("failed", "crashed")
    assert doc["jax_outcome"]["result"] in ("raises", "crashes") and doc["jax_outcome"]["culprit"] == "fakegpu"
    assert [d for d in doc["devices"] if d["platform"] == "cpu"]


# ---------------------------------------------------------------------- env


def test_env_json_explains_variables_and_validates():
    env = devctl_env(
        XLA_PYTHON_CLIENT_MEM_FRACTION="1.5", XLA_PYTHON_CLIENT_ALLOCATOR="bogus", JAX_CUDA_VISIBLE_DEVICES="0",
        JAX_COORDINATOR_ADDRESS="10.0.0.1:8476", JAX_NUM_PROCESSES="4",
    )  # fmt: skip
    doc = run_json("env", env=env)
    validate_schema(doc, "env")
    by_name = {e["name"]: e for e in doc["env"]}
    assert "outside (0, 1]" in by_name["XLA_PYTHON_CLIENT_MEM_FRACTION"]["problem"]
    assert "must be one of" in by_name["XLA_PYTHON_CLIENT_ALLOCATOR"]["problem"]
    assert "no effect" in by_name["JAX_CUDA_VISIBLE_DEVICES"]["problem"]
    # A count in the environment looks like cluster configuration; JAX never reads it.
    assert by_name["JAX_COORDINATOR_ADDRESS"]["problem"] is None
    assert "--num-processes" in by_name["JAX_NUM_PROCESSES"]["problem"]
    assert {p["name"] for p in doc["packages"]} >= {"jax", "jaxlib"}


def test_env_does_not_import_jax():
    import subprocess
    import sys

    code = "import sys; sys.argv=['devctl','env','--json']\nfrom devctl.cli.app import main\ntry:\n    main()\nexcept SystemExit:\n    pass\nassert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, 'env imported jax'\n"
    proc = subprocess.run([sys.executable, "-c", code], env=devctl_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


def test_env_reports_version_skew_from_real_metadata(tmp_path):
    # A site directory whose jaxlib metadata is older than jax allows, ahead of the real one on sys.path.
    dist = tmp_path / "jaxlib-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxlib\nVersion: 0.0.1\n")
    env = devctl_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{devctl_env()['PYTHONPATH']}")
    doc = run_json("env", env=env)
    messages = [f["message"] for f in doc["findings"]]
    assert any("jaxlib is version 0.0.1" in m for m in messages), messages


# -------------------------------------------------- GPUs JAX leaves unused (NVML is a driver boundary: data here)


def _gpu(index: int):
    from devctl.model.hardware import NvidiaGpu

    return NvidiaGpu(index, "NVIDIA H100", f"GPU-{index}", f"0000:{0x18 + index:02x}:00.0", 80 << 30, 0, 80 << 30,
                     (9, 0), 5, 5, 5, 16, 16, None, None, None)  # fmt: skip


def _hardware(gpus: int):
    from devctl.collect.list_ import Hardware
    from devctl.model.hardware import NvmlReport

    return Hardware(NvmlReport("ok", None, "580.1", 13000, "13.0", tuple(_gpu(i) for i in range(gpus))), [], [], None, None)


def _cuda(n: int, matched: bool):
    from devctl.model.list_ import BackendInfo, BackendStatus, DeviceInfo

    devices = [
        DeviceInfo(i, "gpu", "NVIDIA H100", 0, nvml_gpu={"index": i, "pci_bus_id": _gpu(i).pci_bus_id} if matched else None)
        for i in range(n)
    ]
    return [BackendInfo("cuda", BackendStatus.OK, device_count=n)], devices


def test_gpus_hidden_from_jax_are_named_when_cuda_works():
    from devctl.collect.list_ import unused_accelerators

    backends, devices = _cuda(2, matched=True)
    unused = unused_accelerators(backends, devices, _hardware(4))
    assert [u.location for u in unused] == [_gpu(2).pci_bus_id, _gpu(3).pci_bus_id]
    assert all("CUDA_VISIBLE_DEVICES" in u.reason and "install" not in u.reason for u in unused)


def test_gpus_all_in_use_are_not_listed_even_without_bus_ids():
    from devctl.collect.list_ import unused_accelerators

    backends, devices = _cuda(4, matched=False)
    assert unused_accelerators(backends, devices, _hardware(4)) == []
    backends, devices = _cuda(3, matched=False)
    (one,) = unused_accelerators(backends, devices, _hardware(4))
    assert one.location.startswith("1 of 4") and "3 device(s) for 4 GPUs" in one.reason


def test_platform_named_by_pjrt_env_is_accepted_and_its_failure_named(tmp_path):
    bogus = tmp_path / "libquantum.so"
    bogus.write_text("not a library")
    env = devctl_env(devices=1, PJRT_NAMES_AND_LIBRARY_PATHS=f"quantum{os.pathsep}{bogus}")
    doc = run_json("list", "--platform", "quantum", env=env, expect_code=1)
    (quantum,) = [b for b in doc["backends"] if b["platform"] == "quantum"]
    assert quantum["status"] in ("failed", "crashed") and quantum["error"]
