"""Advice from the machine's evidence first: the driver boundary, which this machine cannot have, as data.

The same rules run end to end against real JAX and real registry packages in
tests/test_oracle.py and tests/test_oracle_heavy.py; here each branch that needs
hardware (device nodes, NVML, the PCI bus, KFD) is fed that hardware as data.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devctl.checks.advice import code_of, for_row
from devctl.model.list_ import BackendInfo, BackendStatus

_NO_LIB = "libnvidia-ml.so.1 not found: no NVIDIA driver installed, or not mounted into this container"


def _hw(nodes=(), pci=(), gpus=(), nvml_reason=_NO_LIB, amd=()):
    nvml = SimpleNamespace(status="ok" if gpus else "unavailable", reason=None if gpus else nvml_reason, gpus=tuple(gpus))
    return SimpleNamespace(
        nvidia=nvml, nvidia_device_nodes=list(nodes), nvidia_pci=list(pci), tpu=SimpleNamespace(chips=[]), amd=SimpleNamespace(gpus=list(amd))
    )


CUDA_PLUGIN = BackendInfo(
    "xla_cuda12", BackendStatus.FAILED, "jax_plugins.xla_cuda12.initialize() raised RuntimeError: ... <- caused by CUPTI error 999", plugin="jax_plugins.xla_cuda12"
)


@pytest.mark.parametrize(
    "hw,code",
    [
        (_hw(), "cuda-plugin-without-gpu"),
        (_hw(nodes=["/dev/nvidiactl", "/dev/nvidia0"]), "nvidia-driver-not-mounted"),
        # NVML left unread under --host-root says nothing about the driver's libraries.
        (_hw(nodes=["/dev/nvidiactl"], nvml_reason="not read under --host-root"), "plugin-broken"),
        (_hw(pci=[SimpleNamespace(address="0000:01:00.0", driver="nvidia")]), "plugin-broken"),
        (_hw(gpus=[SimpleNamespace(index=0)]), "plugin-broken"),
    ],
)
def test_cuda_plugin_failure_is_read_against_the_machine(hw, code):
    advice = for_row(CUDA_PLUGIN, hw, environ={})
    assert advice.code == code_of(code)
    if code == "cuda-plugin-without-gpu":
        assert advice.fix_env == {"JAX_PLATFORMS": "cpu"} and "reinstall" not in advice.fix
        assert "CUDA_VISIBLE_DEVICES" not in advice.fix and "--gpus" not in advice.fix
        # Only the series that failed here is named for uninstall: cuda13's packages are not installed.
        assert "pip uninstall jax-cuda12-plugin jax-cuda12-pjrt)" in advice.fix and "cuda13" not in advice.fix


def test_rocm_plugin_without_amd_gpu():
    row = BackendInfo("rocm", BackendStatus.FAILED, "ValueError: No AMD GPUs were found, skipping ROCm plugin initialization", plugin="jax_plugins.xla_rocm7")
    assert for_row(row, _hw(), environ={}).code == code_of("rocm-plugin-without-gpu")
    assert for_row(row, _hw(amd=[SimpleNamespace(node=1)]), environ={}).code == code_of("plugin-broken")


# ---- conditions the heavy scenarios (tests/test_oracle_heavy.py) found, kept here as data --------------

_SKEW = (
    "exited with status 1: RuntimeError: jaxlib version 0.10.2 is newer than and incompatible with jax version 0.9.2. "
    "Please update your jax and/or jaxlib packages. while importing jax"
)


@pytest.mark.parametrize("environ", [{}, {"JAX_PLATFORMS": "cpu"}])
def test_jaxlib_newer_than_jax_is_no_backend_to_skip(environ):
    from devctl.checks.advice import for_outcome
    from devctl.model.list_ import JaxOutcome
    row = BackendInfo("jax", BackendStatus.FAILED, _SKEW)
    error = "RuntimeError: jaxlib version 0.10.2 is newer than and incompatible with jax version 0.9.2. Please update your jax and/or jaxlib packages."
    outcome = JaxOutcome("raises", error=error, culprit="jax")
    for advice in (for_row(row, _hw(), environ=environ), for_outcome(outcome, [row], _hw(), environ=environ)):
        # The `versions` check's remediation, word for word; JAX_PLATFORMS cannot help an import error.
        assert advice.code == code_of("jax-jaxlib-skew") and advice.fix == "pip install -U 'jax==0.9.2' 'jaxlib==0.9.2'"
        assert advice.fix_env is None


def test_cuda_entry_beside_the_cuda_plugin_is_the_entry_to_drop():
    """jax[cuda12] under JAX_PLATFORMS=cpu registers cuda; an entry for the same library then raises on every call."""
    row = BackendInfo(
        "cuda", BackendStatus.FAILED, "JaxRuntimeError: ALREADY_EXISTS: PJRT_Api already exists for device type cuda", plugin="cuda", source="env"
    )
    environ = {"PJRT_NAMES_AND_LIBRARY_PATHS": "cuda:/venv/xla_cuda_plugin.so", "JAX_PLATFORMS": "cpu"}
    advice = for_row(row, _hw(), environ=environ)
    assert advice.code == code_of("pjrt-entry-broken") and advice.fix_env == {"PJRT_NAMES_AND_LIBRARY_PATHS": None}
    assert "already registered" in advice.summary


def test_a_cuda_entry_jax_skips_needs_no_advice():
    """No /dev/nvidia* node: JAX skips the backend without a word, and jax.devices() works."""
    row = BackendInfo("cuda", BackendStatus.SKIPPED, "JAX skips CUDA: none of /dev/nvidia0, /dev/nvidiactl, /dev/dxg exists")
    assert for_row(row, _hw(), environ={"PJRT_NAMES_AND_LIBRARY_PATHS": "cuda:/venv/xla_cuda_plugin.so"}) is None


def test_rocm_advice_does_not_offer_jax_platforms():
    """jax-rocm7-plugin 0.10.2 raises before it reads JAX_PLATFORMS: only uninstalling silences it."""
    row = BackendInfo("xla_rocm7", BackendStatus.FAILED, "ValueError: No AMD GPUs were found", plugin="jax_plugins.xla_rocm7")
    advice = for_row(row, _hw(), environ={})
    assert advice.fix_env is None and "pip uninstall jax-rocm7-plugin jax-rocm7-pjrt" in advice.fix


def test_jax_platforms_naming_nothing_that_starts():
    from devctl.checks.advice import for_outcome
    from devctl.model.list_ import JaxOutcome

    row = BackendInfo("cuda", BackendStatus.SKIPPED, "JAX skips CUDA: none of /dev/nvidia0, /dev/nvidiactl, /dev/dxg exists")
    outcome = JaxOutcome("raises", error="AssertionError", culprit="JAX_PLATFORMS")
    advice = for_outcome(outcome, [row], _hw(), environ={"JAX_PLATFORMS": "cuda"})
    assert advice.fix_env == {"JAX_PLATFORMS": None} and "drop JAX_PLATFORMS" not in advice.fix
