"""Advice from the machine's evidence first: the driver boundary, which this machine cannot have, as data.

The same rules run end to end against real JAX and real registry packages in
tests/test_oracle.py and tests/test_oracle_heavy.py; here each branch that needs
hardware (device nodes, NVML, the PCI bus, KFD) is fed that hardware as data.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devctl.advice import code_of, for_row
from devctl.model.inventory import BackendInfo, BackendStatus

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


def test_rocm_plugin_without_amd_gpu():
    row = BackendInfo("rocm", BackendStatus.FAILED, "ValueError: No AMD GPUs were found, skipping ROCm plugin initialization", plugin="jax_plugins.xla_rocm7")
    assert for_row(row, _hw(), environ={}).code == code_of("rocm-plugin-without-gpu")
    assert for_row(row, _hw(amd=[SimpleNamespace(node=1)]), environ={}).code == code_of("plugin-broken")
