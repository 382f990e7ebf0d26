"""Every finding code doctor can give is asserted somewhere to fire where its cause is, and not where it is not.

Where the cause can be made on this machine, it is made for real and JAX is run beside devctl (the light
oracle's scenarios: tests/test_one_verdict.py's DOCTOR_FINDINGS, exactly the findings of each, so every other
code is asserted not to fire there; the registry installs of tests/test_oracle_heavy.py). Where it needs
hardware this machine cannot have (a GPU, a TPU, an NVSwitch), it is made as a host tree (tests/hosttrees.py)
in tests/test_doctor.py. The rest is made here: a plugin that fails with the library's own words, a libtpu
at another release than jax pins, an AMD GPU nothing uses, a variable the env check refuses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import test_oracle_heavy
from conftest import devctl_env, run_devctl, validate_schema
from hosttrees import amd_host
from test_one_verdict import DOCTOR_FINDINGS

from devctl.checks.advice import code_of
from devctl.checks.catalogue import CATALOGUE

# Asserted against JAX from a registry install (test_oracle_heavy.py), by the test that makes it.
HEAVY = {
    "cuda-plugin-without-gpu": "test_cuda_extra_on_a_machine_without_gpu",
    "rocm-plugin-without-gpu": "test_rocm_plugin_without_amd_gpu",
    "plugin-version-skew": "test_cuda_plugin_older_than_jaxlib",
    "jax-jaxlib-skew": "test_jaxlib_newer_than_jax",
    "jaxlib-missing": "test_jaxlib_missing_is_one_cause_with_one_fix",
    "plugin-half-installed": "test_one_half_of_the_cuda_plugin_is_a_finding_and_its_fix_completes_it",
    "pjrt-entry-broken": "test_real_cuda_library_in_pjrt_names_and_library_paths",
    "jax-platforms-unavailable": "test_tpu_extra_without_tpu",
}
# Made from a host tree of the hardware (tests/test_doctor.py), by the test that makes it.
HOST_TREES = {
    "cuda-plugin-missing": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "fabric-manager-missing": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "driver-library-mismatch": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "cuda-library-shadowed": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "driver-too-old": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "preallocation-contention": "test_nvidia_host_without_cuda_plugin_and_a_broken_driver_setup",
    "no-visible-gpu": "test_nvidia_container_without_gpus_and_small_shm",
    "nccl-shm-too-small": "test_nvidia_container_without_gpus_and_small_shm",
    "tpu-held": "test_tpu_held_by_another_process_multihost_and_device_problems",
    "tpu-device-permission": "test_tpu_held_by_another_process_multihost_and_device_problems",
    "multihost-slice-waiting": "test_tpu_held_by_another_process_multihost_and_device_problems",
    "tpu-thp-off": "test_tpu_held_by_another_process_multihost_and_device_problems",
    "tpu-stale-lockfile": "test_tpu_stale_lockfile_libtpu_not_installed_and_jax_platforms_tpu",
    "libtpu-missing": "test_tpu_stale_lockfile_libtpu_not_installed_and_jax_platforms_tpu",
    "pjrt-api-mismatch": "test_version_skew_pjrt_mismatch_and_a_broken_plugin",
}
# The driver's device nodes without its libraries: NVML itself must fail to load, which a host tree cannot make
# (devctl does not load NVML from it); the advice is given the machine as data (tests/test_advice.py).
ADVICE_ONLY = {"nvidia-driver-not-mounted": ("test_advice", "test_cuda_plugin_failure_is_read_against_the_machine")}
# Made in this module.
HERE = {"cudnn-failure", "cpu-without-avx", "cuda-library-missing", "libtpu-version-skew", "accelerator-unused", "check-failed", "check-warned"}


def test_every_finding_code_has_a_test_that_makes_its_cause():
    import test_doctor

    light = {fid for found in DOCTOR_FINDINGS.values() for fid in found}
    for fid, name in HEAVY.items():
        assert callable(getattr(test_oracle_heavy, name, None)), (fid, name)
    for fid, (module, name) in [*((f, ("test_doctor", n)) for f, n in HOST_TREES.items()), *ADVICE_ONLY.items()]:
        source = (Path(test_doctor.__file__).parent / f"{module}.py").read_text()
        at = source.index(f"def {name}(")
        test = source[source.rfind("\n\n\n", 0, at):at] + source[at:].split("\ndef ", 1)[0]  # its parameters too
        assert fid in test or code_of(fid) in test, f"{name} does not assert {fid}"
    untested = set(CATALOGUE) - light - set(HEAVY) - set(HOST_TREES) - set(ADVICE_ONLY) - HERE
    assert not untested, f"finding codes no test makes: {sorted(untested)}"


def _doctor(env: dict[str, str], cwd: Path, *args: str) -> dict:
    proc = run_devctl("doctor", "--json", *args, env=env, cwd=cwd)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "doctor")
    assert proc.returncode == (1 if any(f["severity"] != "info" for f in doc["findings"]) else 0), proc.stderr
    return doc


def _found(doc: dict) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in doc["findings"]}


def _plugin_saying(site: Path, message: str) -> None:
    pkg = site / "jax_plugins" / "says"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"def initialize():\n    raise RuntimeError({message!r})\n")


def _with_site(site: Path, **extra: str) -> dict[str, str]:
    return devctl_env(devices=2, PYTHONPATH=f"{site}{os.pathsep}{devctl_env()['PYTHONPATH']}", **extra)


@pytest.mark.parametrize(
    "message, finding",
    [
        ("Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR", "cudnn-failure"),
        ("This version of jaxlib was built using AVX instructions, which your CPU and/or operating system do not support.", "cpu-without-avx"),
        ("Unable to load cuSPARSE. Is it installed?", "cuda-library-missing"),
    ],
)
def test_a_plugin_failing_in_the_library_s_own_words_is_that_finding(message, finding, tmp_path):
    _plugin_saying(tmp_path / "site", message)
    doc = _doctor(_with_site(tmp_path / "site"), tmp_path)
    # JAX logs the plugin and runs on the CPU: a note with the cause named, not a problem, and no second finding.
    assert _found(doc) == {finding: "info"}, doc["findings"]


def test_libtpu_at_another_release_than_jax_pins(tmp_path):
    site = tmp_path / "site"
    d = site / "libtpu-0.0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: libtpu\nVersion: 0.0.1\n")
    doc = _doctor(_with_site(site), tmp_path)
    (skew,) = [f for f in doc["findings"] if f["id"] == "libtpu-version-skew"]
    assert "libtpu" in " ".join(skew["evidence"]) and "jax[tpu]" in skew["fix"], skew
    # Its fix is data, and the line says it.
    assert [r["pip"] for r in skew["remedies"]] and all(args[0] == "install" for r in skew["remedies"] for args in r["pip"]), skew
    # No TPU here: JAX works on what is here, so the skew is said without failing the run.
    assert skew["severity"] == "info", skew


def test_an_amd_gpu_nothing_uses_is_the_accelerator_unused_finding(tmp_path):
    host = amd_host(tmp_path, gpus=2)
    doc = _doctor(devctl_env(devices=2), tmp_path, "--host-root", str(host.path))
    found = _found(doc)
    assert found.get("accelerator-unused") == "warning", doc["findings"]
    (unused,) = [f for f in doc["findings"] if f["id"] == "accelerator-unused"]
    assert "0000:10:00.0" in " ".join(unused["evidence"]) and "jax[rocm]" in unused["fix"], unused


def test_a_failed_or_warned_check_no_rule_explains_is_its_own_finding(tmp_path):
    """The doctor never says "nothing wrong" while a check disagrees: a variable the env check refuses (JAX works
    here, on the CPU; the setting fails a GPU client) and one it warns about."""
    found = _found(_doctor(devctl_env(devices=2, XLA_PYTHON_CLIENT_ALLOCATOR="bogus"), tmp_path))
    assert found == {"check-failed": "error"}, found
    found = _found(_doctor(devctl_env(devices=2, XLA_PYTHON_CLIENT_MEM_FRACTION="-0.5"), tmp_path))
    assert found == {"check-warned": "warning"}, found
    # And none of the three fires where nothing is wrong.
    assert _found(_doctor(devctl_env(devices=2), tmp_path)) == {}
