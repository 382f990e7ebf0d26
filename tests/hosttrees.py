"""Fake machines as directory trees: the sysfs, /dev, /proc, /etc and /tmp entries discovery reads.

Each builder writes under a temporary directory and returns a `FakeHost`, whose
`.root` is the `HostRoot` to hand to discovery. Device nodes are empty files;
/proc/<pid>/fd/N are symlinks whose targets are host paths such as
"/dev/vfio/0" (dangling, as they would be seen from a container).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from devctl.hostroot import HostRoot

GIB = 1 << 30

MEMINFO = """\
MemTotal:       16384000 kB
MemFree:         1024000 kB
MemAvailable:    8192000 kB
Buffers:          102400 kB
Active(anon):     204800 kB
SwapTotal:       2097152 kB
SwapFree:        1048576 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def cpuinfo(sockets: int = 2, cores: int = 2, threads: int = 2, model: str | None = "Fake CPU @ 2.50GHz") -> str:
    blocks = []
    n = 0
    for socket in range(sockets):
        for thread in range(threads):
            for core in range(cores):
                lines = [f"processor\t: {n}", "vendor_id\t: GenuineIntel"]
                if model:
                    lines.append(f"model name\t: {model}")
                lines += [f"physical id\t: {socket}", f"siblings\t: {cores * threads}", f"core id\t\t: {core}"]
                blocks.append("\n".join(lines))
                n += 1
    return "\n\n".join(blocks) + "\n\n"


@dataclass
class FakeHost:
    path: Path

    @property
    def root(self) -> HostRoot:
        return HostRoot(str(self.path))

    def local(self, absolute: str) -> Path:
        return self.path / absolute.lstrip("/")

    # --- primitives ---
    def file(self, absolute: str, text: str = "") -> Path:
        p = self.local(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    def symlink(self, absolute: str, target: str) -> None:
        p = self.local(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(target, p)

    def dev(self, *absolutes: str) -> None:
        for a in absolutes:
            self.file(a)

    def remove(self, absolute: str) -> None:
        p = self.local(absolute)
        if p.is_dir() and not p.is_symlink():
            import shutil

            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()

    # --- sysfs PCI ---
    def pci_function(
        self,
        address: str,
        vendor: str,
        device: str,
        *,
        subsystem_device: str | None = None,
        class_code: str | None = None,
        iommu_group: int | None = None,
        numa_node: int = -1,
        driver: str | None = None,
    ) -> None:
        base = f"/sys/bus/pci/devices/{address}"
        self.file(f"{base}/vendor", vendor + "\n")
        self.file(f"{base}/device", device + "\n")
        self.file(f"{base}/numa_node", f"{numa_node}\n")
        if subsystem_device:
            self.file(f"{base}/subsystem_device", subsystem_device + "\n")
        if class_code:
            self.file(f"{base}/class", class_code + "\n")
        if iommu_group is not None:
            self.symlink(f"{base}/iommu_group", f"../../../../kernel/iommu_groups/{iommu_group}")
        if driver:
            self.symlink(f"{base}/driver", f"../../../../bus/pci/drivers/{driver}")

    # --- /proc ---
    def process(
        self,
        pid: int,
        cmdline: list[str] | None,
        *,
        uid: int = 1000,
        comm: str | None = None,
        fds: dict[int, str] | None = None,
        state: str = "S (sleeping)",
        fds_readable: bool = True,
    ) -> None:
        base = f"/proc/{pid}"
        comm = comm or (os.path.basename(cmdline[0]) if cmdline else "kworker")
        self.file(f"{base}/cmdline", "\0".join(cmdline or []) + ("\0" if cmdline else ""))
        self.file(f"{base}/comm", comm[:15] + "\n")
        self.file(
            f"{base}/status",
            f"Name:\t{comm[:15]}\nState:\t{state}\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n",
        )
        if not fds_readable:
            # Tests run as root, where chmod cannot hide a directory; a plain file makes listing
            # fail with an OSError just as another user's fd directory does without root.
            self.file(f"{base}/fd", "")
            return
        self.local(f"{base}/fd").mkdir(parents=True, exist_ok=True)
        for fd, target in (fds or {}).items():
            self.symlink(f"{base}/fd/{fd}", target)

    def lockfile(self, content: str = "") -> Path:
        return self.file("/tmp/libtpu_lockfile", content)

    def proc_lock(self, pid: int, absolute: str, kind: str = "FLOCK") -> None:
        """A /proc/locks line for `absolute`, keyed by its real device and inode as the kernel prints them."""
        st = os.stat(self.local(absolute))
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        existing = self.local("/proc/locks").read_text() if self.local("/proc/locks").exists() else ""
        n = existing.count("\n") + 1
        self.file("/proc/locks", existing + f"{n}: {kind}  ADVISORY  WRITE {pid} {key} 0 EOF\n")


def base_host(
    tmp_path: Path,
    *,
    thp: str | None = "[always] madvise never",
    numa_nodes: int = 2,
    shm: bool = True,
    cpu_model: str | None = "Fake CPU @ 2.50GHz",
) -> FakeHost:
    """A Linux host with no accelerators: memory, CPUs, OS, THP, NUMA, /dev/shm, and an init process."""
    host = FakeHost(tmp_path / "host")
    host.path.mkdir(parents=True, exist_ok=True)
    host.file("/proc/meminfo", MEMINFO)
    host.file("/proc/cpuinfo", cpuinfo(model=cpu_model))
    host.file("/proc/sys/kernel/osrelease", "6.1.0-fake-amd64\n")
    host.file("/etc/hostname", "fakehost\n")
    host.file("/etc/os-release", 'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    if thp is not None:
        host.file("/sys/kernel/mm/transparent_hugepage/enabled", thp + "\n")
    for n in range(numa_nodes):
        host.file(f"/sys/devices/system/node/node{n}/cpulist", "0-3\n")
    host.file("/sys/devices/system/node/online", f"0-{max(numa_nodes - 1, 0)}\n")
    host.local("/sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    host.local("/tmp").mkdir(parents=True, exist_ok=True)
    if shm:
        host.local("/dev/shm").mkdir(parents=True, exist_ok=True)
    host.process(1, ["/sbin/init"], uid=0)
    return host


# --- TPU hosts ------------------------------------------------------------

GOOGLE = "0x1ae0"


def tpu_v4_host(tmp_path: Path, chips: int = 4, *, accel_class: bool = True) -> FakeHost:
    """A TPU v4 VM: one PCI function per chip, /dev/accel0-3, /sys/class/accel links."""
    host = base_host(tmp_path, thp="always [madvise] never")
    for i in range(chips):
        address = f"0000:00:{4 + i:02x}.0"
        host.pci_function(address, GOOGLE, "0x005e", numa_node=0)
        host.dev(f"/dev/accel{i}")
        if accel_class:
            host.symlink(f"/sys/class/accel/accel{i}/device", f"../../../{address}")
    return host


def tpu_vfio_host(tmp_path: Path, device_id: str, chips: int, *, first_group: int = 5) -> FakeHost:
    """A vfio TPU VM (v5e, v5p, v6e): iommu groups deliberately not equal to chip indexes."""
    host = base_host(tmp_path)
    host.dev("/dev/vfio/vfio")
    for i in range(chips):
        group = first_group + i
        host.pci_function(f"0000:00:{4 + i:02x}.0", GOOGLE, device_id, iommu_group=group, numa_node=i // 4)
        host.dev(f"/dev/vfio/{group}")
    return host


def tpu_v5e_host(tmp_path: Path, chips: int = 4) -> FakeHost:
    return tpu_vfio_host(tmp_path, "0x0063", chips)


def tpu_v6e_host(tmp_path: Path, chips: int = 8) -> FakeHost:
    return tpu_vfio_host(tmp_path, "0x006f", chips)


def tpu_v2v3_host(tmp_path: Path, version: str = "v3", chips: int = 4) -> FakeHost:
    """A TPU v2 or v3 host: device 0x0027, two PCI functions per chip, told apart by subsystem_device."""
    subsystem = {"v2": "0x004e", "v3": "0x004f", "unknown": "0x0099"}[version]
    host = base_host(tmp_path)
    for i in range(chips):
        for function in (0, 1):
            host.pci_function(f"0000:00:{4 + i:02x}.{function}", GOOGLE, "0x0027", subsystem_device=subsystem)
        host.dev(f"/dev/accel{i}")
    return host


# --- GPU hosts ------------------------------------------------------------

NVIDIA = "0x10de"
NVIDIA_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def nvidia_host(tmp_path: Path, gpus: int = 8, *, driver: str | None = "nvidia", nodes: bool = True) -> FakeHost:
    """An 8-GPU HGX-like host: H100 PCI functions (class 0x030200), one NVSwitch, /dev/nvidia*."""
    host = base_host(tmp_path)
    for i in range(gpus):
        host.pci_function(
            f"0000:{NVIDIA_BUSES[i]:02x}:00.0", NVIDIA, "0x2330", class_code="0x030200", numa_node=i // 4, driver=driver
        )
        if nodes:
            host.dev(f"/dev/nvidia{i}")
    # An NVSwitch is an NVIDIA bridge, not a GPU (class 0x068000).
    host.pci_function("0000:05:00.0", NVIDIA, "0x22a3", class_code="0x068000", driver=driver)
    if nodes:
        host.dev("/dev/nvidiactl", "/dev/nvidia-uvm")
    return host


AMD_GPU_PROPERTIES = """\
cpu_cores_count 0
simd_count {simd}
mem_banks_count 1
gfx_target_version 90402
vendor_id 4098
device_id 29857
location_id {location}
domain 0
drm_render_minor {minor}
local_mem_size 0
"""


def amd_host(tmp_path: Path, gpus: int = 2, *, kfd: bool = True, oversized_node: bool = False) -> FakeHost:
    """An MI300-like host: KFD node 0 is the CPU (simd_count 0), nodes 1..N are GPUs."""
    host = base_host(tmp_path)
    topo = "/sys/class/kfd/kfd/topology/nodes"
    host.file(f"{topo}/0/properties", "cpu_cores_count 64\nsimd_count 0\nmem_banks_count 1\nvendor_id 0\n")
    host.file(f"{topo}/0/name", "\n")
    for i in range(1, gpus + 1):
        minor = 120 + 8 * i
        location = (0x10 * i) << 8  # bus 0x10*i, device 0, function 0
        host.file(f"{topo}/{i}/properties", AMD_GPU_PROPERTIES.format(simd=1216, location=location, minor=minor))
        host.file(f"{topo}/{i}/name", "gfx942\n")
        host.file(f"{topo}/{i}/mem_banks/0/properties", f"heap_type 1\nsize_in_bytes {192 * GIB}\nflags 0\n")
        host.dev(f"/dev/dri/renderD{minor}")
    if oversized_node:
        # JAX skips properties files over 16 KB; so does discovery.
        host.file(f"{topo}/{gpus + 1}/properties", "simd_count 64\n" + "x 1\n" * 5000)
    if kfd:
        host.dev("/dev/kfd")
    return host
