"""What discovery finds on the machine without JAX: host, processes, TPU, AMD and NVIDIA hardware.

Every `unavailable` dict maps a field left None to the reason it is unknown,
so renderers can explain a blank instead of printing "N/A".
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DriverFinding:
    """The CUDA driver check's finding (devctl.checks.cuda_driver): the NVIDIA driver against the CUDA runtime wheel,
    named from discovery's facts alone, without running JAX."""

    code: str  # stable identifier, e.g. "cuda-driver-too-old"
    severity: str  # "error" | "warning" | "info"
    message: str  # one line: what is wrong and the values involved
    hint: str | None = None  # what to do about it


# --- host -----------------------------------------------------------------


@dataclass(frozen=True)
class HostInfo:
    hostname: str | None
    cpu_model: str | None
    logical_cores: int | None
    physical_cores: int | None
    usable_cores: int | None  # CPUs this process may run on (affinity); real host only
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    swap_total_bytes: int | None
    swap_free_bytes: int | None
    shm_total_bytes: int | None
    shm_free_bytes: int | None
    numa_nodes: tuple[int, ...]  # ids of /sys/devices/system/node/node*; empty when the kernel has no NUMA
    thp_mode: str | None  # the bracketed choice: "always", "madvise" or "never"
    thp_enabled: bool | None  # JAX's rule: the file reads exactly "[always] madvise never"
    os_name: str | None  # PRETTY_NAME from /etc/os-release
    kernel: str | None
    python_version: str
    python_executable: str
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown


# --- processes ------------------------------------------------------------


@dataclass(frozen=True)
class ProcessRef:
    pid: int
    uid: int | None
    user: str | None  # login name on a real host, else the uid as text
    command: str | None  # cmdline joined with spaces, or comm when cmdline is empty


@dataclass(frozen=True)
class HolderScan:
    """Who has which path open, from /proc/*/fd."""

    holders: dict[str, tuple[ProcessRef, ...]]  # only paths that someone holds
    inspected_processes: int
    uninspectable_processes: int  # fds unreadable, usually another user's process without root


# --- TPU ------------------------------------------------------------------


@dataclass(frozen=True)
class TpuChip:
    index: int
    pci_address: str  # the chip's first function, "dddd:bb:dd.f"
    pci_functions: tuple[str, ...]
    device_id: str  # PCI device id, "0x0063"
    version: str  # "v2", "v3", "plc", "v4", "v5p", "v5e", "v6e", "tpu7x", "tpu8i", "tpu8t"
    hbm_bytes: int | None
    devices_per_chip: int | None  # TensorCores JAX shows as separate devices
    numa_node: int | None
    iommu_group: str | None
    device_path: str  # /dev/vfio/<group> or /dev/accel<index>
    device_path_exists: bool
    accessible: bool | None  # can this user open the device path read/write; None when it is absent
    holders: tuple[ProcessRef, ...]
    notes: tuple[str, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown


@dataclass(frozen=True)
class TpuLockfile:
    path: str
    exists: bool
    state: str  # "absent" | "held" | "stale" | "unknown"
    holders: tuple[ProcessRef, ...]  # live processes with the file open or locked
    pid_in_file: int | None
    pid_in_file_alive: bool | None
    reason: str | None = None  # why the state is what it is, one line


@dataclass(frozen=True)
class TpuReport:
    chips: tuple[TpuChip, ...]
    pci_function_count: int  # Google TPU PCI functions; v2/v3/7x have two per chip
    versions: tuple[str, ...]
    lockfile: TpuLockfile
    env: dict[str, str]  # TPU-related environment variables that are set
    uninspectable_processes: int
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown

    @property
    def chip_count(self) -> int:
        return len(self.chips)


# --- AMD ------------------------------------------------------------------


@dataclass(frozen=True)
class AmdGpu:
    node: int  # KFD topology node id
    name: str | None
    vendor_id: int | None
    device_id: int | None
    simd_count: int
    gfx_target_version: int | None  # e.g. 90010
    gfx_target: str | None  # e.g. "gfx90a"
    vram_bytes: int | None
    pci_address: str | None
    drm_render_minor: int | None
    render_node: str | None  # /dev/dri/renderD<minor>
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown


@dataclass(frozen=True)
class AmdReport:
    gpus: tuple[AmdGpu, ...]
    kfd_present: bool  # /dev/kfd: without it ROCm sees nothing even when the topology lists GPUs
    dxg_present: bool  # /dev/dxg: WSL2
    jax_gpu_count: int  # what jax's hardware_utils.num_available_amd_gpus() would return
    skipped_nodes: tuple[str, ...] = ()  # topology nodes ignored, with the reason


# --- NVIDIA ---------------------------------------------------------------


@dataclass(frozen=True)
class PciFunction:
    address: str  # "dddd:bb:dd.f"
    vendor_id: str  # "0x10de"
    device_id: str
    class_code: str | None  # "0x030200"
    driver: str | None  # bound kernel driver, e.g. "nvidia", "vfio-pci"; None when none is bound
    numa_node: int | None


@dataclass(frozen=True)
class NvidiaGpu:
    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None  # normalized "dddd:bb:dd.f", lower case
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    compute_capability: tuple[int, int] | None
    pcie_link_gen_current: int | None  # may drop at idle; sample under load
    pcie_link_gen_max: int | None  # max of device and slot together
    pcie_link_gen_gpu_max: int | None  # what the GPU alone supports
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None
    power_draw_w: float | None
    power_limit_w: float | None
    temperature_c: int | None
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML says is using a GPU (memstats lists them; the nvml-health check counts the compute ones)."""

    gpu_index: int
    gpu_uuid: str | None
    pid: int  # as NVML gives it: the host's pid namespace
    used_memory_bytes: int | None  # None: the driver cannot attribute memory to it (MIG, no permission, some containers)
    kind: str  # "compute" | "graphics"
    user: str | None
    command: str | None
    pid_visible: bool  # False: no such pid here (a container's pid namespace), so user and command are unknown


@dataclass(frozen=True)
class NvmlReport:
    status: str  # "ok" | "unavailable" (no library or driver: a normal state) | "error"
    reason: str | None
    driver_version: str | None
    cuda_driver_version: int | None  # e.g. 12040
    cuda_driver_version_str: str | None  # e.g. "12.4"
    gpus: tuple[NvidiaGpu, ...]
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown
    processes: tuple[GpuProcess, ...] = ()  # filled only when asked for (memstats)


@dataclass(frozen=True)
class CudaWheel:
    distribution: str  # as installed, e.g. "nvidia-cublas-cu12"
    version: str
    component: str  # "cuda_runtime", "cublas", "cudnn", ...; the name without "nvidia-" and "-cuNN"
    cuda_major: int | None  # from the "-cuNN" suffix, else the version's major for CUDA components
    minimum: str | None  # lowest version JAX accepts, when one applies
    minimum_source: str | None  # where the minimum comes from
    verdict: str  # "ok" | "too old" | "unknown" | "not checked"
    location: str | None = None  # the site directory it is installed in


@dataclass(frozen=True)
class GpuPcieLink:
    """One GPU's PCIe link as NVML reports it, for `devctl bench transfer`'s roof and its samples after transfers.

    The pcie_link_* fields mean what NvidiaGpu's do."""

    gpu: str | int  # what was asked for: a PCI bus id, or an NVML index
    pci_bus_id: str | None  # normalized "dddd:bb:dd.f", lower case
    pcie_link_gen_current: int | None
    pcie_link_gen_max: int | None
    pcie_link_gen_gpu_max: int | None
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None
    unavailable: dict[str, str] = field(default_factory=dict)  # "handle" when the GPU itself was not found


@dataclass(frozen=True)
class GpuHealth:
    """NVML's health counters for one GPU; None with a reason in `unavailable` where the GPU does not say."""

    index: int
    name: str | None
    pci_bus_id: str | None
    ecc_uncorrected_volatile: int | None  # since the driver loaded
    ecc_uncorrected_aggregate: int | None  # lifetime
    retired_pages_double_bit: int | None  # pre-Ampere page retirement
    retired_pages_pending: bool | None  # a retirement waits for a reset
    remapped_rows_uncorrectable: int | None  # Ampere and newer
    remap_pending: bool | None  # a remap waits for a reset
    remap_failed: bool | None  # a remap failed: the GPU should be drained
    throttle_reasons: tuple[str, ...]  # active thermal or power slowdowns, by NVML's names
    temperature_c: int | None
    slowdown_threshold_c: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    processes: tuple[GpuProcess, ...]  # compute processes only
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why it is unknown


@dataclass(frozen=True)
class NvmlHealth:
    status: str  # "ok" | "unavailable" (no driver or library: normal on CPU runners) | "error"
    reason: str | None
    gpus: tuple[GpuHealth, ...]


# --- the NVIDIA software around the GPUs ------------------------------------


@dataclass(frozen=True)
class MachineFacts:
    """What the diagnosis needs beyond the inventory: NVSwitches, the fabric manager, the driver's pieces."""

    nvswitches: tuple[str, ...]  # PCI addresses of NVSwitch bridges
    fabric_manager: ProcessRef | None  # the running nv-fabricmanager, if any
    nvidia_holders: dict[str, tuple[ProcessRef, ...]]  # /dev/nvidiaN -> processes with it open
    kernel_driver_version: str | None  # from /proc/driver/nvidia/version
    libcuda_versions: tuple[str, ...]  # user-space libcuda.so.<version> files found
    ld_library_cuda: dict[str, tuple[str, ...]]  # LD_LIBRARY_PATH directory -> CUDA libraries in it
