"""TPU chips from sysfs, their device nodes and owners, the libtpu lockfile, and TPU settings.

Nothing here loads libtpu: initializing it creates /tmp/libtpu_lockfile and can
make a real job fail with "TPU is already in use" (jax-internals.md §6.6).
Chip ids follow jax/_src/hardware_utils.py; paths and facts follow tpu-info's
device.py (jax-internals.md §4.2-4.3).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from devctl.discovery.pci import (
    PCI_DEVICES,
    hex_id,
    link_name,
    linked_pci_address,
    numa_node,
    pci_addresses,
)
from devctl.discovery.procs import pid_alive, process_ref, scan_holders
from devctl.hostroot import HostRoot
from devctl.model.hardware import (
    HolderScan,
    ProcessRef,
    TpuChip,
    TpuLockfile,
    TpuReport,
)
from devctl.privilege import as_root, why_uninspectable

GOOGLE_PCI_VENDOR_ID = "0x1ae0"
LOCKFILE = "/tmp/libtpu_lockfile"
_GIB = 1 << 30

# PCI device id -> version. 0x0027 is v2 or v3; its subsystem_device tells them apart.
TPU_PCI_DEVICE_IDS: dict[str, str] = {
    "0x0027": "v3",
    "0x0056": "plc",  # "No public name" in JAX
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5e",
    "0x006f": "v6e",
    "0x0076": "tpu7x",
    "0x0083": "tpu8i",  # JAX 0.12.0 and later
    "0x007c": "tpu8t",  # JAX 0.12.0 and later
}
_V2_V3_SUBSYSTEM = {"0x004e": "v2", "0x004f": "v3"}


@dataclass(frozen=True)
class _ChipFacts:
    hbm_gib: int | None
    devices_per_chip: int | None
    uses_vfio: bool | None  # None: tpu-info has no rule for this chip


# tpu-info's TpuChip enum; it has no plc or tpu8 entries.
CHIP_FACTS: dict[str, _ChipFacts] = {
    "v2": _ChipFacts(8, 2, False),
    "v3": _ChipFacts(16, 2, False),
    "plc": _ChipFacts(None, None, None),
    "v4": _ChipFacts(32, 1, False),
    "v5e": _ChipFacts(16, 1, True),
    "v5p": _ChipFacts(95, 1, True),
    "v6e": _ChipFacts(32, 1, True),
    "tpu7x": _ChipFacts(192, 2, True),
    "tpu8i": _ChipFacts(None, None, None),
    "tpu8t": _ChipFacts(None, None, None),
}

# Variables that change what libtpu or JAX's TPU setup does (jax-internals.md §2).
TPU_ENV_VARS = (
    "TPU_LIBRARY_PATH",
    "JAX_FORCE_TPU_INIT",
    "TPU_SKIP_MDS_QUERY",
    "LIBTPU_INIT_ARGS",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
    "TPU_VISIBLE_CHIPS",
    "TPU_VISIBLE_DEVICES",
    "TPU_VISIBLE_DEVICE_PATHS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    "TPU_HOST_BOUNDS",
    "TPU_ACCELERATOR_TYPE",
    "CLOUD_TPU_ACCELERATOR_TYPE",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_PROCESS_ADDRESSES",
    "TPU_PROCESS_ADDRESSES_PATH",
    "TPU_PROCESS_PORT",
    "TPU_ML_PLATFORM",
    "TPU_ML_PLATFORM_VERSION",
    "TPU_MIN_LOG_LEVEL",
    "TPU_STDERR_LOG_LEVEL",
    "TPU_LOG_DIR",
    "TPU_RUNTIME_METRICS_PORTS",
)
_TPU_ENV_PREFIXES = ("TPU_", "LIBTPU", "CLOUD_TPU")

# tpu-info's owner scan pattern, plus the lockfile, so one /proc pass answers both.
_HELD_RE = re.compile(r"/dev/(?:accel|vfio/)\d+|" + re.escape(LOCKFILE))


@dataclass(frozen=True)
class _Function:
    address: str
    device_id: str
    subsystem_device: str | None
    iommu_group: str | None
    numa_node: int | None


def tpu_info(root: HostRoot, environ: Mapping[str, str] | None = None) -> TpuReport:
    environ = os.environ if environ is None else environ
    unavailable: dict[str, str] = {}
    if not root.exists(PCI_DEVICES):
        unavailable["chips"] = f"no {PCI_DEVICES} (sysfs not mounted, or not Linux)"
    functions = _tpu_pci_functions(root)
    chip_groups = _group_by_chip(functions)
    accel_by_address = _accel_nodes_by_pci(root)

    # Reading every process's fds is the slow part; skip it on hosts with nothing to own.
    if chip_groups or root.exists(LOCKFILE):
        scan = scan_holders(root, _HELD_RE)
    else:
        scan = HolderScan(holders={}, inspected_processes=0, uninspectable_processes=0)
    chips = tuple(
        _chip(root, index, group, accel_by_address, scan.holders) for index, group in enumerate(chip_groups)
    )
    return TpuReport(
        chips=chips,
        pci_function_count=len(functions),
        versions=tuple(dict.fromkeys(c.version for c in chips)),
        lockfile=_lockfile(root, scan.holders.get(LOCKFILE, ()), scan.uninspectable_processes),
        env=tpu_env(environ),
        uninspectable_processes=scan.uninspectable_processes,
        unavailable=unavailable,
    )


def _tpu_pci_functions(root: HostRoot) -> list[_Function]:
    """Every Google TPU PCI function, sorted by address."""
    out = []
    for address in pci_addresses(root):
        base = f"{PCI_DEVICES}/{address}"
        if hex_id(root, f"{base}/vendor") != GOOGLE_PCI_VENDOR_ID:
            continue
        device_id = hex_id(root, f"{base}/device")
        if device_id not in TPU_PCI_DEVICE_IDS:
            continue
        group = link_name(root, f"{base}/iommu_group")
        out.append(
            _Function(
                address=address.lower(),
                device_id=device_id,
                subsystem_device=hex_id(root, f"{base}/subsystem_device"),
                # An iommu group is a number; anything else would become a /dev/vfio path.
                iommu_group=group if group is not None and group.isdigit() else None,
                numa_node=numa_node(root, base),
            )
        )
    return sorted(out, key=lambda f: f.address)


def _group_by_chip(functions: list[_Function]) -> list[list[_Function]]:
    # One chip can expose several functions (v2, v3, 7x): group by domain:bus:device, as
    # tpu-info does; JAX 0.12 gets the same count by skipping functions not ending in ".0".
    groups: dict[str, list[_Function]] = {}
    for f in functions:
        groups.setdefault(f.address.rsplit(".", 1)[0], []).append(f)
    return [groups[key] for key in sorted(groups)]


def _chip(
    root: HostRoot,
    index: int,
    group: list[_Function],
    accel_by_address: dict[str, str],
    held: Mapping[str, tuple[ProcessRef, ...]],
) -> TpuChip:
    first = group[0]
    notes: list[str] = []
    unavailable: dict[str, str] = {}
    version = _version(first, notes)
    facts = CHIP_FACTS[version]
    if facts.hbm_gib is None:
        unavailable["hbm_bytes"] = unavailable["devices_per_chip"] = f"tpu-info has no facts for {version}"

    device_path = _device_path(root, index, group, version, facts, accel_by_address, notes)
    # The node is looked at, never opened: opening a TPU's vfio group or accel node claims the chip.
    exists = root.exists(device_path)
    local = root.local(device_path) if exists else None
    accessible = os.access(local, os.R_OK | os.W_OK) if local is not None else None
    if not exists:
        unavailable["accessible"] = f"{device_path} does not exist"
    return TpuChip(
        index=index,
        pci_address=first.address,
        pci_functions=tuple(f.address for f in group),
        device_id=first.device_id,
        version=version,
        hbm_bytes=facts.hbm_gib * _GIB if facts.hbm_gib else None,
        devices_per_chip=facts.devices_per_chip,
        numa_node=first.numa_node,
        iommu_group=first.iommu_group,
        device_path=device_path,
        device_path_exists=exists,
        accessible=accessible,
        holders=tuple(held.get(device_path, ())),
        notes=tuple(notes),
        unavailable=unavailable,
    )


def _version(f: _Function, notes: list[str]) -> str:
    version = TPU_PCI_DEVICE_IDS[f.device_id]
    if f.device_id != "0x0027":
        return version
    if f.subsystem_device in _V2_V3_SUBSYSTEM:
        return _V2_V3_SUBSYSTEM[f.subsystem_device]
    # JAX maps 0x0027 to v3 unconditionally; say that we could not tell.
    notes.append(
        f"subsystem_device {f.subsystem_device or 'unreadable'} is neither v2 (0x004e) nor v3 (0x004f);"
        " assumed v3, as JAX does"
    )
    return version


def _device_path(
    root: HostRoot,
    index: int,
    group: list[_Function],
    version: str,
    facts: _ChipFacts,
    accel_by_address: dict[str, str],
    notes: list[str],
) -> str:
    group_id = next((f.iommu_group for f in group if f.iommu_group is not None), None)
    vfio = f"/dev/vfio/{group_id if group_id is not None else index}"
    accel = next((accel_by_address[f.address] for f in group if f.address in accel_by_address), f"/dev/accel{index}")
    if facts.uses_vfio is True:
        # Opening a group also needs the vfio container node; containers often lack it.
        if not root.exists("/dev/vfio/vfio"):
            notes.append("no /dev/vfio/vfio: libtpu cannot open vfio groups without it")
        if group_id is None:
            notes.append(f"no iommu_group link for {group[0].address}; guessed {vfio} from the chip index")
        return vfio
    if facts.uses_vfio is False:
        return accel
    # tpu-info has no rule for this chip: take whichever node exists.
    chosen = vfio if root.exists(vfio) or not root.exists(accel) else accel
    notes.append(f"device node for {version} is not documented by tpu-info; using {chosen}")
    return chosen


def _accel_nodes_by_pci(root: HostRoot) -> dict[str, str]:
    """PCI address -> /dev/accelN from /sys/class/accel/accelN/device, which libtpu also reads."""
    out = {}
    for name in root.listdir("/sys/class/accel"):
        if re.fullmatch(r"accel\d+", name):
            address = linked_pci_address(root, f"/sys/class/accel/{name}/device")
            if address:
                out[address] = f"/dev/{name}"
    return out




def _lockfile(root: HostRoot, fd_holders: tuple[ProcessRef, ...], uninspectable: int) -> TpuLockfile:
    if not root.exists(LOCKFILE):
        return TpuLockfile(LOCKFILE, False, "absent", (), None, None, "no lockfile (libtpu creates it when it starts)")

    holders = {p.pid: p for p in fd_holders}
    locks = _lock_owners(root, LOCKFILE)
    for pid in (p for p in locks or () if p > 0):
        if pid not in holders and pid_alive(root, pid):
            holders[pid] = process_ref(root, pid)
    pid_in_file = _pid_in_file(root)
    pid_in_file_alive = pid_alive(root, pid_in_file) if pid_in_file is not None else None
    if pid_in_file is not None and pid_in_file_alive and pid_in_file not in holders:
        holders[pid_in_file] = process_ref(root, pid_in_file)
    refs = tuple(holders[p] for p in sorted(holders))

    if refs:
        state, reason = "held", "held by " + ", ".join(f"pid {p.pid}" for p in refs)
    elif uninspectable and (locks is None or any(p <= 0 for p in locks)):
        # libtpu holds a POSIX lock on the file while it runs, and /proc/locks lists the locks of every process
        # devctl can see, inspectable or not: with none listed, the ones it could not inspect do not hold it.
        state = "unknown"
        reason = f"no inspected process holds it, but {why_uninspectable(uninspectable)}"
    else:
        state, reason = "stale", f"no live process holds it; a leftover file can be removed: {as_root(f'rm {LOCKFILE}')}"
    return TpuLockfile(LOCKFILE, True, state, refs, pid_in_file, pid_in_file_alive, reason)


def _pid_in_file(root: HostRoot) -> int | None:
    text = root.read_text(LOCKFILE, limit=256)
    m = re.fullmatch(r"\s*(\d{1,10})\s*", text or "")
    return int(m.group(1)) if m else None


def _lock_owners(root: HostRoot, path: str) -> list[int] | None:
    """Pids holding a POSIX or flock lock on `path`, -1 for an OFD lock, from /proc/locks (readable without root).

    None when /proc/locks cannot be read.
    """
    st = root.stat(path)
    if st is None:
        return []
    text = root.read_text("/proc/locks", limit=1 << 22)
    if text is None:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4569 fe:00:2148056 0 EOF"; "->" marks a waiter, not a holder.
        parts = line.split()
        if "->" not in parts and len(parts) >= 6 and parts[5] == key and parts[4].lstrip("-").isdigit():
            pids.append(int(parts[4]))  # an OFD lock shows -1: held, by a process /proc/locks does not name
    return pids


def tpu_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The TPU-related variables that are set, known ones first."""
    out = {name: environ[name] for name in TPU_ENV_VARS if name in environ}
    for name in sorted(environ):
        if name.startswith(_TPU_ENV_PREFIXES) and name not in out:
            out[name] = environ[name]
    return out


def held_reason(report: TpuReport) -> str | None:
    """Why devctl must not initialize the TPU now: another process holds a chip (libtpu allows one owner)."""
    holders = {p.pid: p for chip in report.chips for p in chip.holders}
    if not holders:
        return None
    who = ", ".join(f"pid {p.pid} ({p.command or '?'})" for p in holders.values())
    return f"not started: the TPU is held by {who}, and a second libtpu owner would fail or make a starting job fail"
