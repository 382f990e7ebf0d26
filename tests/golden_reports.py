"""Reports for the golden table tests, built from the model's dataclasses with realistic figures.

Two machines: an 8-GPU NVIDIA host (H100 SXM, NVML fields, PCIe Gen5 links, the CUDA 12 plugin) and a
CPU-only host whose accelerator stack is broken in the ways users meet (a CUDA plugin without a GPU, a
missing PJRT library, a skewed plugin). Every value is one a real run could print; nothing here reads the
machine, imports jax or starts a process.
"""

from __future__ import annotations

import dataclasses

from golden_collective import collective_cpu_quick, collective_gpu8

from devctl.model.bench_transfer import (
    LATENCY_MAX_BYTES,
    BenchDevice,
    Cell,
    MemcpyRoof,
    PcieLink,
    Roofs,
    TransferReport,
    fastest_paths,
    roof_verdict,
)
from devctl.model.busy import SOURCE_LABELS, BusyCounters, GpuBusy
from devctl.model.check import CheckReport, CheckResult, CheckStatus, Expectations
from devctl.model.doctor import DoctorFinding, DoctorReport, Overview
from devctl.model.env import EnvFinding, EnvVar, PackageChange, PackageVersion, StackFix
from devctl.model.hardware import CudaWheel
from devctl.model.list_ import BackendInfo, BackendStatus, DeviceInfo, JaxOutcome, UnusedAccelerator
from devctl.model.memstats import HostMemory, MemDevice, MemProcess, MemSnapshot, headroom, job_headroom_bytes, usable_memory
from devctl.model.plugins import PjrtApiVersion, PluginReport, PluginSource, PluginsReport, PluginStatus

GIB, MIB, KIB = 1 << 30, 1 << 20, 1 << 10
TIMESTAMP = 1764000000.0  # 2025-11-24, fixed: nothing in a table may depend on the clock
H100 = "NVIDIA H100 80GB HBM3"
# A DGX H100's GPUs on the PCI bus, in NVML's order.
BUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
NVML_TOTAL = 85_520_809_984  # an H100 80GB as NVML counts it (79.6 GiB)
BYTES_LIMIT = 63_771_852_390  # 75% of what was free when the probe's client started
CUDA_PLATFORM_VERSION = "PJRT C API\ncuda 12080"  # PjRtCApiClient prefixes the plugin's own words with a line
SITE = "/home/alice/.venv/lib/python3.11/site-packages"


# ---- devctl list -------------------------------------------------------------------------------------


def _gpu_stats(i: int) -> dict:
    used = [0, 0, 2 * GIB, 0, 0, 0, 0, 512 * MIB][i]
    return {
        "bytes_in_use": used,
        "peak_bytes_in_use": used,
        "bytes_limit": BYTES_LIMIT,
        "bytes_reservable_limit": 62_998_163_456,
        "largest_alloc_size": used,
        "num_allocs": 3 if used else 0,
    }


def _host_and_hardware(hostname: str, gpus: int, pci: list[dict] | None = None):
    """HostInfo and Hardware as devctl list reads them, in the shapes real runs gave (the H200 of
    tests/fixtures/h200/list-2026-11-27.json for a host with a driver; this project's CPU box for one without):
    `gpus` H100s on a driver, or none with NVML unavailable and `pci` the NVIDIA functions the bus lists."""
    import copy
    import json
    from pathlib import Path

    from devctl.model import from_dict
    from devctl.model.hardware import HostInfo
    from devctl.model.list_ import Hardware

    real = json.loads((Path(__file__).parent / "fixtures" / "h200" / "list-2026-11-27.json").read_text())
    host = dict(real["host"], hostname=hostname, cpu_model="Intel(R) Xeon(R) Platinum 8480C", logical_cores=224,
                physical_cores=112, usable_cores=224, numa_nodes=[0, 1], python_executable="/home/alice/.venv/bin/python")  # fmt: skip
    hw = copy.deepcopy(real["hardware"])
    (gpu,) = hw["nvidia"]["gpus"]
    if gpus:
        hw["nvidia"]["gpus"] = [
            dict(gpu, index=i, name=H100, uuid=f"GPU-5c3f1e9a-0d4b-7c21-9e0f-6a1b2c3d4e{i:02d}", pci_bus_id=BUS[i], memory_total_bytes=NVML_TOTAL,
                 memory_used_bytes=_gpu_stats(i)["bytes_in_use"] + 500 * MIB, memory_free_bytes=NVML_TOTAL - _gpu_stats(i)["bytes_in_use"] - 500 * MIB,
                 power_limit_w=700.0)
            for i in range(gpus)
        ]  # fmt: skip
        hw["nvidia_device_nodes"] = [f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
        hw["nvidia_pci"] = [dict(hw["nvidia_pci"][0], address=BUS[i], device_id="0x2330") for i in range(gpus)]
    else:
        reason = "libnvidia-ml.so.1 not found: no NVIDIA driver installed, or not mounted into this container"
        hw["nvidia"] = {"status": "unavailable", "reason": reason, "driver_version": None, "cuda_driver_version": None,
                        "cuda_driver_version_str": None, "gpus": [], "unavailable": {"nvml": reason}, "processes": []}  # fmt: skip
        hw["nvidia_device_nodes"] = []
        hw["nvidia_pci"] = pci or []
    return from_dict(HostInfo, host), from_dict(Hardware, hw)


def list_gpu8():
    from devctl.collect.list_ import Inventory

    devices = [
        DeviceInfo(
            id=i, platform="gpu", device_kind=H100, process_index=0, local_hardware_id=i,
            memory_kinds=["device", "pinned_host", "unpinned_host"], default_memory_kind="device",
            memory_stats=_gpu_stats(i),
            attributes={"compute_capability": "9.0", "core_count": 132, "device_vendor": "NVIDIA"},
            nvml_gpu={"index": i, "name": H100, "pci_bus_id": BUS[i], "uuid": f"GPU-5c3f1e9a-0d4b-7c21-9e0f-6a1b2c3d4e{i:02d}"},
        )  # fmt: skip
        for i in range(8)
    ]
    devices.append(
        DeviceInfo(id=0, platform="cpu", device_kind="cpu", process_index=0, local_hardware_id=None,
                   memory_kinds=["device", "pinned_host", "unpinned_host"], default_memory_kind="device", memory_stats=None)
    )  # fmt: skip
    backends = [
        BackendInfo("cuda", BackendStatus.OK, init_s=4.812, platform_version=CUDA_PLATFORM_VERSION,
                    pjrt_c_api_version=PjrtApiVersion(0, 67), runtime_type="pjrt", device_count=8, priority=200),
        BackendInfo("cpu", BackendStatus.OK, init_s=0.041, platform_version="cpu", runtime_type="pjrt", device_count=1, priority=0),
        BackendInfo("tpu", BackendStatus.SKIPPED, error="libtpu is not installed (pip install 'jax[tpu]')", fail_quietly=True),
    ]  # fmt: skip
    host, hardware = _host_and_hardware("dgx-h100-07", gpus=8)
    return Inventory(
        schema="devctl.list/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="dgx-h100-07",
        jax_version="0.10.2", jaxlib_version="0.10.2", default_platform="gpu", backends=backends, devices=devices,
        unused_accelerators=[], plugins=[], host=host, hardware=hardware, elapsed_s=6.204,
        jax_outcome=JaxOutcome("ok", default_backend="gpu", device_count=8),
    )  # fmt: skip


def list_cpu_broken():
    """A CPU host with jax[cuda12] installed, a PJRT entry whose library is gone, and GPUs JAX cannot use."""
    from devctl.collect.list_ import Inventory

    devices = [
        DeviceInfo(id=i, platform="cpu", device_kind="cpu", process_index=0, local_hardware_id=None,
                   memory_kinds=["device", "pinned_host", "unpinned_host"], default_memory_kind="device", memory_stats=None)
        for i in range(4)
    ]  # fmt: skip
    cuda_error = (
        "jax_plugins.xla_cuda12.initialize() raised RuntimeError: Unable to initialize backend 'cuda': "
        "FAILED_PRECONDITION: No visible GPU devices. <- caused by INTERNAL: cuInit(0) failed: Unknown CUDA error 303"
    )
    backends = [
        BackendInfo("cpu", BackendStatus.OK, init_s=0.038, platform_version="cpu", runtime_type="pjrt", device_count=4, priority=0),
        BackendInfo("xla_cuda12", BackendStatus.FAILED, error=cuda_error, init_s=1.204, plugin="jax_plugins.xla_cuda12",
                    summary="this machine has no NVIDIA GPU (or its driver is not loaded or not mounted into this container); JAX falls back to CPU",
                    hint="to silence the CUDA plugin set JAX_PLATFORMS=cpu, or uninstall the CUDA extra (pip uninstall jax-cuda12-plugin jax-cuda12-pjrt)",
                    code="DEVCTL_FR_CUDA_PLUGIN_WITHOUT_GPU"),
        BackendInfo("mygpu", BackendStatus.FAILED, source="env", plugin="mygpu",
                    error="INVALID_ARGUMENT: Failed to open /opt/vendor/lib/libmygpu_pjrt.so: cannot open shared object file: No such file or directory",
                    summary="PJRT_NAMES_AND_LIBRARY_PATHS entry mygpu cannot be loaded, so every jax.devices() raises, even with JAX_PLATFORMS=cpu",
                    hint="fix its path, or drop it: unset PJRT_NAMES_AND_LIBRARY_PATHS", code="DEVCTL_FR_PJRT_ENTRY_BROKEN"),
        BackendInfo("tpu", BackendStatus.SKIPPED, error="no TPU chip on this machine", fail_quietly=True),
    ]  # fmt: skip
    unused = [
        UnusedAccelerator("nvidia-gpu", "NVIDIA A100-SXM4-40GB", "0000:07:00.0",
                          "on the PCI bus, bound to vfio-pci, not to the nvidia driver: passed through to a VM"),
        UnusedAccelerator("nvidia-gpu", "NVIDIA A100-SXM4-40GB", "0000:0f:00.0",
                          "on the PCI bus, bound to vfio-pci, not to the nvidia driver: passed through to a VM"),
    ]  # fmt: skip
    outcome = JaxOutcome(
        "raises", default_backend=None, error="RuntimeError: Unable to initialize backend 'mygpu': INVALID_ARGUMENT: "
        "Failed to open /opt/vendor/lib/libmygpu_pjrt.so: cannot open shared object file: No such file or directory "
        "(you may need to uninstall the failing plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)",
        culprit="mygpu", code="DEVCTL_FR_PJRT_ENTRY_BROKEN",
        summary="PJRT_NAMES_AND_LIBRARY_PATHS entry mygpu cannot be loaded, so every jax.devices() raises, even with JAX_PLATFORMS=cpu",
        fix="fix its path, or drop it: unset PJRT_NAMES_AND_LIBRARY_PATHS", fix_env={"PJRT_NAMES_AND_LIBRARY_PATHS": None},
    )  # fmt: skip
    vfio = {"vendor_id": "0x10de", "device_id": "0x20b0", "class_code": "0x030200", "driver": "vfio-pci", "numa_node": 0}
    host, hardware = _host_and_hardware("ci-runner-3", gpus=0, pci=[dict(vfio, address=u.location) for u in unused])
    return Inventory(
        schema="devctl.list/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="ci-runner-3",
        jax_version="0.10.2", jaxlib_version="0.10.2", default_platform="cpu", backends=backends, devices=devices,
        unused_accelerators=unused, plugins=[], host=host, hardware=hardware, elapsed_s=2.871, jax_outcome=outcome,
    )  # fmt: skip


# ---- devctl plugins ----------------------------------------------------------------------------------


def plugins_gpu():
    v67 = PjrtApiVersion(0, 67)
    attrs = {"xla_version": 2, "stablehlo_current_version": [1, 13, 7], "stablehlo_minimum_version": [0, 9, 0], "supports_cross_host_transfers": True}
    return PluginsReport(schema="devctl.plugins/1", plugins=[
        PluginReport(
            name="cuda", source=PluginSource.NAMESPACE_AND_ENTRY_POINT, status=PluginStatus.OK,
            library_path=f"{SITE}/jax_plugins/xla_cuda12/xla_cuda_plugin.so", pjrt_api_version=v67, attributes=attrs,
            error=None, module="jax_plugins.xla_cuda12", distribution="jax-cuda12-pjrt", distribution_version="0.10.2",
            struct_size=1112, extension_types=(1, 2, 4, 7, 9), load_s=0.118, framework_pjrt_api_version=v67,
            pjrt_accepted=True, pjrt_check="accepted: jaxlib's own version",
        ),
        PluginReport(
            name="rocm", source=PluginSource.ENTRY_POINT, status=PluginStatus.OK,
            library_path=f"{SITE}/jax_plugins/xla_rocm7/xla_rocm_plugin.so", pjrt_api_version=PjrtApiVersion(0, 61),
            attributes={"xla_version": 2}, error=None, module="jax_plugins.xla_rocm7", distribution="jax-rocm7-pjrt",
            distribution_version="0.9.2", load_s=0.094, framework_pjrt_api_version=v67, pjrt_accepted=True,
            pjrt_check="accepted: jaxlib speaks 0.67; compatibility mode (same major, minor >= 29) takes it",
        ),
        PluginReport(
            name="mygpu", source=PluginSource.ENV, status=PluginStatus.FILE_MISSING,
            library_path="/opt/vendor/lib/libmygpu_pjrt.so", pjrt_api_version=None, attributes={},
            error="/opt/vendor/lib/libmygpu_pjrt.so does not exist", framework_pjrt_api_version=v67,
            notes=("named by PJRT_NAMES_AND_LIBRARY_PATHS=mygpu:/opt/vendor/lib/libmygpu_pjrt.so",),
        ),
    ])  # fmt: skip


# ---- devctl env --------------------------------------------------------------------------------------


def env_gpu():
    from devctl.collect.env import EnvironmentReport

    v67 = PjrtApiVersion(0, 67)
    packages = [
        PackageVersion("jax", "0.10.2", "jax"),
        PackageVersion("jaxlib", "0.10.2", "jaxlib", pjrt_api_version=v67),
        PackageVersion("jax-cuda12-plugin", "0.9.2", "plugin"),
        PackageVersion("jax-cuda12-pjrt", "0.9.2", "pjrt", pjrt_api_version=PjrtApiVersion(0, 64),
                       pjrt_check="accepted: jaxlib speaks 0.67; compatibility mode (same major, minor >= 29) takes it", pjrt_accepted=True),
    ]  # fmt: skip
    wheels = [
        CudaWheel("nvidia-cuda-runtime-cu12", "12.8.90", "cuda_runtime", 12, "12.1", "jax-cuda12-plugin's requirements", "ok", SITE),
        CudaWheel("nvidia-cublas-cu12", "12.8.4.1", "cublas", 12, "12.1.3.1", "jax-cuda12-plugin's requirements", "ok", SITE),
        CudaWheel("nvidia-cudnn-cu12", "9.1.0.70", "cudnn", 12, "9.8", "jax-cuda12-plugin's requirements", "too old", SITE),
        CudaWheel("nvidia-nccl-cu12", "2.26.2", "nccl", 12, None, None, "not checked", SITE),
    ]
    fix = StackFix(
        command="pip install -U 'jax[cuda12]==0.10.2'", jax_version="0.10.2", extras=["cuda12"],
        changes=[PackageChange("jax-cuda12-pjrt", "0.9.2", "0.10.2"), PackageChange("jax-cuda12-plugin", "0.9.2", "0.10.2")],
        summary="puts the stack at jax 0.10.2's own release: jax-cuda12-pjrt 0.9.2 -> 0.10.2, jax-cuda12-plugin 0.9.2 -> 0.10.2",
    )  # fmt: skip
    findings = [
        EnvFinding("error", ["jax-cuda12-plugin", "jaxlib"],
                       "JAX plugin jax_cuda12_plugin version 0.9.2 is installed, but it is not compatible with the installed jaxlib version 0.10.2, so it will not be used.",
                       fix.command),
        EnvFinding("warning", ["jax-cuda12-pjrt", "jaxlib"],
                       "jax-cuda12-pjrt 0.9.2 is not jaxlib 0.10.2's release: JAX accepts its library (PJRT C API 0.64; jaxlib's own is 0.67, "
                       "compatibility mode (same major, minor >= 29)); JAX releases and tests them only together", fix.command),
        EnvFinding("warning", ["nvidia-cudnn-cu12"], "nvidia-cudnn-cu12 9.1.0.70 is older than 9.8, the oldest jax-cuda12-plugin accepts",
                       "pip install -U 'nvidia-cudnn-cu12>=9.8'"),
    ]  # fmt: skip
    env = [
        EnvVar("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7", "CUDA sees only GPU(s) 0,1,2,3,4,5,6,7, renumbered from 0"),
        EnvVar("XLA_PYTHON_CLIENT_MEM_FRACTION", ".9", "JAX's GPU memory pool: 90% of each GPU's memory",
               "deprecated: use XLA_CLIENT_MEM_FRACTION"),
        EnvVar("XLA_PYTHON_CLIENT_PREALLOCATE", "false", "no GPU preallocation: memory is allocated on demand (more fragmentation, less held)"),
        EnvVar("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true --xla_dump_to=/tmp/xla-dump", "XLA compiler and runtime flags"),
    ]  # fmt: skip
    return EnvironmentReport(
        schema="devctl.env/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="dgx-h100-07",
        python="3.11.7", python_executable="/home/alice/.venv/bin/python", os="Linux-5.15.0-131-generic-x86_64-with-glibc2.35",
        packages=packages, cuda_wheels=wheels, nvidia_driver="570.124.06", nvidia_cuda_driver_version="12.8",
        findings=findings, env=env, notes=["jaxlib's PJRT C API rule read from jaxlib 0.10.2's own plugin check"],
        stack_fix=fix,
    )  # fmt: skip


# ---- devctl memstats ---------------------------------------------------------------------------------


def _h100_busy(index: int) -> GpuBusy:
    """GPM over 0.2 s: the training job's GPUs busy as the H200's bf16 matmul loop was (reference/h200-observations.md),
    the others idle."""
    if index < 4:
        counters = BusyCounters(sm_active_ratio=0.643, sm_occupancy_ratio=0.0951, tensor_active_ratio=0.6305,
                                tensor_hmma_active_ratio=0.6305, dram_active_ratio=0.1253, gr_engine_active_ratio=0.6981,
                                pcie_tx_bytes_per_s=2.1e6, pcie_rx_bytes_per_s=3.4e6, nvlink_tx_bytes_per_s=41.9e9,
                                nvlink_rx_bytes_per_s=41.7e9)
        kernel, memory = 0.78, 0.18
    else:
        counters = BusyCounters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        kernel, memory = 0.0, 0.0
    return GpuBusy(index, "gpm", SOURCE_LABELS["gpm"], 0.2, counters, kernel, memory)  # fmt: skip


def memstats_gpu8():
    """A shared 8-GPU node: alice's training job preallocated 71.3 GiB on cuda:0-3 (it publishes from cuda:0), so a
    new process gets only what the driver has left there; cuda:4-7 are idle, bounded by the allocator's limit."""
    devices, processes = [], []
    job_used = [71 * GIB + 300 * MIB] * 4 + [0] * 4
    job_stats = {"bytes_in_use": 68 * GIB + 17 * MIB, "peak_bytes_in_use": 70 * GIB, "bytes_limit": 71 * GIB + 300 * MIB,
                 "pool_bytes": 71 * GIB + 300 * MIB}  # fmt: skip
    for i in range(8):
        limit = BYTES_LIMIT if i < 4 else 63_986_284_544
        stats = {"bytes_in_use": 0, "peak_bytes_in_use": 0, "bytes_limit": limit}  # the probe's fresh client
        driver_used = job_used[i] + 530 * MIB
        usable, bound = usable_memory(limit, NVML_TOTAL - driver_used)
        devices.append(
            MemDevice(
                key=f"cuda:{i}", source="jax", platform="gpu", id=i, device_kind=H100, memory_stats=stats, bytes_limit=limit,
                usable_bytes=usable, usable_bound=bound,
                in_use_bytes=job_stats["bytes_in_use"] if i == 0 else driver_used, in_use_source="jobs" if i == 0 else "driver",
                peak_bytes_in_use=job_stats["peak_bytes_in_use"] if i == 0 else None,
                driver={"index": i, "uuid": f"GPU-5c3f1e9a-0d4b-7c21-9e0f-6a1b2c3d4e{i:02d}", "name": H100, "total_bytes": NVML_TOTAL,
                        "used_bytes": driver_used, "free_bytes": NVML_TOTAL - driver_used},
                hbm_bytes=None, busy=_h100_busy(i),
            )
        )  # fmt: skip
    for i in range(4):
        processes.append(MemProcess(pid=48211, source="nvml", user="alice", device=f"cuda:{i}", used_bytes=job_used[i],
                                    command="python train.py --config configs/llama3-8b.yaml --mesh fsdp=4"))
    processes.append(MemProcess(pid=48211, source="publisher", user="alice", device="cuda:0", used_bytes=68 * GIB + 17 * MIB,
                                command="python train.py --config configs/llama3-8b.yaml --mesh fsdp=4", live_arrays=1843,
                                memory_stats=job_stats, headroom_bytes=job_headroom_bytes(job_stats, devices[0].driver["free_bytes"])))
    processes.append(MemProcess(pid=2231, source="nvml", user=None, device="cuda:5", used_bytes=None, pid_visible=False, command=None))
    return MemSnapshot(
        schema="devctl.memstats/2", timestamp=TIMESTAMP, hostname="dgx-h100-07", devices=devices, processes=processes,
        publishers=[], headroom=headroom(devices, processes),
        host=HostMemory(total_bytes=2015 * GIB, available_bytes=1780 * GIB, used_bytes=201 * GIB, swap_total_bytes=0,
                        swap_used_bytes=0, shm_total_bytes=1008 * GIB, shm_used_bytes=3 * GIB + 200 * MIB),
        problems=["NVML: cuda:5 reports a process in another pid namespace (pid 2231): its user and command are unknown"],
        notes=["1 publisher read from /run/user/1000/devctl/publishers"],
    )  # fmt: skip


# ---- devctl bench transfer ---------------------------------------------------------------------------

SIZES = [4 * KIB * 4**i for i in range(9)] + [GIB]  # the default sweep with 1G, on a GPU with room for it


def _cell(direction, variant, size, src, dst, gbps, roof=None, roof_gbps=None, **kw) -> Cell:
    median = size / (gbps * 1e9)
    pct, suspect = roof_verdict(gbps, roof, roof_gbps)  # as the probe judges a cell against its roof
    # As the probe times them: on a GPU a bandwidth cell whose source can be sent again in bursts, the call alone
    # apart; a latency cell, a d2h through numpy and every CPU cell call by call.
    burst = "cuda" in src + dst and size > LATENCY_MAX_BYTES and variant != "copy"
    timing = {"method": "burst", "calls_per_sample": max(2, min(1000, round(0.02 / median))), "single_call_s": median + 4e-5,
              "call_overhead_s": 4e-5} if burst else {"method": "single", "calls_per_sample": 1}  # fmt: skip
    return Cell(
        **timing, direction=direction, variant=variant, layout="single", size_bytes=size, src=src, dst=dst, bytes_moved=size,
        samples=max(3, min(1000, int(0.03 / median))), min_s=median * 0.97, p10_s=median * 0.98, median_s=median,
        p90_s=median * 1.06, max_s=median * 1.31, mean_s=median * 1.02, cv=0.04, gbps=gbps, peak_gbps=gbps / 0.97,
        per_device_gbps=gbps, verified=True, roof=roof, roof_gbps=roof_gbps, pct_of_roof=pct, suspect=suspect,
        roof_reason=None if roof else "no roof for this path (NVLink, ICI and HBM peaks are not queried)", **kw,
    )  # fmt: skip


def _memcpy_roof(size: int, best_gbps: float, samples: int = 10) -> MemcpyRoof:
    """The probe's memcpy roof: the fastest of `samples` copies, the typical one a little slower."""
    best = size / (best_gbps * 1e9)
    return MemcpyRoof(size, samples, best * 1.04, best_gbps, min_s=best)


def _curve(peak: float, half: int, size: int) -> float:
    """GB/s of a transfer with a fixed latency (`half` / `peak` seconds): half the peak at `half` bytes."""
    return round(peak * size / (size + half), 3)


def bench_gpu8():
    pcie = 63.015  # Gen5 x16 per direction
    cells = []
    for size in SIZES:
        cells.append(_cell("h2d", "pageable", size, "host", "cuda:0", _curve(24.5, 512 * KIB, size), "pcie", pcie))
        cells.append(_cell("h2d", "pinned", size, "host", "cuda:0", _curve(53.8, 512 * KIB, size), "pcie", pcie))
        cells.append(_cell("d2h", "copy", size, "cuda:0", "host", _curve(21.9, 512 * KIB, size), "pcie", pcie))
        cells.append(_cell("d2d", "put", size, "cuda:0", "cuda:1", _curve(389.0, 4 * MIB, size)))
    # nvbandwidth's view: every ordered pair once at the largest size.
    for a in range(8):
        for b in range(8):
            if a != b and (a, b) != (0, 1):
                cells.append(_cell("d2d", "put", GIB, f"cuda:{a}", f"cuda:{b}", round(386.0 - 3.1 * ((a * 7 + b * 3) % 5), 3)))
    cells.append(Cell("d2h", "pinned", "single", GIB, "cuda:0", "host", skipped=True,
                      note="skipped: cuda:0 has no pinned_host memory"))  # fmt: skip
    cells.append(Cell("d2d-self", "put", "single", GIB, "cuda:0", "cuda:0", bytes_moved=0, samples=3, median_s=2.1e-6,
                      min_s=2.0e-6, p10_s=2.0e-6, p90_s=2.4e-6, max_s=2.6e-6, mean_s=2.2e-6, zero_copy=True, verified=True,
                      note="zero-copy: this jax ignores may_alias=False for a same-device put (jax 0.6 and later copy)"))  # fmt: skip
    cells = tuple(cells)
    devices = tuple(
        BenchDevice(i, f"cuda:{i}", "gpu", H100, ("device", "pinned_host", "unpinned_host"), BYTES_LIMIT) for i in range(8)
    )
    roofs = Roofs(
        host_memcpy=tuple(_memcpy_roof(s, 11.2) for s in SIZES),
        pcie=(PcieLink("cuda:0", BUS[0], 5, 16, 5, pcie, seen_gen=5, seen_width=16, below_max=False),
              PcieLink("cuda:1", BUS[1], 5, 16, 5, pcie, seen_gen=4, seen_width=16, below_max=True)),
    )  # fmt: skip
    return TransferReport(
        results=cells, roofs=roofs, fastest=fastest_paths(cells), devices=devices,
        environment=_transfer_env("cuda", hostname="dgx-h100-07", sizes_bytes=list(SIZES)),
    )  # fmt: skip


def _transfer_env(backend: str, **settings) -> dict:
    """A bench transfer run's environment, every field its schema asks for (the probe child's plan and devctl's)."""
    quick = settings.get("quick", False)
    env = {
        "python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.2.6", "backend": backend,
        "platform_version": CUDA_PLATFORM_VERSION if backend == "cuda" else backend, "hostname": "ci-runner-3",
        "cpu_count": 224 if backend == "cuda" else 4, "cpu_affinity": None, "xla_flags": None, "jax_platforms": None,
        "devctl": "0.1.0", "child_elapsed_s": 6.1, "sizes_bytes": [4 * KIB, 16 * MIB], "sweep_note": None, "pairs_note": None,
        "repeats": 3, "min_time_s": 0.01 if quick else 0.03, "warmups": 1 if quick else 2, "verify": True, "quick": quick, "dtype": "uint8",
    }  # fmt: skip
    return {**env, **settings}


def bench_cpu_quick():
    """`devctl bench transfer --quick` on a 4-device CPU host: no PCIe, the memcpy roof, a CPU pair note."""
    roof = 9.87
    cells = []
    for size in (4 * KIB, 16 * MIB):
        cells.append(_cell("h2d", "pageable", size, "host", "cpu:0", _curve(7.4, 64 * KIB, size), "host_memcpy", roof))
        cells.append(_cell("d2h", "copy", size, "cpu:0", "host", _curve(6.8, 64 * KIB, size), "host_memcpy", roof))
        cells.append(_cell("d2d", "put", size, "cpu:0", "cpu:1", _curve(6.1, 96 * KIB, size), "host_memcpy", roof))
        cells.append(_cell("d2d-self", "put", size, "cpu:0", "cpu:0", _curve(7.9, 64 * KIB, size), "host_memcpy", roof))
    cells = tuple(cells)
    return TransferReport(
        results=cells,
        roofs=Roofs(host_memcpy=(_memcpy_roof(4 * KIB, 9.75, 1000), _memcpy_roof(16 * MIB, roof)),
                    pcie_reason="no GPU among the devices measured"),
        fastest=fastest_paths(cells),
        devices=tuple(BenchDevice(i, f"cpu:{i}", "cpu", "cpu", ("device", "pinned_host", "unpinned_host")) for i in range(4)),
        environment=_transfer_env("cpu", quick=True, pairs_note="d2d pair matrix not measured: CPU devices share host memory (use --all-pairs)"),
    )  # fmt: skip


def bench_cpu1_quick():
    """`devctl bench transfer --quick` on a one-device CPU host: d2d has no pair (one note, not a row per size),
    and one copy came out above the memcpy roof (measured while another job ran): suspect, not 106%."""
    roof = 14.7
    cells = []
    for size in (4 * KIB, 16 * MIB):
        cells.append(_cell("h2d", "pageable", size, "host", "cpu:0", _curve(7.4, 64 * KIB, size), "host_memcpy", roof))
        d2h = 15.6 if size == 16 * MIB else _curve(6.8, 64 * KIB, size)
        cells.append(_cell("d2h", "copy", size, "cpu:0", "host", d2h, "host_memcpy", roof))
        cells.append(Cell("d2d", "put", "single", size, "cpu:0", "none", skipped=True,
                          note="skipped: device-to-device needs at least 2 devices"))  # fmt: skip
        cells.append(_cell("d2d-self", "put", size, "cpu:0", "cpu:0", _curve(12.2, 64 * KIB, size), "host_memcpy", roof))
    cells = tuple(cells)
    return TransferReport(
        results=cells,
        roofs=Roofs(host_memcpy=(_memcpy_roof(4 * KIB, 12.6, 1000), _memcpy_roof(16 * MIB, roof)),
                    pcie_reason="no GPU among the devices measured"),
        fastest=fastest_paths(cells),
        devices=(BenchDevice(0, "cpu:0", "cpu", "cpu", ("device", "pinned_host", "unpinned_host")),),
        environment=_transfer_env("cpu", quick=True),
    )  # fmt: skip


# ---- devctl check ------------------------------------------------------------------------------------


def check_gpu8():
    R, S = CheckResult, CheckStatus
    # A check's time is its own work; the probes it read are the report's phases_s (say apart under the table).
    checks = [
        R("versions", S.WARN, "jax-cuda12-pjrt 0.9.2 is not jaxlib 0.10.2's release: JAX accepts its library (PJRT C API 0.64; jaxlib's own is 0.67, compatibility mode (same major, minor >= 29)); JAX releases and tests them only together",
          "pip install -U 'jax[cuda12]==0.10.2'", 0.004),
        R("plugins", S.PASS, "1 plugin(s) load: cuda", None, 0.01),
        R("backends", S.PASS, "initialized: cuda (8 devices), cpu (1 device); default gpu", None, 0.0),
        R("devices", S.PASS, "8 gpu device(s): NVIDIA H100 80GB HBM3 x8", None, 0.0),
        R("compute", S.PASS, "matmul and sum agree with numpy on all 8 device(s) (largest relative error 3.1e-07, tolerance 1e-03)", None, 0.0),
        R("transfer", S.PASS, "h2d-d2h round trips intact on 8 device(s); d2d intact on 8 pair(s)", None, 0.0),
        R("memory", S.FAIL, "bytes_limit 59.4 GiB on cuda:0, below --min-memory 70.0 GiB (lowest of 8)",
          "free the GPU (devctl memstats names the process holding it), or raise XLA_CLIENT_MEM_FRACTION", 0.0),
        R("bandwidth", S.WARN, "h2d 24.39 GB/s to cuda:3 is below --min-h2d 25 GB/s (lowest of 8, 256 MiB, pageable)",
          "check the PCIe link of cuda:3 (nvidia-smi -q -d PCIE); devctl bench transfer --direction h2d --device 3", 0.0),
        R("busy", S.FAIL, "SM active over 1.0 s (GPM): cuda:6 91%; expected at most 10% (--max-busy)",
          "another process is using it: see devctl memstats (its processes and SM/TC/DRAM %) and wait, or run on another accelerator", 0.0),
        R("nvml-health", S.WARN, "GPU 5 (0000:ab:00.0): 2 remapped rows pending a reset; GPU 6 (0000:ba:00.0): thermal slowdown active (HW_THERMAL_SLOWDOWN), 88 C",
          "drain this host and reset GPU 5 (nvidia-smi -r -i 5); check the cooling of GPU 6", 0.0),
        R("host", S.PASS, "2015.0 GiB RAM, 1780.0 GiB available, /dev/shm 1008.0 GiB, 224 CPUs", None, 0.0),
        R("tpu", S.SKIP, "no TPU chip on this machine", None, 0.01),
        R("env", S.PASS, "3 relevant variable(s) set, none with a problem: CUDA_VISIBLE_DEVICES, XLA_FLAGS, XLA_PYTHON_CLIENT_PREALLOCATE", None, 0.0),
    ]  # fmt: skip
    return CheckReport(
        schema="devctl.check/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="dgx-h100-07", status="fail",
        strict=False,
        expectations=Expectations(platforms=("gpu",), min_devices=8, device_kind="H100", min_memory_bytes=70 * GIB, min_h2d_gbps=25.0, max_busy_percent=10.0),
        checks=checks, phases_s={"busy": 1.02, "inventory": 6.2, "environment": 0.41, "health": 6.07, "nvml": 0.37}, elapsed_s=13.6,
    )  # fmt: skip


def check_cluster_gpu2x8():
    """`devctl check --distributed --only versions,devices,memory,env` on two 8-GPU hosts; the second runs a newer jaxlib."""
    from devctl.model.check import cluster_check_name

    R, S = CheckResult, CheckStatus
    hosts = ["dgx-h100-07", "dgx-h100-08"]
    per_process = [
        [R("versions", S.PASS, "jax 0.10.2, jaxlib 0.10.2, jax-cuda12-plugin 0.10.2: consistent", None, 0.0),
         R("devices", S.PASS, "8 gpu device(s): NVIDIA H100 80GB HBM3 x8", None, 0.0),
         R("memory", S.PASS, "bytes_limit 59.4 GiB per device (lowest of 8)", None, 0.0),
         R("env", S.PASS, "1 relevant variable(s) set, none with a problem: XLA_FLAGS", None, 0.0)],
        [R("versions", S.FAIL, "jaxlib 0.11.0 needs jax 0.11.0, found jax 0.10.2: import jax fails", "pip install -U 'jax[cuda12]==0.11.0'", 0.0),
         R("devices", S.PASS, "8 gpu device(s): NVIDIA H100 80GB HBM3 x8", None, 0.0),
         R("memory", S.PASS, "bytes_limit 55.4 GiB per device (lowest of 8)", None, 0.0),
         R("env", S.PASS, "1 relevant variable(s) set, none with a problem: XLA_FLAGS", None, 0.0)],
    ]  # fmt: skip
    checks = [
        CheckResult(cluster_check_name(r.name, hosts[i], i), r.status, r.message, r.remediation, r.duration_s,
                    {"check": r.name, "hostname": hosts[i], "process_index": i})
        for i, results in enumerate(per_process) for r in results
    ]  # fmt: skip
    return CheckReport(
        schema="devctl.check/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="2 processes on dgx-h100-07, dgx-h100-08",
        status="fail", strict=False, expectations=Expectations(), checks=checks,
        phases_s={"inventory": 6.41, "environment": 0.44}, elapsed_s=8.9,
    )  # fmt: skip


def _cpu_box_checks(platform_gpu: bool) -> list[CheckResult]:
    """The checks of a real run on this project's 2-core CPU box (jax 0.10.2, one CPU device), as --json gave them."""
    R, S = CheckResult, CheckStatus
    doctor = "run devctl doctor for a diagnosis"
    no_gpu = "no gpu backend initialized, so there is no gpu device to run on (see the backends check)"
    head = [
        R("versions", S.PASS, "jax 0.10.2, jaxlib 0.10.2: consistent", None, 0.0),
        R("plugins", S.PASS, "no JAX plugins installed: nothing to load beyond jaxlib's own CPU backend", None, 0.0),
    ]
    if platform_gpu:
        middle = [
            R("backends", S.FAIL, "expected gpu: no gpu backend is installed",
              "pip install -U 'jax[cuda13]' (NVIDIA, driver >= 580) or see JAX's ROCm install guide (AMD)", 0.0),
            R("devices", S.FAIL, "JAX sees no gpu device", doctor, 0.0, caused_by="backends"),
            R("compute", S.FAIL, no_gpu, doctor, 0.0, caused_by="backends"),
            R("transfer", S.FAIL, no_gpu, doctor, 0.0, caused_by="backends"),
            R("memory", S.SKIP, "no gpu device", None, 0.0, caused_by="backends"),
            R("bandwidth", S.FAIL, no_gpu, doctor, 0.0, caused_by="backends"),
        ]
    else:
        middle = [
            R("backends", S.PASS, "initialized: cpu (0.01 s); default cpu", None, 0.0),
            R("devices", S.PASS, "1 cpu device(s): cpu", None, 0.0),
            R("compute", S.PASS, "jitted matmul and sum agree with numpy on 1 cpu device(s) (worst relative error 6.6e-07)", None, 0.0),
            R("transfer", S.PASS, "1048589 random bytes unchanged host->device->host on 1 device(s) and device->device on 0 ordered pair(s)", None, 0.0),
            R("memory", S.SKIP, "cpu devices report no memory_stats(), so no bytes_limit", None, 0.0),
            R("bandwidth", S.PASS, "h2d 0.51 GB/s to cpu:0 (64 MiB, pageable)", None, 0.0),
        ]
    nvml = "NVML: libnvidia-ml.so.1 not found: no NVIDIA driver installed, or not mounted into this container"
    tail = [
        R("memory-bw", S.SKIP, "no --min-memory-bw expectation (devctl bench memory measures each device's memory bandwidth)", None, 0.0),
        R("matmul", S.SKIP, "no --min-tflops expectation (devctl bench matmul measures each device's matmul throughput)", None, 0.0),
        R("busbw", S.SKIP, "no --min-busbw expectation (devctl bench collective measures the collectives' bus bandwidth)", None, 0.0),
        R("stragglers", S.SKIP, "not asked (--stragglers compares every device's memory bandwidth and matmul throughput with its peers')", None, 0.0),
        R("busy", S.SKIP, "not asked (--max-busy fails when an accelerator is busier than PCT, --min-busy when one is idler)", None, 0.0),
        R("nvml-health", S.FAIL, nvml, "install or reload the NVIDIA driver (nvidia-smi must work)", 0.0) if platform_gpu
        else R("nvml-health", S.SKIP, nvml, None, 0.0),
        R("host", S.PASS, "/dev/shm 23.5 GiB", None, 0.0),
        R("tpu", S.SKIP, "no TPU chip on this machine", None, 0.0),
        R("env", S.PASS, "no JAX, XLA or TPU variables set", None, 0.0),
    ]  # fmt: skip
    return head + middle + tail


def check_cpu_default():
    """`devctl check` with no flags on a CPU box: nothing failed, four benchmarks nobody asked for."""
    return CheckReport(
        schema="devctl.check/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="cpu-runner", status="pass",
        strict=False, expectations=Expectations(), checks=_cpu_box_checks(platform_gpu=False),
        phases_s={"inventory": 1.47, "environment": 1.18, "health": 2.98, "nvml": 0.01}, elapsed_s=4.4,
    )  # fmt: skip


def check_cpu_no_gpu():
    """`devctl check --platform gpu --min-h2d 10GB/s` on a CPU box: one cause (no gpu backend), and the checks
    that fail or skip because of it under it."""
    return CheckReport(
        schema="devctl.check/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="cpu-runner", status="fail",
        strict=False, expectations=Expectations(platforms=("gpu",), min_h2d_gbps=10.0, sources={"platform": "flag", "min-h2d": "flag"}),
        checks=_cpu_box_checks(platform_gpu=True), phases_s={"inventory": 1.51, "environment": 1.45, "nvml": 0.1}, elapsed_s=1.9,
    )  # fmt: skip


# ---- devctl doctor -----------------------------------------------------------------------------------


def doctor_cpu_broken():
    R, S = CheckResult, CheckStatus
    findings = [
        DoctorFinding(
            id="pjrt-entry-broken", catalogue_number=None,
            title="A PJRT_NAMES_AND_LIBRARY_PATHS entry cannot be loaded", severity="error",
            evidence=["mygpu: INVALID_ARGUMENT: Failed to open /opt/vendor/lib/libmygpu_pjrt.so: cannot open shared object file: No such file or directory",
                      "jax.devices() raises: RuntimeError: Unable to initialize backend 'mygpu'"],
            cause="JAX loads every entry of PJRT_NAMES_AND_LIBRARY_PATHS at its first jax.devices(), and one that fails makes every call raise, whatever JAX_PLATFORMS says",
            fix="fix its path, or drop it: unset PJRT_NAMES_AND_LIBRARY_PATHS",
            references=["https://docs.jax.dev/en/latest/installation.html", "https://github.com/jax-ml/jax/issues/21540"],
            checks=["backends"], code="DEVCTL_FR_PJRT_ENTRY_BROKEN",
        ),
        DoctorFinding(
            id="cuda-plugin-without-gpu", catalogue_number=3,
            title="The CUDA plugin is installed on a machine without a usable NVIDIA GPU", severity="warning",
            evidence=["jax_plugins.xla_cuda12.initialize() raised RuntimeError: ... cuInit(0) failed: Unknown CUDA error 303",
                      "NVML: libnvidia-ml.so.1 not found", "2 NVIDIA GPU(s) on the PCI bus, bound to vfio-pci"],
            cause="the GPUs are passed through to a VM (vfio-pci), so the nvidia driver does not drive them here; JAX logs the plugin's error and falls back to CPU",
            fix="to silence the CUDA plugin set JAX_PLATFORMS=cpu, or uninstall the CUDA extra (pip uninstall jax-cuda12-plugin jax-cuda12-pjrt)",
            references=["https://docs.jax.dev/en/latest/installation.html#nvidia-gpu"],
            checks=["plugins"], code="DEVCTL_FR_CUDA_PLUGIN_WITHOUT_GPU",
        ),
    ]  # fmt: skip
    checks = [
        R("versions", S.PASS, "jax 0.10.2, jaxlib 0.10.2, jax-cuda12-plugin 0.10.2: consistent"),
        R("plugins", S.FAIL, "xla_cuda12: this machine has no NVIDIA GPU", "set JAX_PLATFORMS=cpu"),
        R("backends", S.FAIL, "jax.devices() raises", "unset PJRT_NAMES_AND_LIBRARY_PATHS"),
        R("devices", S.PASS, "4 cpu device(s)"),
        R("tpu", S.SKIP, "no TPU chip on this machine"),
        R("env", S.WARN, "PJRT_NAMES_AND_LIBRARY_PATHS names a missing file", "unset PJRT_NAMES_AND_LIBRARY_PATHS"),
    ]  # fmt: skip
    overview = Overview(
        sees=["jax 0.10.2, jaxlib 0.10.2, Python 3.11.7 on Linux x86_64 (ci-runner-3)",
              "plugins: xla_cuda12 (jax-cuda12-plugin 0.10.2), mygpu (PJRT_NAMES_AND_LIBRARY_PATHS)",
              "hardware: 2 NVIDIA A100-SXM4-40GB on the PCI bus (vfio-pci), no NVIDIA driver, no TPU, no AMD GPU"],
        jax_will_use=["nothing: jax.devices() raises RuntimeError: Unable to initialize backend 'mygpu' (the PJRT_NAMES_AND_LIBRARY_PATHS entry)",
                      "with that fixed: cpu, 4 device(s), the CUDA plugin's error logged"],
        default_platform=None, device_count=0, device_kinds=[],
    )  # fmt: skip
    return DoctorReport(
        schema="devctl.doctor/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="ci-runner-3", status="problems",
        overview=overview, findings=findings, checks=checks, elapsed_s=3.4,
    )  # fmt: skip


def doctor_gpu8_ok():
    R, S = CheckResult, CheckStatus
    overview = Overview(
        sees=["jax 0.10.2, jaxlib 0.10.2, jax-cuda12-plugin 0.10.2, Python 3.11.7 on Linux x86_64 (dgx-h100-07)",
              "hardware: 8 NVIDIA H100 80GB HBM3 (NVML, driver 570.124.06, CUDA 12.8), no TPU, no AMD GPU"],
        jax_will_use=["gpu (cuda): 8 device(s), NVIDIA H100 80GB HBM3; default backend gpu"],
        default_platform="gpu", device_count=8, device_kinds=[H100],
    )  # fmt: skip
    checks = [R(n, S.PASS, "ok") for n in ("versions", "plugins", "backends", "devices", "nvml-health", "host", "env")]
    checks.append(R("tpu", S.SKIP, "no TPU chip on this machine"))
    return DoctorReport(
        schema="devctl.doctor/1", devctl_version="0.1.0", timestamp=TIMESTAMP, hostname="dgx-h100-07", status="ok",
        overview=overview, findings=[], checks=checks, elapsed_s=7.1,
    )  # fmt: skip


# ---- devctl list --distributed -----------------------------------------------------------------------


def cluster_gpu2x8():
    """Two 8-GPU hosts under `devctl list --distributed`; the second runs a newer jaxlib."""
    from devctl.model.distributed import LIST_SCHEMA, ClusterDevice, ClusterFinding, ClusterHeadroom, ClusterReport, ProcessSummary

    hosts = ["dgx-h100-07", "dgx-h100-08"]
    processes = [
        ProcessSummary(i, hosts[i], 8, [H100], "gpu", "0.10.2", ["0.10.2", "0.11.0"][i], None,
                       {"jax-cuda12-plugin": "0.10.2", "jax-cuda12-pjrt": "0.10.2"}, "570.124.06", 16)
        for i in range(2)
    ]  # fmt: skip
    local = [d for d in list_gpu8().devices if d.platform == "gpu"]  # each host's own list record of its GPUs
    devices = [
        ClusterDevice(p, hosts[p], f"cuda:{8 * p + i}", "gpu", 8 * p + i, H100, p, BYTES_LIMIT, None,
                      BYTES_LIMIT - [0, 4 * GIB][p], dataclasses.replace(local[i], id=8 * p + i, process_index=p))
        for p in range(2) for i in range(8)
    ]  # another process holds 4 GiB more than the limit leaves on host 08  # fmt: skip
    finding = ClusterFinding(
        "version-mismatch", "error", "jaxlib_version", "jaxlib 0.11.0 on dgx-h100-08 (process 1); the others run 0.10.2",
        [1], ["dgx-h100-08"], ["0.11.0"], "0.10.2", "install one jax release on every host: pip install -U 'jax[cuda12]==0.10.2'",
    )  # fmt: skip
    return ClusterReport(
        schema=LIST_SCHEMA, devctl_version="0.1.0", timestamp=TIMESTAMP, coordinator="10.0.0.7:8476", num_processes=2,
        processes=processes, devices=devices, findings=[finding],
        headroom=ClusterHeadroom(BYTES_LIMIT - 4 * GIB, 1, "dgx-h100-08", "cuda:8", (BYTES_LIMIT - 4 * GIB) // 3),
        reports=[], elapsed_s=9.8, join_s=1.2, gather_s=0.4,
    )  # fmt: skip


# ---- what the golden tests render ---------------------------------------------------------------------

# golden name -> the report; devctl.render.emit picks its table by the report's schema id, as every command does.
def list_h200():
    """`devctl list --json` as it came from a real H200 (jax 0.11.2, CUDA 13 plugin, 2026-11-27: the hardware run of
    benchmarks/results/h200-acceptance-2026-11-27.md), read back as the model reads it."""
    import json
    from pathlib import Path

    from devctl.collect.list_ import Inventory
    from devctl.model import from_dict

    doc = json.loads((Path(__file__).parent / "fixtures" / "h200" / "list-2026-11-27.json").read_text())
    return from_dict(Inventory, doc)


VIEWS = {
    "list-gpu8": list_gpu8,
    "list-h200": list_h200,
    "list-cpu-broken": list_cpu_broken,
    "cluster-gpu2x8": cluster_gpu2x8,
    "plugins-gpu": plugins_gpu,
    "env-gpu": env_gpu,
    "memstats-gpu8": memstats_gpu8,
    "bench-transfer-gpu8": bench_gpu8,
    "bench-transfer-cpu-quick": bench_cpu_quick,
    "bench-transfer-cpu1-quick": bench_cpu1_quick,
    "check-gpu8": check_gpu8,
    "check-cluster-gpu2x8": check_cluster_gpu2x8,
    "check-cpu-default": check_cpu_default,
    "check-cpu-no-gpu": check_cpu_no_gpu,
    "doctor-cpu-broken": doctor_cpu_broken,
    "doctor-gpu8-ok": doctor_gpu8_ok,
    "bench-collective-gpu8": collective_gpu8,
    "bench-collective-cpu-quick": collective_cpu_quick,
}

# bench memory and bench matmul (tests/golden_chip_reports.py).
from golden_chip_reports import VIEWS as _CHIP_VIEWS  # noqa: E402

VIEWS.update(_CHIP_VIEWS)

# What holds a job's memory: --top, --postmortem, --distributed --top (tests/golden_holders.py).
from golden_holders import VIEWS as _HOLDER_VIEWS  # noqa: E402

VIEWS.update(_HOLDER_VIEWS)
