"""`devctl doctor` end to end: each known failure recognized from the real condition, with its evidence and fix."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import devctl_env, run_devctl, validate_schema
from hosttrees import base_host, nvidia_host, tpu_v4_host, tpu_v5e_host
from plugin_packages import write_plugin
from test_one_voice import assert_one_voice

from devctl.privilege import as_root

KERNEL_MODULE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"


def _doctor(*args: str, env: dict[str, str] | None = None, code: int = 1, cwd: Path | None = None) -> dict:
    proc = run_devctl("doctor", "--json", *args, env=env or devctl_env(devices=2), cwd=cwd)
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    validate_schema(doc, "doctor")
    # Each backend a finding explains is said in "What JAX will use" with that finding's fix (issue 20).
    assert_one_voice(doc["findings"], doc["overview"]["jax_will_use"])
    return doc


def _findings(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in doc["findings"]}


def _evidence(finding: dict) -> str:
    return "\n".join(finding["evidence"])


def _dist_info(site: Path, name: str, version: str) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _env_with_site(site: Path, **extra: str) -> dict[str, str]:
    return devctl_env(devices=2, PYTHONPATH=f"{site}{os.pathsep}{devctl_env()['PYTHONPATH']}", **extra)


def test_healthy_cpu_runner_has_nothing_wrong(tmp_path):
    proc = run_devctl("doctor", env=devctl_env(devices=2), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "What devctl sees" in out and "NVIDIA: no GPU" in out and "TPU: no chip" in out
    assert "What JAX will use" in out and "default backend cpu: 2 device(s) (cpu)" in out
    assert "No problems found." in out


def test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup(tmp_path):
    host = nvidia_host(tmp_path, gpus=8)  # HGX-like: 8 H100s and an NVSwitch, no fabric manager running
    host.file("/proc/driver/nvidia/version", KERNEL_MODULE)
    host.file("/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07")  # user space from a newer driver than the module
    host.process(4242, ["python", "train.py"], fds={3: "/dev/nvidia0", 4: "/dev/nvidiactl"})
    host.process(4243, ["python", "eval.py"], fds={3: "/dev/nvidia0"})
    site = tmp_path / "site"
    _dist_info(site, "nvidia-cuda-runtime", "13.0.48")  # CUDA 13 wheels, which driver 550 cannot run
    _dist_info(site, "nvidia-cudnn-cu12", "9.1.0.70")
    old = tmp_path / "usr-local-cuda-11" / "lib64"
    old.mkdir(parents=True)
    (old / "libcudnn.so.8").write_text("")
    (old / "libcudart.so.11.0").write_text("")
    env = _env_with_site(site, CUDA_VISIBLE_DEVICES="-1", LD_LIBRARY_PATH=str(old))

    doc = _doctor("--host-root", str(host.path), env=env, cwd=tmp_path)
    found = _findings(doc)
    assert doc["status"] == "problems"
    assert {"cuda-plugin-missing", "no-visible-gpu", "fabric-manager-missing", "driver-library-mismatch", "driver-too-old",
            "cuda-library-shadowed", "preallocation-contention"} <= set(found), list(found)  # fmt: skip

    plugin = found["cuda-plugin-missing"]
    assert plugin["catalogue_number"] == 1 and "8 NVIDIA GPU(s)" in _evidence(plugin)
    assert "a CUDA-enabled jaxlib is not installed" in _evidence(plugin)
    assert plugin["fix"].startswith('pip install -U "jax[cuda12]"')  # driver 550 cannot run CUDA 13
    assert "CUDA_VISIBLE_DEVICES='-1'" in _evidence(found["no-visible-gpu"])
    fabric = found["fabric-manager-missing"]
    assert "0000:05:00.0" in _evidence(fabric) and "nvidia-fabricmanager-550" in fabric["fix"]
    assert "kernel module 550.54.15" in _evidence(found["driver-library-mismatch"]) and "550.90.07" in _evidence(found["driver-library-mismatch"])
    too_old = found["driver-too-old"]
    # JAX works, on the CPU, and leaves the 8 GPUs unused: a warning by the one rule.
    assert "CUDA 12.4" in _evidence(too_old) and "13.0" in _evidence(too_old) and too_old["severity"] == "warning"
    assert str(old) in _evidence(found["cuda-library-shadowed"]) and "libcudnn.so.8" in _evidence(found["cuda-library-shadowed"])
    assert "unset LD_LIBRARY_PATH" in found["cuda-library-shadowed"]["fix"]
    contention = _evidence(found["preallocation-contention"])
    assert "pid 4242 (python train.py)" in contention and "pid 4243 (python eval.py)" in contention
    assert doc["overview"]["default_platform"] == "cpu"
    assert any("NVSwitch: 1 bridge(s); fabric manager not running" in line for line in doc["overview"]["sees"])


def test_nvidia_container_without_gpus_and_small_shm(tmp_path):
    host = nvidia_host(tmp_path, gpus=8, nodes=False)  # GPUs on the bus, no /dev/nvidia*: started without --gpus
    host.process(900, ["/usr/bin/nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"], uid=0)
    shm = host.local("/dev/shm")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(shm)], capture_output=True).returncode == 0
    try:
        proc = run_devctl("doctor", "--host-root", str(host.path), env=devctl_env(devices=2), cwd=tmp_path)
    finally:
        if mounted:
            subprocess.run(["umount", str(shm)], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    # JAX works, on the CPU, and leaves the 8 GPUs unused: a warning by the one rule (an error where JAX fails).
    assert "[#5 DEVCTL_FR_NO_VISIBLE_GPU, warning]" in out and "no /dev/nvidia* device node" in out and "--gpus all" in out
    assert "fabric-manager-missing" not in out and "fabric manager running (pid 900)" in out
    if not mounted:
        pytest.skip("cannot mount a 64 MiB tmpfs here; the /dev/shm diagnosis is untested")
    assert "[#13 DEVCTL_FR_NCCL_SHM_TOO_SMALL, error]" in out and "/dev/shm is 64.0 MiB with 8 GPUs" in out


def test_tpu_held_by_another_process_multihost_and_device_problems(tmp_path):
    host = tpu_v5e_host(tmp_path, chips=4)
    host.file("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    host.lockfile("4242\n")
    host.process(4242, ["python3", "train.py"], fds={7: "/dev/vfio/5", 8: "/tmp/libtpu_lockfile"})
    host.remove("/dev/vfio/7")
    env = devctl_env(devices=2, TPU_WORKER_HOSTNAMES="t0,t1,t2,t3", TPU_LIBRARY_PATH="/nonexistent/libtpu.so")
    doc = _doctor("--host-root", str(host.path), env=env, cwd=tmp_path)
    found = _findings(doc)
    assert {"tpu-held", "libtpu-missing", "tpu-device-permission", "multihost-slice-waiting", "tpu-thp-off"} <= set(found), list(found)
    held = found["tpu-held"]
    assert held["catalogue_number"] == 14
    assert "pid 4242 (python3 train.py, user 1000) has /dev/vfio/5, /tmp/libtpu_lockfile open" in _evidence(held)
    assert "kill 4242" in held["fix"] and "TPU_VISIBLE_CHIPS" in held["fix"]
    assert "TPU_LIBRARY_PATH='/nonexistent/libtpu.so' does not exist" in _evidence(found["libtpu-missing"])
    # The held lock explains JAX's "libtpu is not installed": no second finding claims libtpu is simply missing.
    assert "no libtpu package" not in _evidence(found["libtpu-missing"]) and "plugin-broken" not in found
    assert "/dev/vfio/7 does not exist" in _evidence(found["tpu-device-permission"])
    assert "4 hosts" in _evidence(found["multihost-slice-waiting"]) and "--worker=all" in found["multihost-slice-waiting"]["fix"]
    assert "[madvise]" in _evidence(found["tpu-thp-off"])


def test_a_lockfile_libtpu_left_on_a_machine_without_tpu_is_nothing(tmp_path):
    """libtpu 0.0.52 leaves /tmp/libtpu_lockfile after a clean run, on a machine without TPU too: nobody holds it,
    and nothing here uses it. It was 'a process that used the TPU died'."""
    host = base_host(tmp_path)
    host.lockfile("")
    doc = _doctor("--host-root", str(host.path), env=devctl_env(devices=2), code=0, cwd=tmp_path)
    assert "tpu-stale-lockfile" not in _findings(doc), doc["findings"]


def test_tpu_stale_lockfile_libtpu_not_installed_and_jax_platforms_tpu(tmp_path):
    host = tpu_v4_host(tmp_path, chips=4)
    host.lockfile("31337\n")
    doc = _doctor("--host-root", str(host.path), env=devctl_env(devices=2, JAX_PLATFORMS="tpu"), cwd=tmp_path)
    found = _findings(doc)
    stale = found["tpu-stale-lockfile"]
    assert stale["severity"] == "warning" and stale["fix"] == as_root("rm /tmp/libtpu_lockfile") and "31337" in _evidence(stale)
    missing = found["libtpu-missing"]
    assert "4 TPU v4 chip(s)" in _evidence(missing) and "no libtpu package is installed" in _evidence(missing)
    assert "either a TPU-enabled jaxlib or libtpu is not installed" in _evidence(missing)
    assert "tpu-held" not in found
    # JAX_PLATFORMS=tpu leaves JAX nothing to fall back to.
    assert "JAX_PLATFORMS='tpu': tpu does not start here (tpu: failed: " in _evidence(found["jax-platforms-unavailable"])
    assert doc["overview"]["default_platform"] is None
    assert doc["overview"]["jax_will_use"][0].startswith("jax.devices() raises: RuntimeError: Unable to initialize backend 'tpu'")


def test_version_skew_pjrt_mismatch_and_a_broken_plugin(tmp_path, pjrt_libs):
    site = tmp_path / "site"
    _dist_info(site, "jaxlib", "0.0.1")
    _dist_info(site, "jax-cuda12-plugin", "0.0.2")
    write_plugin(site, "boom", "raises")
    env = _env_with_site(site, PJRT_NAMES_AND_LIBRARY_PATHS=f"fakegpu{os.pathsep}{pjrt_libs['major_1']}")
    found = _findings(_doctor(env=env, cwd=tmp_path))
    # The stack's skews are one finding with one fix (jax's own pins), not one per package.
    skew = _evidence(found["jax-jaxlib-skew"])
    assert "jaxlib is version 0.0.1" in skew and "JAX plugin jax_cuda12_plugin version 0.0.2" in skew
    assert "plugin-version-skew" not in found
    assert found["jax-jaxlib-skew"]["fix"] == f"pip install -U 'jax[cuda12-local]=={_jax_version()}'"
    pjrt = _evidence(found["pjrt-api-mismatch"])
    assert "Mismatched PJRT plugin PJRT API major version (1)" in pjrt and "PJRT C API 1.54" in pjrt
    # Compatibility mode is jaxlib's default and refuses another major too: the entry is what to fix.
    assert "PJRT_NAMES_AND_LIBRARY_PATHS" in found["pjrt-api-mismatch"]["fix"] and "ENABLE_PJRT_COMPATIBILITY" not in found["pjrt-api-mismatch"]["fix"]
    assert "plugin exploded on purpose" in _evidence(found["plugin-broken"])
    assert "backend-failed" not in found  # fakegpu's failure is the PJRT mismatch, already named


def _jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


@pytest.mark.gpu
def test_doctor_on_a_real_gpu():
    from devctl.discovery.nvml import nvml_report

    if nvml_report().status != "ok":
        pytest.skip("no NVML here")
    proc = run_devctl("doctor", "--json", env=devctl_env(devices=1), timeout=300)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "doctor")
    assert any(line.startswith("NVIDIA: ") and "GPU(s)" in line for line in doc["overview"]["sees"])
    assert proc.returncode == (1 if doc["findings"] else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("platforms", [None, "cuda"])
def test_doctor_with_the_gpus_hidden_speaks_with_one_voice(platforms):
    """reference/h200-observations.md section 6: with CUDA_VISIBLE_DEVICES= the finding said to unset it while
    "What JAX will use" said to reinstall or uninstall the CUDA plugin. The plugin is fine; the GPU is hidden."""
    env = devctl_env(devices=1, CUDA_VISIBLE_DEVICES="")
    if platforms:
        env["JAX_PLATFORMS"] = platforms
    doc = json.loads(run_devctl("doctor", "--json", env=env, timeout=300).stdout)
    codes = {f["code"] for f in doc["findings"]}
    assert "DEVCTL_FR_NO_VISIBLE_GPU" in codes, doc["findings"]
    cuda_lines = [line for line in doc["overview"]["jax_will_use"] if line.startswith(("cuda", "xla_cuda"))]
    assert cuda_lines and all("CUDA_VISIBLE_DEVICES" in line and "reinstall" not in line for line in cuda_lines), cuda_lines


def test_every_finding_code_is_documented_and_every_advice_is_a_finding():
    import re

    from devctl.checks.advice import code_of
    from devctl.checks.catalogue import CATALOGUE

    catalogue = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text()
    documented = set(re.findall(r"`(DEVCTL_FR_[A-Z0-9_]+)`", catalogue))
    assert {code_of(f) for f in CATALOGUE} <= documented
    # list and check show advice by code: each must be a catalogue finding doctor can explain.
    source = (Path(__file__).resolve().parent.parent / "devctl" / "checks" / "advice.py").read_text()
    advised = set(re.findall(r'Advice\(\s*"([a-z0-9-]+)"', source))
    assert advised and advised <= set(CATALOGUE)
