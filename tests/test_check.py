"""`devctl check` end to end: each verdict from a real condition, exit codes, JSON, JUnit, annotations, config."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl, run_json, validate_schema
from hosttrees import nvidia_host, tpu_v4_host, tpu_v5e_host
from plugin_packages import write_plugin

from devctl.checks import CHECK_NAMES
from devctl.privilege import as_root

GIB = 1 << 30
MIB = 1 << 20


def _doc(proc: subprocess.CompletedProcess, code: int) -> dict:
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    validate_schema(doc, "check")
    return doc


def _by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


def _with_site(site: Path, **extra: str) -> dict[str, str]:
    return devctl_env(devices=2, PYTHONPATH=f"{site}{os.pathsep}{devctl_env()['PYTHONPATH']}", **extra)


def _dist_info(site: Path, name: str, version: str) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


# ---- a healthy CPU runner ---------------------------------------------------------------------------


def test_default_check_passes_on_a_cpu_runner_with_json_and_junit(tmp_path):
    junit = tmp_path / "report.xml"
    proc = run_devctl("check", "--json", "--junit-xml", str(junit), env=devctl_env(devices=4), cwd=tmp_path)
    doc = _doc(proc, 0)
    checks = _by_name(doc)
    assert list(checks) == list(CHECK_NAMES)
    assert {n: c["status"] for n, c in checks.items()} == {
        "versions": "pass", "plugins": "pass", "backends": "pass", "devices": "pass", "compute": "pass",
        "transfer": "pass", "memory": "skip", "bandwidth": "pass", "memory-bw": "skip", "matmul": "skip", "busbw": "skip",
        "stragglers": "skip", "busy": "skip", "nvml-health": "skip", "host": "pass", "tpu": "skip", "env": "pass",
    }  # fmt: skip
    # The benchmarks run only when an expectation asks for them: a default check measures none of them.
    assert "--min-tflops" in checks["matmul"]["message"] and not any(p.startswith("bench-") for p in doc["phases_s"])
    assert doc["status"] == "pass" and doc["expectations"]["platforms"] is None
    assert checks["compute"]["details"]["trials"] == 8  # matmul and sum on each of 4 devices
    assert checks["transfer"]["details"] == {"round_trips": 4, "pairs": 12, "size_bytes": (1 << 20) + 13}
    assert checks["bandwidth"]["details"]["cells"][0]["gbps"] > 0
    assert "no memory_stats" in checks["memory"]["message"]
    assert all(c["duration_s"] >= 0 and c["message"] for c in doc["checks"])

    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == list(CHECK_NAMES)
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("17", "0", "8")
    assert cases["memory"].find("skipped") is not None and cases["compute"].find("failure") is None


def test_unmet_expectations_fail_with_a_table_junit_and_github_annotations(tmp_path):
    junit = tmp_path / "out.xml"
    proc = run_devctl(
        "check", "--platform", "cpu", "--min-devices", "8", "--device-kind", "H100", "--min-memory", "1GiB",
        "--min-h2d", "100000GB/s", "--only", "devices,memory,bandwidth,compute", "--junit-xml", str(junit),
        env=devctl_env(devices=2, GITHUB_ACTIONS="true"), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split() and line.split()[0] in CHECK_NAMES}
    assert list(rows) == ["devices", "compute", "memory", "bandwidth"]
    assert "FAIL" in rows["devices"] and "2 cpu device(s), expected at least 8" in rows["devices"] and "expected H100" in rows["devices"]
    assert "FAIL" in rows["memory"] and "cannot verify" in rows["memory"]
    assert "FAIL" in rows["bandwidth"] and "expected at least 100000 GB/s" in rows["bandwidth"]
    assert " pass " in rows["compute"]
    assert "FAIL: 1 passed, 3 failed" in proc.stdout

    annotations = [ln for ln in proc.stderr.splitlines() if ln.startswith("::")]
    assert len(annotations) == 3
    assert annotations[0].startswith("::error title=devctl check%3A devices::2 cpu device(s)")

    suite = ET.parse(junit).getroot().find("testsuite")
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    assert suite.get("failures") == "3" and failures["compute"] is None
    assert "expected at least 8" in failures["devices"].get("message")
    assert "remediation:" in failures["bandwidth"].text
    # A CPU device's h2d is a copy within host memory: the advice is the host's, not a PCIe link's.
    assert "host memory" in failures["bandwidth"].text and "PCIe" not in failures["bandwidth"].text


# ---- env and versions: real variables, real package metadata ------------------------------------------


def test_env_warning_passes_unless_strict():
    env = devctl_env(JAX_PLATFORM_NAME="cpu")
    doc = _doc(run_devctl("check", "--only", "env", "--json", env=env), 0)
    assert doc["status"] == "warn" and doc["checks"][0]["status"] == "warn"
    assert "JAX_PLATFORM_NAME" in doc["checks"][0]["message"] and "JAX_PLATFORMS" in doc["checks"][0]["remediation"]
    strict = _doc(run_devctl("check", "--only", "env", "--strict", "--json", env=env), 1)
    assert strict["strict"] and strict["checks"][0]["status"] == "fail"


def test_env_values_jax_rejects_fail():
    env = devctl_env(
        XLA_PYTHON_CLIENT_MEM_FRACTION="1.5", XLA_PYTHON_CLIENT_ALLOCATOR="bogus",
        TPU_LIBRARY_PATH="/nonexistent/libtpu.so", JAX_PLATFORMS="cpu,quantum",
    )  # fmt: skip
    (env_check,) = _doc(run_devctl("check", "--only", "env", "--json", env=env), 1)["checks"]
    assert env_check["status"] == "fail"
    problems = env_check["details"]["problems"]
    assert "outside (0, 1]" in problems["XLA_PYTHON_CLIENT_MEM_FRACTION"]
    assert "must be one of" in problems["XLA_PYTHON_CLIENT_ALLOCATOR"]
    assert "does not exist" in problems["TPU_LIBRARY_PATH"]
    assert "quantum" in problems["JAX_PLATFORMS"]


def test_version_skew_in_package_metadata_fails_versions(tmp_path):
    _dist_info(tmp_path, "jaxlib", "0.0.1")
    _dist_info(tmp_path, "jax-cuda12-plugin", "0.0.2")
    (versions,) = _doc(run_devctl("check", "--only", "versions", "--json", env=_with_site(tmp_path)), 0)["checks"]
    # Only the metadata is skewed: the jaxlib Python imports is this venv's, and jax.devices() works. By the one
    # rule (a failure where JAX fails) the skew is said, with its fix, and does not fail the run; where it does
    # make JAX fail, versions fails (tests/test_oracle_heavy.py: a real jaxlib newer than jax).
    assert versions["status"] == "pass" and versions["message"].startswith("JAX works on what is here; ")
    assert "jaxlib is version 0.0.1, but this version of jax requires" in versions["message"]
    # jaxlib's own words (plugin_support.check_plugin_version names the module).
    assert any("JAX plugin jax_cuda12_plugin version 0.0.2" in f and "not compatible" in f for f in versions["details"]["findings"])
    # One fix for both skews: jax's own pins for its release.
    assert versions["details"]["remedy"].startswith("pip install -U 'jax[cuda12")
    assert versions["details"]["fix"]["command"] == versions["details"]["remedy"]


# ---- plugins and backends: real failing plugins ---------------------------------------------------------


def test_broken_plugins_fail_plugins_while_compute_still_runs(tmp_path):
    write_plugin(tmp_path, "boom", "raises")
    write_plugin(tmp_path, "segv", "segfaults")
    doc = _doc(run_devctl("check", "--only", "plugins,backends,compute,transfer", "--json", env=_with_site(tmp_path)), 1)
    checks = _by_name(doc)
    assert checks["plugins"]["status"] == "fail"
    problems = " ".join(checks["plugins"]["details"]["problems"])
    assert "plugin exploded on purpose" in problems and "SIGSEGV" in problems
    # A plugin that segfaults kills every JAX program here (tests/test_oracle.py): backends fails for it...
    assert checks["backends"]["status"] == "fail" and checks["backends"]["message"].startswith("jax.devices() crashes")
    assert "uninstall" in checks["backends"]["remediation"]
    # ...while the health child leaves out the plugins that broke the backend probe, so the CPU devices still get tested.
    assert checks["compute"]["status"] == "pass" and checks["transfer"]["status"] == "pass"


def test_failing_backend_and_missing_expected_platform(pjrt_libs, tmp_path):
    env = devctl_env(devices=1, PJRT_NAMES_AND_LIBRARY_PATHS=f"fakegpu{os.pathsep}{pjrt_libs['major_1']}")
    doc = _doc(run_devctl("check", "--platform", "tpu", "--only", "plugins,backends,tpu", "--json", env=env, cwd=tmp_path), 1)
    checks = _by_name(doc)
    assert checks["backends"]["status"] == "fail" and "expected tpu" in checks["backends"]["message"]
    assert "Mismatched PJRT plugin PJRT API" in checks["backends"]["details"]["backends"]["fakegpu"]["error"]
    assert checks["plugins"]["status"] == "fail" and "PJRT C API 1.54" in checks["plugins"]["message"]
    # No TPU here: a skip by default, a failure when the job expects one.
    assert checks["tpu"]["status"] == "fail" and "no TPU chip" in checks["tpu"]["message"]
    assert doc["expectations"]["sources"] == {"platform": "flag"}


def test_jax_platforms_naming_a_platform_that_cannot_start_fails_backends():
    doc = _doc(run_devctl("check", "--only", "backends,compute", "--json", env=devctl_env(devices=1, JAX_PLATFORMS="tpu")), 1)
    checks = _by_name(doc)
    message = checks["backends"]["message"]
    assert checks["backends"]["status"] == "fail" and message.startswith("jax.devices() raises: RuntimeError: Unable to initialize backend 'tpu'")
    assert checks["backends"]["remediation"] == "unset JAX_PLATFORMS, so JAX picks the best backend that starts"
    assert checks["compute"]["status"] == "skip"  # nothing initialized to compute on; the health child was let go


# ---- the machine: host trees with real /proc entries, a real small /dev/shm -----------------------------


def test_tpu_held_by_another_process_is_named_and_thp_off_warns(tmp_path):
    host = tpu_v5e_host(tmp_path, chips=4)
    host.file("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    host.lockfile("4242\n")
    host.process(4242, ["python3", "train.py"], fds={7: "/dev/vfio/5"})
    host.proc_lock(4242, "/tmp/libtpu_lockfile")
    checks = _by_name(_doc(run_devctl("check", "--host-root", str(host.path), "--only", "tpu,host", "--json"), 1))
    tpu = checks["tpu"]
    assert tpu["status"] == "fail"
    assert "pid 4242 (python3 train.py" in tpu["message"] and "/dev/vfio/5" in tpu["message"] and "/tmp/libtpu_lockfile" in tpu["message"]
    assert "kill 4242" in tpu["remediation"]
    assert checks["host"]["status"] == "warn" and "transparent hugepages" in checks["host"]["message"]


def test_tpu_stale_lockfile_warns_and_a_missing_device_node_fails(tmp_path):
    host = tpu_v4_host(tmp_path, chips=4)
    host.lockfile("31337\n")  # names a pid that does not exist, and nobody has it open
    (tpu,) = _doc(run_devctl("check", "--host-root", str(host.path), "--only", "tpu", "--json"), 0)["checks"]
    assert tpu["status"] == "warn" and "stale /tmp/libtpu_lockfile" in tpu["message"] and "31337" in tpu["message"]
    assert tpu["remediation"] == as_root("rm /tmp/libtpu_lockfile")  # sudo only for a user who is not root
    host.remove("/dev/accel1")
    (tpu,) = _doc(run_devctl("check", "--host-root", str(host.path), "--only", "tpu", "--json"), 1)["checks"]
    assert tpu["status"] == "fail" and "/dev/accel1 does not exist" in tpu["message"]


@pytest.fixture
def small_shm(tmp_path):
    """An NVIDIA 8-GPU host tree whose /dev/shm is a real 64 MiB tmpfs, as Docker gives by default."""
    host = nvidia_host(tmp_path, gpus=8)
    shm = host.local("/dev/shm")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(shm)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield host
    subprocess.run(["umount", str(shm)], check=False)


def test_small_shm_with_several_gpus_fails_host(small_shm):
    (host_check,) = _doc(run_devctl("check", "--host-root", str(small_shm.path), "--only", "host", "--json"), 1)["checks"]
    assert host_check["status"] == "fail"
    assert "/dev/shm is 64.0 MiB with 8 GPUs" in host_check["message"] and "--shm-size" in host_check["remediation"]


# ---- expectations from pyproject.toml and --config ------------------------------------------------------


def test_pyproject_table_is_found_upward_and_flags_override_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "job"\n\n[tool.devctl.check]\nmin-devices = 64\nonly = ["devices"]\n')
    cwd = tmp_path / "src" / "job"
    cwd.mkdir(parents=True)
    doc = _doc(run_devctl("check", "--json", env=devctl_env(devices=2), cwd=cwd), 1)
    assert [c["name"] for c in doc["checks"]] == ["devices"]
    assert doc["expectations"]["min_devices"] == 64
    assert doc["expectations"]["sources"]["min-devices"] == str(tmp_path / "pyproject.toml")
    doc = _doc(run_devctl("check", "--json", "--min-devices", "2", env=devctl_env(devices=2), cwd=cwd), 0)
    assert doc["expectations"]["min_devices"] == 2 and doc["expectations"]["sources"]["min-devices"] == "flag"


def test_config_file_with_every_key(tmp_path):
    config = tmp_path / "runner.toml"
    config.write_text(
        'platform = "cpu"\nmin-devices = 2\ndevice-kind = "cpu"\nmin-memory = "1GiB"\nmin-h2d = 0.001\n'
        'timeout = 20\nonly = ["devices", "memory"]\nskip = ["memory"]\nstrict = true\n'
    )
    doc = _doc(run_devctl("check", "--config", str(config), "--json", env=devctl_env(devices=2), cwd=tmp_path), 0)
    exp = doc["expectations"]
    assert (exp["platforms"], exp["min_devices"], exp["device_kind"], exp["min_memory_bytes"]) == (["cpu"], 2, "cpu", GIB)
    assert (exp["min_h2d_gbps"], exp["timeout_s"], doc["strict"]) == (0.001, 20.0, True)
    assert [c["name"] for c in doc["checks"]] == ["devices"]


@pytest.mark.parametrize(
    "content,needles",
    [
        ('[tool.devctl.check]\nmin-devcies = 8\n', ["min-devcies", "accepted"]),
        ('[tool.devctl.check]\nmin-devices = "eight"\n', ["min-devices", "eight"]),
        ('[tool.devctl.check]\nplatform = ["cpu", "quantum"]\n', ["platform", "quantum"]),
        ('[tool.devctl.check]\ntimeout = 600\n', ["timeout", "600"]),
        ('[tool.devctl.check]\nstrict = "yes"\n', ["strict"]),
        ("[tool.devctl.check\nmin-devices = 8\n", ["not valid TOML"]),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, content, needles):
    (tmp_path / "pyproject.toml").write_text(content)
    assert_usage_error(run_devctl("check", env=devctl_env(devices=1), cwd=tmp_path), *needles)


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--only", "bogus"], ["bogus", "compute"]),
        (["--skip", "compute,nope"], ["nope"]),
        (["--min-devices", "0"], ["--min-devices", "0"]),
        (["--min-memory", "lots"], ["--min-memory", "lots"]),
        (["--min-h2d", "fast"], ["--min-h2d", "fast"]),
        (["--platform", "quantum"], ["quantum"]),
        (["--timeout", "99"], ["--timeout", "99"]),
        (["--config", "/nonexistent/devctl.toml"], ["/nonexistent/devctl.toml"]),
        (["--only", "env", "--skip", "env"], ["no check"]),
        (["--host-root", "/usr/share"], ["/usr/share"]),
    ],
)
def test_bad_flags_are_one_line_exit_2(tmp_path, args, needles):
    assert_usage_error(run_devctl("check", *args, env=devctl_env(devices=1), cwd=tmp_path), *needles)


def test_unwritable_junit_path_is_refused_before_any_check_runs(tmp_path):
    from pjrt_fixtures import IMPORT_MARKER_ENV, write_module_package

    # A plugin that records being imported: the backend probe would import it if the checks had started.
    write_module_package(tmp_path / "site", "jax_plugins.tripwire")
    marker = tmp_path / "imported"
    env = _with_site(tmp_path / "site", **{IMPORT_MARKER_ENV: str(marker)})
    proc = run_devctl("check", "--junit-xml", str(tmp_path / "missing-dir" / "report.xml"), env=env, cwd=tmp_path)
    assert_usage_error(proc, "--junit-xml", "missing-dir")
    assert not marker.exists() and proc.stdout == ""


def test_check_and_doctor_help_import_nothing_heavy():
    code = (
        "import sys, atexit\n"
        "heavy = lambda: [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'numpy', 'pynvml')]\n"
        "atexit.register(lambda: sys.__stderr__.write('HEAVY:' + ','.join(heavy()) + '\\n'))\n"
        "sys.argv = ['devctl'] + sys.argv[1:]\nfrom devctl.cli.entry import main\nmain()\n"
    )
    for command in ("check", "doctor"):
        proc = subprocess.run([sys.executable, "-c", code, command, "--help"], env=devctl_env(), capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 0 and "--json" in proc.stdout, proc.stderr
        assert "HEAVY:\n" in proc.stderr, proc.stderr


# ---- verdict logic that needs hardware this machine lacks -------------------------------------------------


def test_nvml_health_verdicts_from_the_counters(monkeypatch):
    """pynvml's C calls replaced by a sick GPU 0 and a healthy GPU 1; the real GPU test is below."""
    import pynvml

    from devctl.checks.nvml import gpu_problems
    from devctl.discovery.nvml import nvml_health
    from devctl.hostroot import HostRoot

    sick = {
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: {(0, 0): 2, (0, 1): 5}.get((h, counter), 0),
        "nvmlDeviceGetRetiredPages": lambda h, cause: [] if h else [0x1000, 0x2000],
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: 0,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 1, 1, 0) if h == 0 else (0, 0, 0, 0),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: pynvml.nvmlClocksEventReasonHwThermalSlowdown if h == 0 else pynvml.nvmlClocksEventReasonGpuIdle,
        "nvmlDeviceGetTemperature": lambda h, sensor: 91 if h == 0 else 40,
        "nvmlDeviceGetTemperatureThreshold": lambda h, kind: 90,
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 * GIB, used=GIB, free=79 * GIB),
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode()),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [SimpleNamespace(pid=4242, usedGpuMemory=GIB)] if h == 0 else [],
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
    }  # fmt: skip
    for name, fn in sick.items():
        monkeypatch.setattr(pynvml, name, fn)
    report = nvml_health(HostRoot("/"))
    assert report.status == "ok" and len(report.gpus) == 2
    g0, g1 = report.gpus
    assert (g0.ecc_uncorrected_volatile, g0.remap_pending, g0.throttle_reasons) == (2, True, ("hw_thermal_slowdown",))
    assert g0.processes[0].pid == 4242 and g0.pci_bus_id == "0000:18:00.0"
    fails, warns, fix = gpu_problems(g0)
    assert any("2 uncorrectable ECC" in f for f in fails)
    assert any("pending until the GPU is reset" in f for f in fails)
    assert any("91 C, at or above its slowdown threshold 90 C" in f for f in fails)
    assert any("hw_thermal_slowdown" in w for w in warns) and any("2 page(s) retired" in w for w in warns)
    assert "drain GPU 0" in fix
    assert gpu_problems(g1) == ([], [], None)


def test_compute_and_transfer_verdicts_name_the_bad_device():
    from devctl.checks.compute import check_compute, check_transfer
    from devctl.model.check import (
        CheckStatus,
        DeviceTrial,
        Expectations,
        HealthProbeResult,
    )

    trials = [
        DeviceTrial("matmul", "cuda:0", "gpu", True, 1e-7, 1e-4),
        DeviceTrial("matmul", "cuda:1", "gpu", False, 0.5, 1e-4, error="result differs from numpy by 0.5 (relative), more than 0.0001"),
        DeviceTrial("h2d-d2h", "cuda:0", "gpu", True, size_bytes=1 << 20),
        DeviceTrial("d2d", "cuda:0->cuda:1", "gpu", False, size_bytes=1 << 20, error="3 of 1048576 bytes changed, first at offset 17"),
    ]
    crash = "killed by SIGSEGV while running d2d on cuda:1->cuda:0"
    health = HealthProbeResult(("cuda",), ("cuda:0", "cuda:1"), trials, [], None, crash, 1.0, unfinished="d2d")
    ctx = SimpleNamespace(health=lambda: health, expectations=Expectations())
    compute = check_compute(ctx)
    assert compute.status is CheckStatus.FAIL and "matmul on cuda:1: result differs" in compute.message
    assert "SIGSEGV" not in compute.message  # the crash happened in a transfer step, after compute finished
    transfer = check_transfer(ctx)
    assert transfer.status is CheckStatus.FAIL
    assert "d2d on cuda:0->cuda:1: 3 of 1048576 bytes changed" in transfer.message and "SIGSEGV" in transfer.message


def test_the_health_childs_own_comparisons_given_a_wrong_answer_fail_compute_and_transfer():
    """Issue 22: the comparisons the health child makes on what came back from each device (probe.health's
    matmul_error, sum_error, same_bytes), handed a real JAX answer with one value or byte wrong, give trials that
    fail the compute and transfer rows, naming the device and what was wrong; the right answers pass."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from devctl.checks.compute import check_compute, check_transfer
    from devctl.model.check import CheckStatus, Expectations, HealthProbeResult
    from devctl.probe import health

    rng = np.random.default_rng(0)
    a = rng.standard_normal((health.MATMUL_N, health.MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((health.MATMUL_N, health.MATMUL_N), dtype=np.float32)
    v = rng.random(health.SUM_N, dtype=np.float32)
    mm_ref, sum_ref = a.astype(np.float64) @ b.astype(np.float64), float(v.astype(np.float64).sum())
    product = np.asarray(jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest"))(a, b))
    total = float(jax.jit(jnp.sum)(v))
    payload = rng.integers(0, 256, size=health.TRANSFER_BYTES, dtype=np.uint8)
    devices = [SimpleNamespace(platform="cpu", id=i) for i in range(2)]

    def verdicts(wrong_product, wrong_total, wrong_back, wrong_d2d=payload):
        """The rows' verdicts when cpu:1 gave these answers, and these bytes arrived from cpu:0 (cpu:0 right)."""
        events = []
        for d, (p, t, back) in zip(devices, [(product, total, payload), (wrong_product, wrong_total, wrong_back)]):
            events.append(health.compute_trial("matmul", d, lambda p=p: health.matmul_error(np, p, mm_ref), health.MATMUL_TOLERANCE))
            events.append(health.compute_trial("sum", d, lambda t=t: health.sum_error(t, sum_ref), health.SUM_TOLERANCE))
            base = {"test": "h2d-d2h", "device": f"cpu:{d.id}", "platform": "cpu", "size_bytes": payload.nbytes}
            events.append(health.transfer_trial(np, base, lambda back=back: back.copy(), payload))
        base = {"test": "d2d", "device": "cpu:0->cpu:1", "platform": "cpu", "size_bytes": payload.nbytes}
        events.append(health.transfer_trial(np, base, lambda: wrong_d2d.copy(), payload))
        trials = [health._trial({"event": "trial", **e}) for e in events]  # as the parent reads the child's events
        result = HealthProbeResult(("cpu",), ("cpu:0", "cpu:1"), trials, [], None, None, 1.0)
        ctx = SimpleNamespace(health=lambda: result, expectations=Expectations())
        return check_compute(ctx), check_transfer(ctx)

    compute, transfer = verdicts(product, total, payload)
    assert (compute.status, transfer.status) == (CheckStatus.PASS, CheckStatus.PASS), (compute, transfer)

    wrong_product = product.copy()
    wrong_product[17, 3] += 1.0  # one element of 65536 off by one
    flipped = payload.copy()
    flipped[4099] ^= 0x10  # one bit of one byte
    compute, transfer = verdicts(wrong_product, total * 1.01, flipped, payload[:-13])  # the tail dropped
    assert compute.status is CheckStatus.FAIL and compute.remediation and "drain it" in compute.remediation
    assert "matmul on cpu:1: result differs from numpy by" in compute.message, compute.message
    assert "sum on cpu:1: result differs from numpy by" in compute.message and "cpu:0" not in compute.message
    bad = {(t["test"], t["device"]) for t in compute.details["trials"] if not t["ok"]}
    assert bad == {("matmul", "cpu:1"), ("sum", "cpu:1")}
    assert transfer.status is CheckStatus.FAIL and "bytes change in transit" in (transfer.remediation or "")
    assert "h2d-d2h on cpu:1: 1 of 1048589 bytes changed, first at offset 4099" in transfer.message, transfer.message
    assert "d2d on cpu:0->cpu:1: 1048576 bytes came back, 1048589 were sent" in transfer.message, transfer.message

    # A NaN from the device fails too (it compares false with everything), and says so.
    nan_product = product.copy()
    nan_product[0, 0] = np.nan
    compute, _ = verdicts(nan_product, total, payload)
    assert compute.status is CheckStatus.FAIL and "matmul on cpu:1: result differs from numpy by nan" in compute.message, compute.message


def _memory_verdict(limits: list[int], free: list[int | None], **exp):
    from devctl.checks.backends import check_memory
    from devctl.model.check import Expectations
    from devctl.model.list_ import DeviceInfo

    devices = [
        DeviceInfo(i, "gpu", "NVIDIA H200", 0, memory_stats={"bytes_limit": limit}, nvml_gpu={"index": i, "name": None, "uuid": None, "pci_bus_id": None})
        for i, limit in enumerate(limits)
    ]  # fmt: skip
    gpus = [SimpleNamespace(index=i, memory_free_bytes=f) for i, f in enumerate(free)]
    inv = SimpleNamespace(devices=devices, default_platform="cuda", hardware=SimpleNamespace(nvidia=SimpleNamespace(gpus=gpus)))
    return check_memory(SimpleNamespace(inventory=lambda: inv, expectations=Expectations(**exp)))


def test_memory_verdicts_against_what_a_new_process_can_allocate():
    """CPU devices report no memory_stats(), so the per-device figure is exercised with recorded GPU figures."""
    from devctl.model.check import CheckStatus

    idle = [100 * GIB, 100 * GIB]
    verdict = _memory_verdict([60 * GIB, 30 * GIB], idle)
    assert verdict.status is CheckStatus.PASS and verdict.message.startswith("30.0 GiB usable per device")
    assert _memory_verdict([60 * GIB, 30 * GIB], idle, min_memory_bytes=20 * GIB).status is CheckStatus.PASS
    short = _memory_verdict([60 * GIB, 30 * GIB], idle, min_memory_bytes=40 * GIB, platforms=("gpu",))
    assert short.status is CheckStatus.FAIL and short.message.startswith("gpu:1 30.0 GiB usable (the allocator's limit), expected at least 40.0 GiB")
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in short.remediation
    # Without NVML (a TPU, a container without the driver library) the allocator's limit is all there is.
    assert _memory_verdict([60 * GIB], [None], min_memory_bytes=40 * GIB).status is CheckStatus.PASS


def test_memory_on_a_shared_h200_is_what_the_driver_has_left():
    """The H200 of reference/h200-observations.md: another process held 106 GiB of 140 GiB; bytes_limit still said
    104.9 GiB and `check --min-memory 40GiB` passed, while a second process could allocate about 30 GiB."""
    from devctl.model.check import CheckStatus

    bytes_limit, nvml_free = 112_583_507_968, 35_230 * MIB
    verdict = _memory_verdict([bytes_limit], [nvml_free], min_memory_bytes=40 * GIB, platforms=("gpu",))
    assert verdict.status is CheckStatus.FAIL
    assert verdict.message.startswith("gpu:0 34.4 GiB usable (the driver's free memory: other processes hold the rest)")
    assert verdict.remediation.startswith("free the device: another process holds memory")
    assert verdict.details["usable_bytes"] == {"gpu:0": nvml_free}
    assert _memory_verdict([bytes_limit], [nvml_free], min_memory_bytes=30 * GIB).status is CheckStatus.PASS


@pytest.mark.gpu
def test_check_on_a_real_gpu():
    from devctl.discovery.nvml import nvml_report

    if nvml_report().status != "ok":
        pytest.skip("no NVML here")
    proc = run_devctl("check", "--platform", "gpu", "--json", env=devctl_env(devices=1), timeout=300)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "check")
    checks = _by_name(doc)
    assert checks["nvml-health"]["status"] != "skip", checks["nvml-health"]
    assert checks["backends"]["status"] == "pass" and checks["compute"]["status"] == "pass"
    assert checks["memory"]["status"] == "pass" and checks["transfer"]["status"] == "pass"
    assert proc.returncode == (1 if doc["status"] == "fail" else 0)


# ---- what each verdict and figure says (issue 13) -----------------------------------------------------


def test_an_expected_gpu_on_a_cpu_runner_is_missing_not_measured_on_the_cpu():
    """--platform gpu with --min-h2d on a CPU-only runner: no GPU to measure, and the CPU does not stand in."""
    proc = run_devctl(
        "check", "--platform", "gpu", "--min-h2d", "10GB/s", "--min-memory", "1GiB",
        "--only", "backends,compute,memory,bandwidth", "--json", env=devctl_env(devices=4),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    for name in ("compute", "bandwidth"):
        assert checks[name]["status"] == "fail", checks[name]
        assert "no gpu backend initialized" in checks[name]["message"], checks[name]
    assert not checks["bandwidth"]["details"].get("cells"), "a CPU was measured for a missing GPU"
    assert "health" not in doc["phases_s"]  # nothing to run the health child on: it never started


def test_a_checks_time_is_its_own_and_the_shared_probes_are_timed_apart():
    doc = run_json("check", "--only", "backends,devices,compute,transfer,bandwidth", env=devctl_env(devices=2))
    checks = {c["name"]: c for c in doc["checks"]}
    phases = doc["phases_s"]
    assert phases["inventory"] > 0 and phases["health"] > 0, phases
    # The first check to read the backend probe used to carry its whole time, and the next ones none.
    assert checks["backends"]["duration_s"] < phases["inventory"], (checks["backends"], phases)
    assert checks["compute"]["duration_s"] < phases["health"], (checks["compute"], phases)


def test_memory_names_what_it_left_out_and_csv_has_every_row():
    proc = run_devctl("check", "--min-memory", "1GiB", "--only", "memory", env=devctl_env(devices=5))
    assert proc.returncode == 1, proc.stderr
    assert "cpu:0, cpu:1, cpu:2 (and 2 more) report no memory_stats()" in proc.stdout, proc.stdout
    proc = run_devctl("check", "--only", "devices,env", "--csv", env=devctl_env(devices=2))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["check"] for r in rows] == ["devices", "env"]
    assert all(r["status"] == "pass" and float(r["duration_s"]) >= 0 and r["hostname"] for r in rows), rows


# ---- benchmark expectations (issue 14): the figures of bench memory, matmul and collective, judged --------------

BENCH_CHECKS = "memory-bw,matmul,busbw,stragglers"


def test_benchmark_expectations_pass_with_every_devices_figure_and_each_bench_run_once():
    proc = run_devctl(
        "check", "--only", BENCH_CHECKS, "--min-memory-bw", "1MB/s", "--min-tflops", "0.000001", "--min-busbw", "1MB/s",
        "--stragglers", "--json", env=devctl_env(devices=4),
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    assert proc.returncode == (1 if doc["status"] == "fail" else 0), proc.stderr
    validate_schema(doc, "check")
    checks = _by_name(doc)
    # The stragglers verdict is the machine's (a loaded 2-core VM can make one of 4 forced CPU devices 15% slower
    # on every call): what is tested here is that it reads the same measurements, not that this VM is even.
    assert {n: checks[n]["status"] for n in ("memory-bw", "matmul", "busbw")} == {"memory-bw": "pass", "matmul": "pass", "busbw": "pass"}, checks
    assert checks["stragglers"]["status"] in ("pass", "fail"), checks["stragglers"]
    devices = [f"cpu:{i}" for i in range(4)]
    memory, matmul = checks["memory-bw"]["details"], checks["matmul"]["details"]
    assert sorted(memory["figures"]) == devices and all(v > 0 for v in memory["figures"].values())
    assert (memory["unit"], matmul["unit"]) == ("GB/s", "TFLOP/s")
    assert checks["matmul"]["message"].startswith("f32 matmul 512x512: "), checks["matmul"]["message"]  # f32 on a CPU
    assert checks["memory-bw"]["message"].startswith("memory copy at 256M: ") and "on 4 device(s)" in checks["memory-bw"]["message"]
    busbw = checks["busbw"]["details"]
    assert busbw["ranks"] == 4 and busbw["size_bytes"] == 16 << 20 and busbw["busbw_gbps"] > 0
    # nccl-tests' rule: all-reduce busbw = algbw x 2(n-1)/n.
    assert busbw["busbw_gbps"] == pytest.approx(busbw["algbw_gbps"] * 2 * 3 / 4)
    # The stragglers check reads the same two benchmark runs as memory-bw and matmul: each ran once.
    assert checks["stragglers"]["details"]["memory"]["figures"] == memory["figures"]
    message = checks["stragglers"]["message"]
    assert message.startswith("no straggler among 4 devices") or message.startswith("straggler(s): "), message
    assert {"bench-memory", "bench-matmul", "bench-collective"} <= set(doc["phases_s"]), doc["phases_s"]


def test_unmet_benchmark_expectations_fail_naming_the_devices_and_without_them_nothing_is_measured():
    proc = run_devctl(
        "check", "--only", BENCH_CHECKS, "--min-memory-bw", "100000GB/s", "--min-tflops", "100000", "--min-busbw", "100000",
        env=devctl_env(devices=4),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    text = " ".join(proc.stdout.split())  # the table wraps long results
    assert "expected at least 100000 GB/s (--min-memory-bw)" in text and "(and 1 more)" in text, proc.stdout
    assert "expected at least 100000 TFLOP/s (--min-tflops)" in text, proc.stdout
    assert "busbw" in text and "expected at least 100000 GB/s (--min-busbw)" in text, proc.stdout
    doc = run_json("check", "--only", BENCH_CHECKS, env=devctl_env(devices=2))
    assert {c["name"]: c["status"] for c in doc["checks"]} == {n: "skip" for n in BENCH_CHECKS.split(",")}
    assert not any(p.startswith("bench-") for p in doc["phases_s"]), doc["phases_s"]  # no expectation: not measured


def test_a_collective_expectation_on_one_device_or_a_missing_gpu_fails_saying_why():
    doc = run_json("check", "--only", "busbw", "--min-busbw", "1", env=devctl_env(devices=1), expect_code=1)
    assert "one cpu device: no collective to measure" in doc["checks"][0]["message"], doc["checks"][0]
    doc = run_json("check", "--platform", "gpu", "--only", "matmul", "--min-tflops", "1", env=devctl_env(devices=2), expect_code=1)
    assert "not gpu: no gpu device to measure" in doc["checks"][0]["message"], doc["checks"][0]  # the CPU does not stand in


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--min-tflops", "fast"], ["--min-tflops", "fast"]),
        (["--min-tflops", "0"], ["--min-tflops", "0"]),
        (["--min-tflops", "600GFLOP/s"], ["--min-tflops", "600GFLOP/s"]),
        (["--min-memory-bw", "quick"], ["--min-memory-bw", "quick"]),
        (["--min-busbw", "-3"], ["--min-busbw"]),
        (["--min-busbw", "10", "--only", "env"], ["--min-busbw", "busbw"]),
        (["--stragglers", "--skip", "stragglers"], ["--stragglers", "stragglers"]),
        (["--max-busy", "0.1"], ["--max-busy", "ambiguous", "10%", "0.1%"]),  # a fraction or a percent: not guessed
        (["--max-busy", "150%"], ["--max-busy", "0% to 100%", "150%"]),
        (["--min-busy", "busy"], ["--min-busy", "busy"]),
        (["--min-busy", "-5"], ["--min-busy", "-5"]),
        (["--min-busy", "50", "--max-busy", "10%"], ["--min-busy 50%", "--max-busy 10%"]),
        (["--max-busy", "10", "--only", "env"], ["--max-busy", "busy"]),
    ],
)
def test_bad_benchmark_expectations_are_one_line_exit_2(tmp_path, args, needles):
    assert_usage_error(run_devctl("check", *args, env=devctl_env(devices=1), cwd=tmp_path), *needles)


def test_benchmark_expectations_come_from_the_config_table_too(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.devctl.check]\nmin-memory-bw = "1MB/s"\nmin-tflops = 1e-6\nmin-busbw = 0.001\nstragglers = true\nonly = ["env"]\n'
    )
    doc = _doc(run_devctl("check", "--json", env=devctl_env(devices=1), cwd=tmp_path), 0)
    exp = doc["expectations"]
    assert (exp["min_memory_bw_gbps"], exp["min_tflops"], exp["min_busbw_gbps"], exp["stragglers"]) == (0.001, 1e-6, 0.001, True)
    (tmp_path / "pyproject.toml").write_text('[tool.devctl.check]\nstragglers = "yes"\n')
    assert_usage_error(run_devctl("check", env=devctl_env(devices=1), cwd=tmp_path), "stragglers", "true or false")


# ---- the table a person sees (issue 24): verdict first, fits 80x24, colour, dependants under their cause ----------


def _on_a_terminal(*args: str, columns: int = 80, rows: int = 24, **extra: str) -> subprocess.CompletedProcess:
    """`devctl ARGS` with stdout on a real pty of `columns` x `rows` (colour allowed: NO_COLOR unset), as a person
    runs it on this machine: its one CPU device, no forced device count. stderr (the spinner) is kept apart."""
    import pty
    import threading

    env = devctl_env(COLUMNS=str(columns), LINES=str(rows), TERM="xterm-256color", **extra)
    for name in ("NO_COLOR", "XLA_FLAGS", "FORCE_COLOR"):
        env.pop(name, None)
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain():  # read while the child writes, so a full pty buffer never blocks it
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child's side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "devctl", *args], env=env, stdout=slave, stderr=subprocess.PIPE, timeout=180)
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    proc.stdout = b"".join(chunks).decode("utf-8").replace("\r\n", "\n")
    return proc


def _plain(text: str) -> list[str]:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).rstrip("\n").split("\n")


def test_a_default_run_fits_an_80x24_terminal_with_the_verdict_first_and_status_in_colour():
    from rich.cells import cell_len

    proc = _on_a_terminal("check")
    assert proc.returncode == 0, proc.stderr
    lines = _plain(proc.stdout)
    # 24 rows hold the command line, the view and the next prompt.
    assert len(lines) <= 22, "\n".join(lines)
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0].startswith("PASS: ") and " passed" in lines[0] and " skipped in " in lines[0], lines[0]
    assert lines[1].split() == ["check", "status", "result"], lines[1]  # no time column of 0.00 s, no column of "-"
    assert "0.00 s" not in proc.stdout and "what to do" not in proc.stdout
    # The four benchmarks nobody asked for: one line, not four rows.
    assert not any(line.split()[0] in ("memory-bw", "matmul", "busbw", "stragglers") for line in lines if line.split())
    assert any(line.startswith("not asked: memory-bw, matmul, busbw, stragglers") for line in lines), lines
    assert lines[-1].startswith("shared probes: backends "), lines
    assert "\x1b[32mpass\x1b[0m" in proc.stdout, repr(proc.stdout)  # PASS green on a terminal


def test_checks_that_fail_because_backends_failed_are_shown_under_it_and_stay_whole_in_json_and_junit(tmp_path):
    """--platform gpu --min-h2d on this CPU box: one cause (no gpu backend) used to be six FAIL rows, four saying
    'run devctl doctor'. The JSON and JUnit keep every check with its own status; caused_by names the cause."""
    junit = tmp_path / "check.xml"
    args = ("check", "--platform", "gpu", "--min-h2d", "10GB/s")
    doc = _doc(run_devctl(*args, "--json", "--junit-xml", str(junit), env=devctl_env(devices=2), cwd=tmp_path), 1)
    checks = _by_name(doc)
    assert list(checks) == list(CHECK_NAMES)
    dependants = {n: c["status"] for n, c in checks.items() if c["caused_by"] == "backends"}
    assert dependants == {"devices": "fail", "compute": "fail", "transfer": "fail", "memory": "skip", "bandwidth": "fail"}, dependants
    assert checks["backends"]["status"] == "fail" and checks["backends"]["caused_by"] is None
    assert all(checks[n]["message"] for n in dependants)  # each keeps its own words
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == str(len(CHECK_NAMES)) and suite.get("failures") == str(sum(c["status"] == "fail" for c in doc["checks"]))
    failure = next(c for c in suite.iter("testcase") if c.get("name") == "compute").find("failure")
    assert failure is not None and "caused by: backends failing" in failure.text

    proc = _on_a_terminal(*args)
    assert proc.returncode == 1, proc.stderr
    lines = _plain(proc.stdout)
    assert lines[0].startswith("FAIL: ") and "(4 because backends failed)" in lines[0], lines[0]
    top_fails = [line.split()[0] for line in lines if line.split()[1:2] == ["FAIL"] and not line.startswith(" ")]
    assert "backends" in top_fails and not {"devices", "compute", "transfer", "bandwidth"} & set(top_fails), lines
    at = next(i for i, line in enumerate(lines) if line.startswith("backends "))
    under = [line.split() for line in lines[at + 1 :] if line.startswith("  ") and line.split()[0] in dependants]
    assert [u[0] for u in under] == list(dependants), lines
    assert all(u[2:] == ["because", "backends", "failed"] for u in under), under
    assert "run devctl doctor" not in proc.stdout
    assert "\x1b[1;31mFAIL\x1b[0m" in proc.stdout, repr(proc.stdout)  # FAIL red on a terminal


def test_a_cause_is_kept_only_where_its_check_failed_and_follows_each_host_in_a_cluster():
    from devctl.checks.cluster import merge_reports
    from devctl.collect.check import with_causes
    from devctl.model import to_jsonable
    from devctl.model.check import CheckReport, CheckResult, CheckStatus, Expectations
    from devctl.render.check import check_lines

    S = CheckStatus
    dependant = CheckResult("compute", S.FAIL, "no gpu backend initialized", "run devctl doctor", caused_by="backends")
    # --skip backends, or backends passed: the dependant stands on its own.
    assert with_causes([dependant])[0].caused_by is None
    assert with_causes([CheckResult("backends", S.PASS, "ok"), dependant])[1].caused_by is None
    kept = with_causes([CheckResult("backends", S.FAIL, "expected gpu: no gpu backend is installed", "pip install"), dependant])
    assert kept[1].caused_by == "backends"

    def doc(host: str) -> dict:
        report = CheckReport("devctl.check/1", "0", 0.0, host, "fail", False, Expectations(), kept, {}, 1.0)
        return to_jsonable(report)

    merged = merge_reports([doc("h0"), doc("h1")], strict=False, expectations=Expectations(), elapsed_s=1.0)
    assert [c.caused_by for c in merged.checks] == [None, "backends [h0 process 0]", None, "backends [h1 process 1]"]
    lines = [line.plain for line in check_lines(merged, 80)]
    assert lines[0].startswith("FAIL: 0 passed, 4 failed (2 because backends failed)"), lines
    rows = [line.split() for line in lines[2:] if line.split() and line.split()[0] in ("backends", "compute")]
    assert [r[:4] for r in rows] == [["backends", "h0", "0", "FAIL"], ["compute", "h0", "0", "FAIL"],
                                     ["backends", "h1", "1", "FAIL"], ["compute", "h1", "1", "FAIL"]], lines  # fmt: skip
    assert sum("because backends failed" in line for line in lines[1:]) == 2 and "run devctl doctor" not in "\n".join(lines)


@pytest.mark.parametrize("width", [20, 30, 40, 60, 100, 130])
def test_every_check_view_fits_any_terminal_width(width):
    """The goldens are at 80 and 200 columns; between and below, no line may pass the edge either (the time, then
    the host and process, give way; then results go under their rows)."""
    from golden_reports import VIEWS
    from rich.cells import cell_len

    from devctl.render.check import check_lines

    for view in (v for v in VIEWS if v.startswith("check-")):
        lines = [line for text in check_lines(VIEWS[view](), width) for line in text.plain.split("\n")]
        wide = [line for line in lines if cell_len(line) > width]
        assert not wide, f"{view} at {width} columns:\n" + "\n".join(wide)
        assert lines[0].split(":")[0] in ("PASS", "FAIL", "PASS with warnings"), lines[0]


def test_a_variable_that_makes_import_jax_raise_is_the_one_cause_and_backends_follows_it():
    """JAX_ENABLE_X64=maybe: env names the variable and its fix; backends (jax.devices() raises) follows from it,
    and the checks that had no device follow from backends: one cause, one fix, said once."""
    env = devctl_env(devices=2, JAX_ENABLE_X64="maybe")
    checks = _by_name(_doc(run_devctl("check", "--json", env=env), 1))
    assert checks["env"]["status"] == "fail" and checks["env"]["caused_by"] is None
    assert (checks["backends"]["status"], checks["backends"]["caused_by"]) == ("fail", "env")
    assert {n for n, c in checks.items() if c["caused_by"] == "backends"} >= {"devices", "compute", "transfer"}
    proc = run_devctl("check", env=env)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FAIL: ") and "because env failed)" in lines[0], lines[0]
    at = next(i for i, line in enumerate(lines) if line.startswith("env "))
    assert lines[at + 1].split() == ["backends", "FAIL", "because", "env", "failed"], lines
    assert lines[at + 1].startswith("  backends") and lines[at + 2].startswith("    devices"), lines
    assert proc.stdout.count("set it to true or false") == 1, proc.stdout  # the fix, once


@pytest.mark.parametrize("bench", ["memory", "matmul"])
def test_a_wrong_result_fails_the_bench_derived_rows_as_wrong_not_as_unmeasured(bench):
    """check --min-memory-bw / --min-tflops given a bench report whose device computed a wrong result: the row fails
    and says the result was wrong there (the bench reports no figure for it)."""
    from devctl.checks.performance import check_matmul, check_memory_bw
    from devctl.checks.verdict import CheckStatus

    plan = {"event": "plan", "devices": [{"id": i, "name": f"cpu:{i}", "platform": "cpu", "device_kind": "cpu"} for i in range(2)], "environment": {}}
    timed = {"method": "burst", "samples": 5, "calls_per_sample": 10, "min_s": 1e-3, "p10_s": 1e-3, "median_s": 1e-3, "p90_s": 1e-3}
    if bench == "memory":
        from devctl.collect.bench_memory import assemble

        ok = {"size_bytes": 1 << 20, "bytes_moved": 2 << 20, **timed, "gbps": 2.1, "peak_gbps": 2.1, "verified": True}
        bad = {**ok, "gbps": None, "peak_gbps": None, "verified": False, "note": "the result was wrong"}
        check, expect = check_memory_bw, {"min_memory_bw_gbps": 1.0}
    else:
        from devctl.collect.bench_matmul import assemble

        ok = {"dtype": "bf16", "n": 512, "precision": "DEFAULT", "flops": 2 * 512**3, **timed, "tflops": 0.27, "peak_tflops": 0.27, "verified": True}
        bad = {**ok, "tflops": None, "peak_tflops": None, "verified": False, "note": "the result was wrong"}
        check, expect = check_matmul, {"min_tflops": 0.1}
    events = [plan, {"event": "cell", "device": "cpu:0", **ok}, {"event": "cell", "device": "cpu:1", **bad}, {"event": "done", "elapsed_s": 1.0}]
    report = assemble(events)
    ctx = SimpleNamespace(expectations=SimpleNamespace(**{"min_memory_bw_gbps": None, "min_tflops": None, **expect}), bench=lambda kind: (report, None))
    verdict = check(ctx)
    assert verdict.status == CheckStatus.FAIL and "the result was wrong on cpu:1" in verdict.message, verdict
    # The same report with both right passes.
    events[2] = {"event": "cell", "device": "cpu:1", **ok}
    report = assemble(events)
    assert check(ctx).status == CheckStatus.PASS, check(ctx)


# ---- busy: is anybody else using the accelerator, is the job keeping it busy (issue 25) -------------------------------


def _busy_verdict(monkeypatch, jax_gpus: list[int] | None = None, tpu=None, runtime=None, **fake):
    """check_busy over what NVML says through FakeGpm (the H200's figures, at pynvml's C boundary), with JAX using
    the NVIDIA GPUs of `jax_gpus` (NVML indexes) as cuda:0, cuda:1..."""
    from gpm_fake import FakeGpm

    from devctl.checks.busy import check_busy
    from devctl.collect.check_context import BusyReading
    from devctl.discovery.gpm import BusyReader
    from devctl.model.check import Expectations
    from devctl.model.list_ import DeviceInfo

    expect = {k: fake.pop(k) for k in ("max_busy_percent", "min_busy_percent") if k in fake}
    FakeGpm(monkeypatch, **fake)
    gpus, reason = BusyReader(window_s=0.01).read()
    reading = BusyReading(gpus, reason, tpu, runtime, 0.01)
    devices = [
        DeviceInfo(i, "cuda", "NVIDIA H200", 0, nvml_gpu={"index": n, "name": None, "uuid": None, "pci_bus_id": None}) for i, n in enumerate(jax_gpus or [])
    ]  # fmt: skip
    ctx = SimpleNamespace(expectations=Expectations(**expect), busy=lambda: reading, inventory=lambda: SimpleNamespace(devices=devices))
    return check_busy(ctx)


def test_busy_fails_naming_every_busy_gpu_with_the_figure_and_window_it_used(monkeypatch):
    """The H200 (GPM) is judged on SM active over the window, the A100 (no GPM) on NVML's utilization, said as such."""
    from devctl.model.check import CheckStatus

    v = _busy_verdict(monkeypatch, max_busy_percent=10.0)
    assert v.status is CheckStatus.FAIL, v
    assert re.match(r"SM active over 0\.\d s \(GPM\): nvml:0 64%; kernel running in NVML's last sample period", v.message), v.message
    assert "(GPM): nvml:0 64%" in v.message and "(NVML utilization; no GPM): nvml:1 78%" in v.message and "at most 10% (--max-busy)" in v.message
    assert "another process is using it" in (v.remediation or "")
    figures = v.details["figures"]
    assert figures["nvml:0"]["percent"] == pytest.approx(64.3) and figures["nvml:0"]["source"] == "gpm"
    assert figures["nvml:1"]["percent"] == 78 and figures["nvml:1"]["source"] == "nvml-utilization"
    # Above both: passes, saying what it judged.
    v = _busy_verdict(monkeypatch, max_busy_percent=80.0)
    assert v.status is CheckStatus.PASS and "nvml:0 64%" in v.message and "expected at most 80%" in v.message, v


def test_busy_judges_only_the_gpus_jax_uses_and_names_them_as_jax_does(monkeypatch):
    """A job under CUDA_VISIBLE_DEVICES=1 asks about its own GPU: the busy H200 beside it is not judged."""
    from devctl.model.check import CheckStatus

    v = _busy_verdict(monkeypatch, jax_gpus=[1], max_busy_percent=80.0, h0={"NVML_GPM_METRIC_SM_UTIL": 99.0})
    assert v.status is CheckStatus.PASS and "cuda:0 78%" in v.message and "nvml:0" not in v.message, v
    assert v.details["not_judged"] == ["nvml:0"] and "1 GPU(s) JAX does not use not judged" in v.message


def test_min_busy_fails_an_idle_gpu_and_passes_a_busy_one(monkeypatch):
    from gpm_fake import H200_IDLE

    from devctl.model.check import CheckStatus

    v = _busy_verdict(monkeypatch, gpus=1, h0=H200_IDLE, utilization=(0, 0), min_busy_percent=50.0)
    assert v.status is CheckStatus.FAIL and "SM active over" in v.message and "nvml:0 0%" in v.message, v
    assert "expected at least 50% (--min-busy)" in v.message and "stalled or gone" in (v.remediation or "")
    v = _busy_verdict(monkeypatch, gpus=1, min_busy_percent=50.0, max_busy_percent=100.0)
    assert v.status is CheckStatus.PASS and "nvml:0 64%" in v.message and "at most 100% and at least 50%" in v.message, v
    # 0% is an expectation too (it always holds): the row runs, and is not "not asked".
    v = _busy_verdict(monkeypatch, gpus=1, h0=H200_IDLE, min_busy_percent=0.0)
    assert v.status is CheckStatus.PASS, v


def test_busy_of_mig_instances_and_of_gpus_without_figures(monkeypatch):
    """In MIG mode each GPU instance is judged on its own counters; a GPU that gives no figure warns (--strict
    counts that as a failure): never a silent pass, nor a failure for a counter the driver lacks."""
    from devctl.model.check import CheckStatus

    v = _busy_verdict(monkeypatch, mig=True, gpus=3, jax_gpus=[2], max_busy_percent=70.0, h0={"NVML_GPM_METRIC_SM_UTIL": 1.0})
    assert v.status is CheckStatus.FAIL and "cuda:0 MIG 2 90%" in v.message and "MIG 1" not in v.message, v
    v = _busy_verdict(monkeypatch, gpm=False, utilization=None, max_busy_percent=10.0)
    assert v.status is CheckStatus.WARN and "could not read how busy nvml:0: NVML gave no utilization" in v.message, v
    assert "nvml:1" in v.message and v.remediation


def test_busy_on_tpu_reads_the_duty_cycle_and_a_chip_nobody_holds_is_idle(monkeypatch):
    from devctl.model.check import CheckStatus
    from devctl.model.memstats import TpuRuntimeChip

    holder = SimpleNamespace(pid=4242)
    tpu = SimpleNamespace(chips=[SimpleNamespace(index=0, holders=(holder,)), SimpleNamespace(index=1, holders=())], uninspectable_processes=0)
    chip0 = TpuRuntimeChip(pid=4242, port=8431, hbm_used_bytes=None, hbm_total_bytes=None, duty_cycle_percent=85.0, hbm_utilization_percent=None, cores=1)
    runtime = SimpleNamespace(chips={"tpu-chip:0": chip0}, problems=[], notes=[])
    v = _busy_verdict(monkeypatch, gpus=0, tpu=tpu, runtime=runtime, max_busy_percent=10.0)
    assert v.status is CheckStatus.FAIL and "TensorCore duty cycle in libtpu's last sample period (TPU runtime metrics): tpu-chip:0 85%" in v.message, v
    assert "tpu-chip:1" not in v.message
    v = _busy_verdict(monkeypatch, gpus=0, tpu=tpu, runtime=SimpleNamespace(chips={}, problems=[], notes=["install grpc"]), max_busy_percent=10.0)
    assert v.status is CheckStatus.WARN and "tpu-chip:0: held by pid 4242" in v.message and "install grpc" in v.message, v
    v = _busy_verdict(monkeypatch, gpus=0, tpu=tpu, runtime=runtime, min_busy_percent=50.0)
    assert v.status is CheckStatus.FAIL and "idle (no process holds it): tpu-chip:1" in v.message and "tpu-chip:0" not in v.message, v


def test_busy_without_an_expectation_or_an_accelerator_skips_saying_why(monkeypatch):
    from devctl.model.check import CheckStatus

    v = _busy_verdict(monkeypatch)
    assert v.status is CheckStatus.SKIP and "not asked" in v.message and "--max-busy" in v.message
    v = _busy_verdict(monkeypatch, gpus=0, max_busy_percent=10.0)
    assert v.status is CheckStatus.SKIP and "no accelerator to judge" in v.message, v


def _fake_nvml_env(tmp_path: Path, **fake) -> dict[str, str]:
    """A devctl subprocess whose pynvml answers as FakeGpm does (its C calls replaced at startup, by a sitecustomize
    that takes the spec out of the environment, so that check's own children see the real NVML)."""
    site = tmp_path / "fake-nvml-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "spec = os.environ.pop('DEVCTL_TEST_FAKE_GPM', None)\n"
        "if spec:\n"
        f"    sys.path.append({str(Path(__file__).parent)!r})\n"
        "    import gpm_fake\n"
        "    gpm_fake.install(spec)\n"
    )
    return _with_site(site, DEVCTL_TEST_FAKE_GPM=json.dumps(fake))


def test_busy_through_the_cli_passes_fails_and_skips(tmp_path):
    """`devctl check --only busy` as CI runs it, NVML answering with the H200's figures."""
    busy = _fake_nvml_env(tmp_path, gpus=1)
    doc = _doc(run_devctl("check", "--only", "busy", "--max-busy", "10%", "--json", env=busy, cwd=tmp_path), 1)
    (row,) = doc["checks"]
    assert row["status"] == "fail" and "SM active over 1.0 s (GPM): nvml:0 64%; expected at most 10% (--max-busy)" == row["message"], row
    assert doc["expectations"]["max_busy_percent"] == 10 and doc["phases_s"]["busy"] >= 1.0
    doc = _doc(run_devctl("check", "--only", "busy", "--max-busy", "70", "--min-busy", "50", "--json", env=busy, cwd=tmp_path), 0)
    assert doc["checks"][0]["status"] == "pass" and "expected at most 70% and at least 50%" in doc["checks"][0]["message"]

    idle = _fake_nvml_env(tmp_path, gpus=1, h0="idle", utilization=[0, 0])
    doc = _doc(run_devctl("check", "--only", "busy", "--min-busy", "50", "--json", env=idle, cwd=tmp_path), 1)
    assert "nvml:0 0%; expected at least 50% (--min-busy)" in doc["checks"][0]["message"]
    (tmp_path / "pyproject.toml").write_text('[tool.devctl.check]\nmax-busy = "5%"\nonly = ["busy"]\n')
    doc = _doc(run_devctl("check", "--json", env=idle, cwd=tmp_path), 0)
    assert doc["checks"][0]["status"] == "pass" and doc["expectations"]["sources"]["max-busy"].endswith("pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[tool.devctl.check]\nmax-busy = 0.5\n")
    assert_usage_error(run_devctl("check", env=idle, cwd=tmp_path), "max-busy", "ambiguous")
    (tmp_path / "pyproject.toml").unlink()

    # No GPU (this machine's real NVML) and no TPU chip: a skip that says why, exit 0; nothing read, nothing waited.
    doc = _doc(run_devctl("check", "--only", "busy", "--max-busy", "10", "--json", env=devctl_env(devices=1), cwd=tmp_path), 0)
    if doc["checks"][0]["details"]["figures"]:
        pytest.skip("this machine has an accelerator")
    assert doc["checks"][0]["status"] == "skip" and "no accelerator to judge" in doc["checks"][0]["message"]
    # Without an expectation nothing is read: no busy phase, and the table's one "not asked" line names it.
    proc = run_devctl("check", "--only", "busy,env", env=devctl_env(devices=1), cwd=tmp_path)
    assert proc.returncode == 0 and "not asked: busy (set --max-busy/--min-busy to run it)" in proc.stdout, proc.stdout
    assert "busy-ness" not in proc.stdout


@pytest.mark.gpu
def test_busy_on_a_real_gpu_under_a_matmul_loop(tmp_path):
    """A bf16 matmul loop keeps the GPU busy: --max-busy 100 passes with its figure, --min-busy 30 passes, and
    --max-busy 5 fails naming it (tests/test_gpm.py's loop)."""
    from test_gpm import MATMUL_LOOP

    script = tmp_path / "loop.py"
    script.write_text(MATMUL_LOOP)
    env = devctl_env(devices=1, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("XLA_FLAGS", None)
    job = subprocess.Popen([sys.executable, str(script), "120"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        common = ("check", "--platform", "gpu", "--only", "busy", "--json")
        doc = _doc(run_devctl(*common, "--max-busy", "100", env=env, timeout=300), 0)
        row = doc["checks"][0]
        assert row["status"] == "pass" and row["details"]["figures"], row
        assert any(f["percent"] > 30 for f in row["details"]["figures"].values()), row
        assert "(GPM)" in row["message"] or "NVML utilization" in row["message"], row
        doc = _doc(run_devctl(*common, "--min-busy", "30", env=env, timeout=300), 0)
        assert doc["checks"][0]["status"] == "pass", doc["checks"][0]
        doc = _doc(run_devctl(*common, "--max-busy", "5", env=env, timeout=300), 1)
        assert doc["checks"][0]["status"] == "fail" and "--max-busy" in doc["checks"][0]["message"], doc["checks"][0]
    finally:
        job.kill()
        job.wait()


def test_busy_is_read_before_any_probe_of_checks_own_and_a_reading_that_raises_fails_only_its_row(monkeypatch):
    """check's own children (the backend probe, the health child) would be busy-ness of its own: the reading comes
    first, alone. A reading that raises is the busy row's failure, not a traceback."""
    from devctl.collect.check import check
    from devctl.collect.check_context import BusyReading, Context
    from devctl.model.check import CheckStatus, Expectations

    order: list = []

    def read(self):
        order.append(("busy", sorted(self._futures), self._health_child))
        return BusyReading({}, "no NVML here", None, None, 1.0)

    monkeypatch.setattr(Context, "_read_busy", read)
    monkeypatch.setattr(Context, "_collect_inventory", lambda self: order.append("inventory") or SimpleNamespace(devices=[]))
    report = check(Expectations(max_busy_percent=10.0), ["busy"])
    assert order == [("busy", [], None), "inventory"], order  # nothing else started while it read
    assert report.checks[0].status is CheckStatus.SKIP and "no NVML here" in report.checks[0].message

    def broken(self):
        raise OSError("the driver went away")

    monkeypatch.setattr(Context, "_read_busy", broken)
    report = check(Expectations(min_busy_percent=50.0), ["busy"])
    (row,) = report.checks
    assert row.status is CheckStatus.FAIL and "OSError: the driver went away" in row.message, row
