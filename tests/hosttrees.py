"""Fake machines as directory trees: the sysfs, /dev, /proc, /etc and /tmp entries discovery reads.

Each builder writes under a temporary directory and returns a `FakeHost`, whose
`.root` is the `HostRoot` to hand to discovery. Device nodes are empty files;
/proc/<pid>/fd/N are symlinks whose targets are host paths such as
"/dev/vfio/0" (dangling, as they would be seen from a container).

PCI functions come in three layouts (`layout=`): "flat" (a directory per
function under /sys/bus/pci/devices), "kernel" (the function lives under
/sys/devices/pci0000:00 and the bus entry is a relative link to it, as the
kernel makes it) and "absolute" (the same, with absolute links in the host's
own namespace). Discovery must give the same answers for all three.

`hostile_host` builds a tree that tries every way out: links out of the tree,
FIFOs where files are read, names and contents with terminal escapes.
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


LAYOUTS = ("flat", "kernel", "absolute")


@dataclass
class FakeHost:
    path: Path
    layout: str = "flat"

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

    def fifo(self, absolute: str) -> Path:
        """A FIFO where a file is expected: opening it for reading without O_NONBLOCK waits for a writer forever."""
        p = self.local(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.mkfifo(p)
        return p

    def escape_link(self, absolute: str, outside: Path, *, relative: bool = False) -> None:
        """A link at `absolute` to `outside`, a path on this machine outside the tree: absolute, or made of
        enough '..' to climb out of the tree first."""
        target = ("../" * 64 + str(outside).lstrip("/")) if relative else str(outside)
        self.symlink(absolute, target)

    def pci_dir(self, address: str) -> str:
        """The host path of the function's own sysfs directory in this tree's layout."""
        if self.layout == "flat":
            return f"/sys/bus/pci/devices/{address}"
        return f"/sys/devices/pci0000:00/{address}"

    def sysfs_link(self, absolute: str, target: str) -> None:
        """A sysfs link to the host path `target`: relative (as the kernel makes them) unless the layout is "absolute"."""
        if self.layout == "absolute":
            self.symlink(absolute, target)
        else:
            self.symlink(absolute, os.path.relpath(target, os.path.dirname(absolute)))

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
        base = self.pci_dir(address)
        if self.layout != "flat":
            self.sysfs_link(f"/sys/bus/pci/devices/{address}", base)
        self.file(f"{base}/vendor", vendor + "\n")
        self.file(f"{base}/device", device + "\n")
        self.file(f"{base}/numa_node", f"{numa_node}\n")
        if subsystem_device:
            self.file(f"{base}/subsystem_device", subsystem_device + "\n")
        if class_code:
            self.file(f"{base}/class", class_code + "\n")
        if iommu_group is not None:
            self.sysfs_link(f"{base}/iommu_group", f"/sys/kernel/iommu_groups/{iommu_group}")
        if driver:
            self.sysfs_link(f"{base}/driver", f"/sys/bus/pci/drivers/{driver}")

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
    layout: str = "flat",
) -> FakeHost:
    """A Linux host with no accelerators: memory, CPUs, OS, THP, NUMA, /dev/shm, and an init process."""
    host = FakeHost(tmp_path / "host", layout=layout)
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


def tpu_v4_host(tmp_path: Path, chips: int = 4, *, accel_class: bool = True, layout: str = "flat") -> FakeHost:
    """A TPU v4 VM: one PCI function per chip, /dev/accel0-3, /sys/class/accel links."""
    host = base_host(tmp_path, thp="always [madvise] never", layout=layout)
    for i in range(chips):
        address = f"0000:00:{4 + i:02x}.0"
        host.pci_function(address, GOOGLE, "0x005e", numa_node=0)
        host.dev(f"/dev/accel{i}")
        if not accel_class:
            continue
        if layout == "flat":
            host.symlink(f"/sys/class/accel/accel{i}/device", f"../../../{address}")
        else:
            # The kernel's shape: the class entry links to the accel directory under the PCI function,
            # whose `device` links back up to the function.
            accel_dir = f"{host.pci_dir(address)}/accel/accel{i}"
            host.sysfs_link(f"/sys/class/accel/accel{i}", accel_dir)
            host.sysfs_link(f"{accel_dir}/device", host.pci_dir(address))
    return host


def tpu_vfio_host(tmp_path: Path, device_id: str, chips: int, *, first_group: int = 5, layout: str = "flat") -> FakeHost:
    """A vfio TPU VM (v5e, v5p, v6e): iommu groups deliberately not equal to chip indexes."""
    host = base_host(tmp_path, layout=layout)
    host.dev("/dev/vfio/vfio")
    for i in range(chips):
        group = first_group + i
        host.pci_function(f"0000:00:{4 + i:02x}.0", GOOGLE, device_id, iommu_group=group, numa_node=i // 4)
        host.dev(f"/dev/vfio/{group}")
    return host


def tpu_v5e_host(tmp_path: Path, chips: int = 4, *, layout: str = "flat") -> FakeHost:
    return tpu_vfio_host(tmp_path, "0x0063", chips, layout=layout)


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


def nvidia_host(
    tmp_path: Path, gpus: int = 8, *, driver: str | None = "nvidia", nodes: bool = True, layout: str = "flat"
) -> FakeHost:
    """An 8-GPU HGX-like host: H100 PCI functions (class 0x030200), one NVSwitch, /dev/nvidia*."""
    host = base_host(tmp_path, layout=layout)
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


# --- a hostile tree -------------------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\r\u202e"  # retitle the terminal, clear it, colour, overwrite, reverse
OUTSIDE_DRIVER_VERSION = "31337.42.1"  # in a file outside the tree; must never be reported


def outside_files(tmp_path: Path, marker: str) -> Path:
    """A directory beside the tree, full of files a reader that leaves the tree would find and show.

    Every file carries `marker`, and its numbers (31337...) are shaped to pass the parsers, so whatever
    devctl reads from here shows up in its output.
    """
    out = tmp_path / "outside"
    out.mkdir(parents=True, exist_ok=True)
    (out / "secret").write_text(f"{marker}:$6$hash:19000:0:99999:7:::\n")
    (out / "hostname").write_text(f"{marker}\n")
    (out / "os-release").write_text(f'PRETTY_NAME="{marker}"\n')
    (out / "version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {OUTSIDE_DRIVER_VERSION}  {marker}\n")
    (out / "meminfo").write_text("MemTotal:       31337 kB\n")
    pci = out / "pci"
    for name, text in (("vendor", NVIDIA), ("device", "0x3133"), ("class", "0x030200"), ("numa_node", "7")):
        (pci / "0000:99:00.0").mkdir(parents=True, exist_ok=True)
        (pci / "0000:99:00.0" / name).write_text(text + "\n")
    proc = out / "proc" / "666"
    (proc / "fd").mkdir(parents=True, exist_ok=True)
    (proc / "cmdline").write_text(f"python\0{marker}\0")
    (proc / "status").write_text("Name:\tpython\nState:\tS\nUid:\t0\t0\t0\t0\n")
    os.symlink("/dev/vfio/5", proc / "fd" / "3")
    libs = out / "lib"
    libs.mkdir(exist_ok=True)
    (libs / f"libcuda.so.{OUTSIDE_DRIVER_VERSION}").write_text("")
    kfd = out / "kfd"
    kfd.mkdir(exist_ok=True)
    (kfd / "properties").write_text(AMD_GPU_PROPERTIES.format(simd=64, location=0x9900, minor=200))
    (kfd / "name").write_text(f"{marker}\n")
    banks = out / "mem_banks" / "0"
    banks.mkdir(parents=True, exist_ok=True)
    (banks / "properties").write_text(f"heap_type 1\nsize_in_bytes {31337 * GIB}\n")
    nodes = out / "node"
    for n in range(5, 8):
        (nodes / f"node{n}").mkdir(parents=True, exist_ok=True)
    return out


def hostile_host(tmp_path: Path, marker: str, *, layout: str = "kernel") -> FakeHost:
    """A host tree prepared to make a reader leave it, hang, or print escape sequences, around real devices
    (a TPU v5e chip held by a process, NVIDIA and AMD GPUs) so every reader has something to do.

    Links out of the tree are both absolute (to this machine's path of a file beside the tree) and relative
    (climbing out with '..'); each points at a file from `outside_files` carrying `marker`.
    """
    host = tpu_v5e_host(tmp_path, chips=2, layout=layout)
    out = outside_files(tmp_path, marker)

    # Links out of the tree where files and directories are read.
    host.escape_link("/proc/meminfo", out / "meminfo")
    host.escape_link("/etc/hostname", out / "hostname", relative=True)
    host.escape_link("/usr/lib/os-release", out / "os-release")
    host.remove("/etc/os-release")  # so the fallback (/usr/lib/os-release) is read too
    host.escape_link("/proc/driver/nvidia/version", out / "version", relative=True)
    host.escape_link("/usr/lib/x86_64-linux-gnu", out / "lib")
    host.escape_link("/sys/bus/pci/devices/0000:99:00.0", out / "pci" / "0000:99:00.0")
    host.remove("/sys/devices/system/node")
    host.escape_link("/sys/devices/system/node", out / "node", relative=True)
    host.remove("/dev/shm")
    host.escape_link("/dev/shm", out)
    host.escape_link("/dev/nvidia0", out / "secret")
    host.escape_link("/proc/666", out / "proc" / "666")  # its fd 3 holds /dev/vfio/5, its command is the marker
    host.process(669, ["python", "innocent.py"])
    host.remove("/proc/669/fd")
    host.escape_link("/proc/669/fd", out / "proc" / "666" / "fd", relative=True)

    # An NVIDIA GPU whose attribute and driver links leave the tree, one whose files are FIFOs, and a
    # directory whose name carries escapes.
    host.pci_function("0000:18:00.0", NVIDIA, "0x2330", class_code="0x030200", driver="nvidia")
    gpu = host.pci_dir("0000:18:00.0")
    host.escape_link(f"{gpu}/device", out / "secret")
    host.escape_link(f"{gpu}/driver", out / f"{marker}-driver")
    host.escape_link(f"{gpu}/numa_node", out / "secret", relative=True)
    host.pci_function("0000:1a:00.0", NVIDIA, "0x2330", class_code="0x030200")
    fifo_gpu = host.pci_dir("0000:1a:00.0")
    for name in ("class", "device", "numa_node"):
        host.fifo(f"{fifo_gpu}/{name}")
    host.escape_link(f"{fifo_gpu}/iommu_group", out / "31337", relative=True)
    host.pci_function("0000:1b:00.0", NVIDIA, "0x2330" + ESCAPES, class_code="0x030200" + ESCAPES)
    host.file(f"/sys/bus/pci/devices/0000:1c:00.0{ESCAPES}/vendor", NVIDIA + "\n")
    host.fifo("/sys/bus/pci/devices/0000:1d:00.0/vendor")
    host.fifo("/sys/class/accel")  # listed as a directory

    # The TPU's holder names itself with escapes; its other files, and the lockfile, are FIFOs.
    host.process(4242, ["python3", f"train.py{ESCAPES}"], fds={7: "/dev/vfio/5"})
    host.process(4343, ["worker"], fds={7: "/dev/vfio/6"})
    for name in ("cmdline", "comm", "status"):
        host.fifo(f"/proc/4343/{name}")
    host.process(4444, ["nothing"])
    host.remove("/proc/4444/fd")
    host.fifo("/proc/4444/fd")
    host.fifo("/tmp/libtpu_lockfile")
    host.fifo("/proc/locks")

    # Host files: FIFOs, escapes, and a sparse file far larger than any cap.
    host.fifo("/proc/cpuinfo")
    host.fifo("/sys/kernel/mm/transparent_hugepage/enabled")
    host.fifo("/proc/sys/kernel/osrelease")
    with open(host.file("/proc/sys/kernel/hostname", "bighost\n"), "r+b") as f:
        f.truncate(1 << 34)  # 16 GiB of hole: a reader without a cap would never finish

    # AMD: a GPU named with escapes, a node and a bank list that are links out, a properties FIFO.
    topo = "/sys/class/kfd/kfd/topology/nodes"
    host.file(f"{topo}/1/properties", AMD_GPU_PROPERTIES.format(simd=1216, location=0x1000, minor=128))
    host.file(f"{topo}/1/name", f"gfx942{ESCAPES}\n")
    host.escape_link(f"{topo}/1/mem_banks", out / "mem_banks")
    host.escape_link(f"{topo}/2", out / "kfd")
    host.fifo(f"{topo}/3/properties")
    host.dev("/dev/kfd")
    return host
