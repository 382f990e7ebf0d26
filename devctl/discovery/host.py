"""The host around the accelerators: CPU, memory, /dev/shm, NUMA, hugepages, OS, Python.

Memory and CPU come from the inspected root's /proc files rather than psutil,
so `--host-root` reports the host and not the container devctl runs in.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys

from devctl.hostroot import HostRoot
from devctl.model.hardware import HostInfo
from devctl.text import printable

THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"
# jax/_src/hardware_utils.py: transparent_hugepages_enabled() compares the whole line.
_THP_JAX_ENABLED = "[always] madvise never"


def host_info(root: HostRoot) -> HostInfo:
    unavailable: dict[str, str] = {}
    logical, physical, cpu_model = _cpu(root, unavailable)
    shm_total, shm_free = _shm(root, unavailable)
    thp_mode, thp_enabled = thp(root, unavailable)

    meminfo = _meminfo(root) or {}
    memory = {
        "memory_total_bytes": meminfo.get("MemTotal"),
        # MemAvailable appeared in Linux 3.14; older kernels only have MemFree.
        "memory_available_bytes": meminfo.get("MemAvailable"),
        "swap_total_bytes": meminfo.get("SwapTotal"),
        "swap_free_bytes": meminfo.get("SwapFree"),
    }
    for name, value in memory.items():
        if value is None:
            unavailable[name] = "not listed in /proc/meminfo" if meminfo else "/proc/meminfo is not readable"

    return HostInfo(
        hostname=_hostname(root, unavailable),
        cpu_model=cpu_model,
        logical_cores=logical,
        physical_cores=physical,
        usable_cores=_usable_cores(root, unavailable),
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        numa_nodes=numa_nodes(root),
        thp_mode=thp_mode,
        thp_enabled=thp_enabled,
        os_name=_os_name(root, unavailable),
        kernel=_kernel(root, unavailable),
        python_version=platform.python_version(),
        python_executable=sys.executable,
        unavailable=unavailable,
        **memory,
    )


def _meminfo(root: HostRoot) -> dict[str, int] | None:
    """/proc/meminfo in bytes. The kernel's "kB" means KiB."""
    text = root.read_text("/proc/meminfo")
    if text is None:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?\s*$", line)
        if m:
            value = int(m.group(2))
            out[m.group(1)] = value * 1024 if line.rstrip().endswith("kB") else value
    return out


def _cpu(root: HostRoot, unavailable: dict[str, str]) -> tuple[int | None, int | None, str | None]:
    text = root.read_text("/proc/cpuinfo", limit=1 << 22)
    if text is None:
        for name in ("logical_cores", "physical_cores", "cpu_model"):
            unavailable[name] = "/proc/cpuinfo is not readable"
        logical = os.cpu_count() if root.is_real else None
        return logical, None, None

    logical = 0
    cores: set[tuple[str, str]] = set()
    model: str | None = None
    physical_id = "0"
    for block in re.split(r"\n\s*\n", text):
        fields = _colon_fields(block)
        if "processor" not in fields:
            continue
        logical += 1
        # x86 names the model; Raspberry Pi kernels say "Model"; other ARM kernels neither.
        model = model or fields.get("model name") or fields.get("Model")
        physical_id = fields.get("physical id", physical_id)
        if "core id" in fields:
            cores.add((physical_id, fields["core id"]))

    model = printable(model) if model else None
    if model is None:
        unavailable["cpu_model"] = "no model name in /proc/cpuinfo (ARM kernels often omit it)"
    physical = len(cores) or None
    if physical is None:
        unavailable["physical_cores"] = "no core ids in /proc/cpuinfo"
    if logical == 0:
        unavailable["logical_cores"] = "no processor entries in /proc/cpuinfo"
    return logical or None, physical, model


def _colon_fields(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _usable_cores(root: HostRoot, unavailable: dict[str, str]) -> int | None:
    if not root.is_real:
        unavailable["usable_cores"] = "CPU affinity is known only for this machine, not a host root"
        return None
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        unavailable["usable_cores"] = "sched_getaffinity is not available on this platform"
        return None


def _shm(root: HostRoot, unavailable: dict[str, str]) -> tuple[int | None, int | None]:
    # Docker's default /dev/shm is 64 MiB; RCCL and NCCL exhaust it with several GPUs.
    local = root.local("/dev/shm")
    if local is not None:
        try:
            st = os.statvfs(local)  # a statfs, never an open: /dev/shm may hold anything
            return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError as e:
            reason = f"/dev/shm: {e.strerror or e}"
    else:
        reason = "/dev/shm: no such directory"
    unavailable["shm_total_bytes"] = unavailable["shm_free_bytes"] = reason
    return None, None


def thp(root: HostRoot, unavailable: dict[str, str] | None = None) -> tuple[str | None, bool | None]:
    """(mode, enabled by JAX's rule) for transparent hugepages."""
    text = root.read_text(THP_PATH)
    if text is None:
        if unavailable is not None:
            unavailable["thp_mode"] = unavailable["thp_enabled"] = f"{THP_PATH} is absent (kernel without THP)"
        return None, None
    m = re.search(r"\[(\w+)\]", text)
    return (m.group(1) if m else None), text == _THP_JAX_ENABLED


def numa_nodes(root: HostRoot) -> tuple[int, ...]:
    ids = [int(name[4:]) for name in root.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", name)]
    return tuple(sorted(ids))


def _hostname(root: HostRoot, unavailable: dict[str, str]) -> str | None:
    if root.is_real:
        return socket.gethostname()
    # /proc/sys/kernel/hostname shows the reader's UTS namespace, so prefer the host's file.
    for path in ("/etc/hostname", "/proc/sys/kernel/hostname"):
        text = root.read_text(path, limit=4096)
        if text:
            return printable(text.splitlines()[0].strip())
    unavailable["hostname"] = "no /etc/hostname under the host root"
    return None


def _os_name(root: HostRoot, unavailable: dict[str, str]) -> str | None:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        text = root.read_text(path)
        if text is None:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "PRETTY_NAME":
                return printable(value.strip().strip("\"'"))
    unavailable["os_name"] = "no PRETTY_NAME in /etc/os-release"
    return None


def _kernel(root: HostRoot, unavailable: dict[str, str]) -> str | None:
    if root.is_real:
        return platform.release()
    text = root.read_text("/proc/sys/kernel/osrelease", limit=4096)
    if text:
        return printable(text.splitlines()[0])
    unavailable["kernel"] = "no /proc/sys/kernel/osrelease under the host root"
    return None


def host_memory_limit() -> tuple[int | None, str]:
    """The most memory this process may ever use, and what sets it: RAM, or a smaller cgroup limit."""
    from devctl.safefs import read_regular

    limit, what = None, "this machine's memory"
    try:
        limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        pass
    # A container's limit (cgroup v2, then v1); 'max' or a huge number means none.
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = read_regular(path, 64).decode("ascii", "replace").strip()
        except OSError:
            continue
        if text.isdigit() and (limit is None or int(text) < limit):
            limit, what = int(text), "this container's memory limit"
        break
    return limit, what
