"""Assemble `devctl memstats`: one probe for the allocator view, then cheap samples of NVML, publishers and the host.

The first snapshot initializes JAX in a child (what a new process would get:
`bytes_limit`); later samples in `--watch` reread only NVML, the publishers'
snapshot files and /proc, so a refresh costs milliseconds.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Literal

from devctl.collect.tpu_runtime import TensorCoreWatch, runtime_metrics, with_runtime, with_tensorcore_util
from devctl.errors import InputRejected
from devctl.hostroot import HostRoot
from devctl.model.devices import PHYSICAL_VIEWS, DeviceRef
from devctl.model.memstats import (
    SCHEMA,
    ChipHolder,
    DriverMemory,
    HostMemory,
    Leak,
    MemDevice,
    MemProcess,
    MemSnapshot,
    headroom,
    job_headroom_bytes,
    usable_memory,
)

if TYPE_CHECKING:
    from devctl.collect.leaks import LeakWatch
    from devctl.discovery.gpm import BusyReader
    from devctl.model.hardware import TpuReport
    from devctl.probe.backends import BackendsProbe


class MemstatsSampler:
    def __init__(
        self, *, device_filter: tuple[DeviceRef, ...] | None, timeout_s: float, host_root: str = "/", publisher_dir: str | None = None
    ):
        self.filter = device_filter  # None or (): every device
        self.all_keys: list[str] = []
        self.accelerators = False  # a bare --device id means the accelerator's device when JAX has one
        self.timeout_s = timeout_s
        self.root = HostRoot(host_root)
        self.publisher_dir = publisher_dir
        self.probe: BackendsProbe | None = None  # set by first(), or by `devctl memstats --distributed` per process
        self.tpu: TpuReport | None = None
        # The publishing jobs of the last sample (pid -> command): one that is gone from the next is said once.
        self.jobs: dict[int, str] = {}
        self.stopped: dict[int, str] = {}  # jobs said to have stopped publishing while alive: their exit is said too
        self.leak_watch: LeakWatch | None = None  # --watch: jobs whose arrays only grow
        self.busy: BusyReader | None = None  # each GPU's busy-ness; --watch keeps it (and its GPM samples) across samples
        self.tensorcore = TensorCoreWatch()  # libtpu.sdk's TensorCore utilization, from a child

    def first(self) -> MemSnapshot:
        """The full snapshot: probe JAX once, then everything else."""
        from devctl.discovery import tpu
        from devctl.discovery.publishers import read_publishers
        from devctl.probe.backends import probe_backends

        # A snapshot directory the user named that is unsafe (a link, not private) is bad input: fail before probing.
        read_publishers(self.publisher_dir, remove_stale=False)
        self.tpu = tpu.tpu_info(self.root)
        held = tpu.held_reason(self.tpu)
        self.probe = probe_backends(timeout_s=self.timeout_s, hold_off={"tpu": held} if held else None)
        snapshot = self.sample()
        self._check_filter(snapshot)
        return snapshot

    def sample(self) -> MemSnapshot:
        from devctl.discovery.host import host_info
        from devctl.discovery.nvml import nvml_report
        from devctl.discovery.pci import normalize_pci_bus_id
        from devctl.discovery.publishers import read_publishers

        problems: list[str] = []
        notes: list[str] = []
        self.tensorcore.start(self.tpu)  # a child that runs while the rest is read
        nvml = nvml_report(processes=True) if self.root.is_real else None
        if nvml is not None and nvml.status == "error":
            problems.append(f"NVML: {nvml.reason}")
        try:
            publishers = read_publishers(self.publisher_dir)
        except InputRejected as e:  # the directory changed hands under a running watch
            problems.append(str(e))
            publishers = None
        assert self.probe is not None, "sample() before first()"
        machine = MachineKeys(self.probe.devices)
        jobs = _jobs_by_device(publishers, machine)
        gpus = {normalize_pci_bus_id(g.pci_bus_id): g for g in (nvml.gpus if nvml else ()) if g.pci_bus_id}
        devices: list[MemDevice] = []
        key_of_gpu: dict[int, str] = {}
        for d in self.probe.devices:
            key = f"{d.platform}:{d.id}"
            bus_id = d.attributes.get("pci_bus_id")
            gpu = gpus.pop(normalize_pci_bus_id(bus_id), None) if bus_id else None
            if gpu is not None:
                key_of_gpu[gpu.index] = key
            devices.append(_jax_device(key, d, gpu, jobs.get(key, [])))
        for gpu in gpus.values():
            key_of_gpu[gpu.index] = f"nvml:{gpu.index}"
            devices.append(_nvml_device(gpu))
        for chip in self.tpu.chips if self.tpu else ():
            devices.append(_tpu_chip(chip))
        for g in nvml.gpus if nvml else ():
            if g.unavailable.get("memory_total_bytes"):
                problems.append(f"GPU {g.index}: {g.unavailable['memory_total_bytes']}")

        if nvml is not None and nvml.gpus:
            devices = self._with_busy(devices, problems)
        free = {d.key: d.driver.get("free_bytes") for d in devices if d.driver}
        processes = _processes(nvml, key_of_gpu, publishers, self.tpu, free, machine)
        runtime = runtime_metrics(self.root, self.tpu)  # libtpu's own figures, from each holder of a chip
        with_tensorcore_util(runtime, self.tensorcore.latest(), self.tpu)
        devices, processes = with_runtime(devices, processes, runtime)
        notes += runtime.notes
        problems += runtime.problems
        if nvml is not None and any(not p.pid_visible for p in nvml.processes):
            notes.append("NVML reports pids of the host's pid namespace; pids not visible here (a container) have no user or command")
        for problem in publishers.problems if publishers else ():
            problems.append(f"{problem.path}: {problem.reason}")
        if publishers is not None:
            problems += self._jobs_gone(publishers.publishers)

        self.all_keys = [d.key for d in devices]
        self.accelerators = any(d.source == "jax" and d.platform != "cpu" for d in devices)
        if self.filter:
            devices = [d for d in devices if _matches(d, self.filter, self.accelerators)]
            keys = {d.key for d in devices}
            processes = [p for p in processes if p.device in keys]
        host = host_info(self.root)
        leaks: list[Leak] = self.leak_watch.update(publishers.publishers) if self.leak_watch is not None and publishers is not None else []
        return MemSnapshot(
            schema=SCHEMA,
            timestamp=time.time(),
            hostname=socket.gethostname(),
            devices=devices,
            processes=processes,
            publishers=list(publishers.publishers) if publishers else [],
            headroom=headroom(devices, processes),
            host=_host_memory(host),
            problems=problems,
            notes=notes,
            leaks=leaks,
            tpu_runtime=runtime.sources,
        )

    def _with_busy(self, devices: list[MemDevice], problems: list[str]) -> list[MemDevice]:
        """Each NVIDIA GPU's busy-ness: GPM over a window where the GPU has it, else NVML's utilization."""
        import dataclasses

        from devctl.discovery.gpm import BusyReader

        if self.busy is None:
            self.busy = BusyReader()
        busy, reason = self.busy.read()
        if reason is not None:
            problems.append(f"NVML (busy-ness): {reason}")
        return [dataclasses.replace(d, busy=busy.get(d.driver["index"])) if d.driver else d for d in devices]

    def _jobs_gone(self, publishers) -> list[str]:
        """A job that published in the last sample and not in this one: exited (its snapshot was removed), or
        alive with a snapshot too old to show. Said once, in the sample where it goes; a job said to have stopped
        while alive is said to have exited too, in the sample that finds it gone."""
        from devctl.discovery.procs import pid_alive
        from devctl.text import program_name

        now = {p.pid: program_name(p.command) for p in publishers}
        gone = []
        for pid, command in self.jobs.items():
            if pid not in now:
                alive = pid_alive(HostRoot("/"), pid)
                what = "stopped publishing (its last snapshot is stale)" if alive else "exited"
                gone.append(f"job {pid} ({command}) {what}")
                if alive:  # often a job caught between removing its snapshot and its exit: its exit is said when seen
                    self.stopped[pid] = command
        for pid, command in list(self.stopped.items()):
            if pid in now:
                del self.stopped[pid]
            elif pid not in self.jobs and not pid_alive(HostRoot("/"), pid):
                gone.append(f"job {pid} ({command}) exited")
                del self.stopped[pid]
        self.jobs = now
        return gone

    def _check_filter(self, snapshot: MemSnapshot) -> None:
        """A --device naming no device here is bad input only this machine can tell."""
        for wanted in self.filter or ():
            if not any(_matches_one(d, wanted, self.accelerators) for d in snapshot.devices):
                raise InputRejected(f"--device {str(wanted)!r} matches no device; devices here: {', '.join(self.all_keys) or 'none'}")


def _matches(d: MemDevice, wanted: tuple[DeviceRef, ...], accelerators: bool) -> bool:
    return any(_matches_one(d, w, accelerators) for w in wanted)


def _matches_one(d: MemDevice, wanted: DeviceRef, accelerators: bool) -> bool:
    """`platform:N` names the device keyed so (cuda:1 and rocm:1 name JAX's gpu:1); a bare id names a JAX
    device, the accelerator's when there is one, never a chip or GPU JAX does not use (tpu-chip:N, nvml:N)."""
    key_platform, _, ident = d.key.partition(":")
    if not (ident.isascii() and ident.isdigit()):
        return False
    if wanted.platform is None and (key_platform in PHYSICAL_VIEWS or (accelerators and d.platform == "cpu")):
        return False
    return wanted.names(int(ident), key_platform)


def _stat(stats: dict | None, name: str) -> int | None:
    value = (stats or {}).get(name)
    return value if isinstance(value, int) and value >= 0 else None


class MachineKeys:
    """The key of this machine's device a job's device is: by PCI bus id where the job said it (each job's JAX
    numbers its devices from 0 under its own CUDA_VISIBLE_DEVICES, and a multi-host job's local GPUs are
    gpu:8-15), else by its own platform:id, which is right when the job sees the devices as devctl does."""

    def __init__(self, devices) -> None:
        from devctl.discovery.pci import normalize_pci_bus_id

        self._normalize = normalize_pci_bus_id
        self._by_bus = {
            normalize_pci_bus_id(bus): f"{d.platform}:{d.id}" for d in devices if (bus := d.attributes.get("pci_bus_id"))
        }

    def key(self, d) -> str:
        bus = getattr(d, "pci_bus_id", None)
        found = self._by_bus.get(self._normalize(bus)) if bus else None
        return found or f"{d.platform}:{d.id}"


def _jobs_by_device(publishers, machine: MachineKeys) -> dict[str, list]:
    """The publishing jobs' records of each device, by this machine's device key."""
    out: dict[str, list] = {}
    for pub in publishers.publishers if publishers else ():
        for d in pub.devices:
            out.setdefault(machine.key(d), []).append(d)
    return out


def _held_by_jobs(jobs: list) -> tuple[int | None, int | None]:
    """(in use, peak) the publishing jobs hold on one device: their allocators' bytes_in_use and peaks, or their
    live arrays where the backend keeps no statistics (CPU); (None, None) without a job."""
    if not jobs:
        return None, None
    in_use = 0
    for j in jobs:
        held = _stat(j.memory_stats, "bytes_in_use")
        in_use += held if held is not None else j.live_bytes
    peaks = [p for j in jobs if (p := _stat(j.memory_stats, "peak_bytes_in_use")) is not None]
    return in_use, sum(peaks) if peaks else None


def _driver(gpu) -> DriverMemory:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "total_bytes": gpu.memory_total_bytes,
        "used_bytes": gpu.memory_used_bytes,
        "free_bytes": gpu.memory_free_bytes,
    }


def _jax_device(key: str, d, gpu, jobs: list) -> MemDevice:
    stats = d.memory_stats
    limit = _stat(stats, "bytes_limit")
    driver = _driver(gpu) if gpu else None
    usable, bound = usable_memory(limit, driver["free_bytes"] if driver else None)
    in_use, peak = _held_by_jobs(jobs)
    source: Literal["jobs", "driver"] | None = "jobs" if jobs else None
    if in_use is None and driver and driver["used_bytes"] is not None:
        in_use, source = driver["used_bytes"], "driver"
    return MemDevice(
        key=key, source="jax", platform=d.platform, id=d.id, device_kind=d.device_kind,
        memory_stats=stats, bytes_limit=limit, usable_bytes=usable, usable_bound=bound,
        in_use_bytes=in_use, in_use_source=source, peak_bytes_in_use=peak, driver=driver, hbm_bytes=None,
        status="ok" if stats is not None else "no allocator stats",
    )  # fmt: skip


def _nvml_device(gpu) -> MemDevice:
    driver = _driver(gpu)
    return MemDevice(
        key=f"nvml:{gpu.index}", source="nvml", platform="nvidia", id=None, device_kind=gpu.name or "NVIDIA GPU",
        memory_stats=None, bytes_limit=None, usable_bytes=None, usable_bound=None,
        in_use_bytes=driver["used_bytes"], in_use_source="driver" if driver["used_bytes"] is not None else None,
        peak_bytes_in_use=None, driver=driver, hbm_bytes=None,
        status="not used by JAX here (see devctl list)" if not gpu.unavailable.get("memory_total_bytes") else gpu.unavailable["memory_total_bytes"],
    )  # fmt: skip


def _tpu_chip(chip) -> MemDevice:
    holders: list[ChipHolder] = [{"pid": p.pid, "user": p.user, "command": p.command} for p in chip.holders]
    return MemDevice(
        key=f"tpu-chip:{chip.index}", source="tpu-pci", platform="tpu", id=None, device_kind=f"TPU {chip.version}",
        memory_stats=None, bytes_limit=None, usable_bytes=None, usable_bound=None, in_use_bytes=None, in_use_source=None,
        peak_bytes_in_use=None, driver=None, hbm_bytes=chip.hbm_bytes, holders=holders, status="held" if holders else "free",
    )  # fmt: skip


def _processes(nvml, key_of_gpu: dict[int, str], publishers, tpu, free: dict[str, int | None], machine: MachineKeys) -> list[MemProcess]:
    out: list[MemProcess] = []
    for p in nvml.processes if nvml else ():
        out.append(
            MemProcess(
                pid=p.pid, source="nvml", user=p.user, command=p.command, device=key_of_gpu.get(p.gpu_index, f"nvml:{p.gpu_index}"),
                used_bytes=p.used_memory_bytes, pid_visible=p.pid_visible,
            )
        )  # fmt: skip
    for pub in publishers.publishers if publishers else ():
        command = " ".join(pub.command)
        for d in pub.devices:
            key = machine.key(d)
            out.append(
                MemProcess(
                    pid=pub.pid, source="publisher", user=None, command=command, device=key,
                    used_bytes=d.live_bytes, memory_stats=d.memory_stats, live_arrays=d.live_arrays,
                    headroom_bytes=job_headroom_bytes(d.memory_stats, free.get(key)),
                )
            )  # fmt: skip
    for chip in tpu.chips if tpu else ():
        for h in chip.holders:
            out.append(MemProcess(pid=h.pid, source="tpu", user=h.user, command=h.command, device=f"tpu-chip:{chip.index}", used_bytes=None))
    return out


def _host_memory(h) -> HostMemory:
    used = h.memory_total_bytes - h.memory_available_bytes if h.memory_total_bytes is not None and h.memory_available_bytes is not None else None
    swap_used = h.swap_total_bytes - h.swap_free_bytes if h.swap_total_bytes is not None and h.swap_free_bytes is not None else None
    shm_used = h.shm_total_bytes - h.shm_free_bytes if h.shm_total_bytes is not None and h.shm_free_bytes is not None else None
    return HostMemory(h.memory_total_bytes, h.memory_available_bytes, used, h.swap_total_bytes, swap_used, h.shm_total_bytes, shm_used)
