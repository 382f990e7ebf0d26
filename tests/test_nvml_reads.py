"""devctl.discovery.nvml's PCIe links, and every reader's nvmlInit paired with an nvmlShutdown.

pynvml's C calls are replaced on the real module (as test_hardware_discovery's fake_nvml does), so
these run without a GPU; the readers on a real GPU are tested by the `gpu`-marked tests.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devctl.discovery import nvml
from devctl.hostroot import HostRoot

GIB = 1 << 30


@pytest.fixture
def fake_links(monkeypatch):
    """Two GPUs found by bus id (either spelling) or index; every other bus id is not found. Counts init and shutdown."""
    import pynvml

    calls = {"init": 0, "shutdown": 0}
    buses = {"0000:18:00.0": "h0", "0000:2a:00.0": "h1"}

    def by_bus(bus):
        from devctl.discovery.pci import normalize_pci_bus_id

        handle = buses.get(normalize_pci_bus_id(bus))
        if handle is None:
            raise pynvml.NVMLError_NotFound()
        return handle

    def missing(*args):
        raise pynvml.NVMLError_FunctionNotFound()

    fakes = {
        "nvmlInit": lambda: calls.__setitem__("init", calls["init"] + 1),
        "nvmlShutdown": lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        "nvmlDeviceGetHandleByPciBusId": by_bus,
        "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId={"h0": b"00000000:18:00.0", "h1": b"00000000:2A:00.0"}[h]),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 1,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": missing,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 8,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_pcie_links_by_bus_id_and_by_index_in_order(fake_links):
    links, reason = nvml.pcie_links(["00000000:18:00.0", 1, "0000:99:00.0"])
    assert reason is None and [link.gpu for link in links] == ["00000000:18:00.0", 1, "0000:99:00.0"]
    first, second, unknown = links
    assert first.pci_bus_id == "0000:18:00.0" and second.pci_bus_id == "0000:2a:00.0"
    assert (first.pcie_link_gen_max, first.pcie_link_width_max, first.pcie_link_gen_current, first.pcie_link_width_current) == (5, 16, 1, 8)
    assert first.pcie_link_gen_gpu_max is None and "driver" in first.unavailable["pcie_link_gen_gpu_max"]
    assert unknown.pci_bus_id is None and unknown.pcie_link_gen_max is None and "handle" in unknown.unavailable
    assert fake_links == {"init": 1, "shutdown": 1}


def test_pcie_links_without_a_driver_say_why(monkeypatch):
    import pynvml

    def init():
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    assert nvml.pcie_links(["0000:18:00.0"]) == ([], "the NVIDIA kernel driver is not loaded")


def test_every_reader_shuts_nvml_down_and_a_session_holds_one_init(fake_links, monkeypatch):
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    monkeypatch.setattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", lambda: 12040)
    nvml.nvml_report()
    nvml.nvml_health(HostRoot("/"))
    nvml.pcie_links([0])
    assert fake_links == {"init": 3, "shutdown": 3}
    with nvml.nvml_session():
        assert fake_links["init"] - fake_links["shutdown"] == 1  # held across the reads below
        nvml.pcie_links([0])
        nvml.pcie_links([1])
    assert fake_links == {"init": 6, "shutdown": 6}


def test_health_processes_are_the_model_gpu_processes(fake_links, monkeypatch):
    """One GpuProcess for memstats and the nvml-health check: the compute processes, each pid once."""
    import os

    import pynvml

    from devctl.model.hardware import GpuProcess

    me = SimpleNamespace(pid=os.getpid(), usedGpuMemory=GIB)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: "GPU-0")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: [me, me])
    (gpu,) = nvml.nvml_health(HostRoot("/")).gpus
    (process,) = gpu.processes
    assert isinstance(process, GpuProcess)
    assert (process.gpu_index, process.gpu_uuid, process.pid, process.used_memory_bytes, process.kind) == (0, "GPU-0", os.getpid(), GIB, "compute")
    # As for memstats: user and command only for a pid that holds an NVIDIA device here.
    assert process.pid_visible == (process.command is not None)


def test_health_is_not_read_under_a_host_root(tmp_path, monkeypatch):
    import pynvml

    def init():
        raise AssertionError("NVML must not be initialized for a host root")

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    health = nvml.nvml_health(HostRoot(str(tmp_path)))
    assert health.status == "unavailable" and "--host-root" in health.reason and health.gpus == ()
