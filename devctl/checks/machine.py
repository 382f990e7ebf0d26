"""Checks of the machine around the accelerators: the host (/dev/shm, hugepages) and the TPU chips."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devctl.checks.verdict import Verdict, failed, join, passed, skipped, warned
from devctl.privilege import as_root, inspect_fix, thp_fix
from devctl.units import format_bytes

if TYPE_CHECKING:
    from devctl.collect.check_context import Context
    from devctl.model.hardware import ProcessRef

MIB = 1 << 20
# Docker's default /dev/shm is 64 MiB; NCCL (and RCCL) exhaust it with several GPUs
# (failure-modes.md #13; the ROCm plugin warns at <= 64 MB).
SHM_FAIL_BYTES = 64 * MIB
# NCCL makes segments of ~10 MB per peer and channel: 8 GPUs want hundreds of MB.
SHM_WARN_BYTES = 1024 * MIB
# jax/_src/cloud_tpu_init.py warns about hugepages for `tpu_id >= v5e` (TpuVersion order: v5p is before v5e).
THP_TPU_VERSIONS = ("v5e", "v6e", "tpu7x", "tpu8i", "tpu8t")


def gpu_count(hw, devices=()) -> int:
    """GPUs on this machine by the best witness: NVML, the PCI bus, AMD's KFD, or JAX's own GPU devices."""
    nvml = len(getattr(hw.nvidia, "gpus", None) or ())
    amd = len(getattr(hw.amd, "gpus", None) or ())
    jax_gpus = sum(1 for d in devices if d.platform in ("gpu", "cuda", "rocm"))
    return max(nvml, len(hw.nvidia_pci), amd, jax_gpus)


def check_host(ctx: Context) -> Verdict:
    hw, host = ctx.hardware(), ctx.host()
    devices = ctx.inventory().devices if "inventory" in ctx.needs else ()
    gpus = gpu_count(hw, devices)
    fails, warns, fixes, facts = [], [], [], []
    details = {"gpus": gpus, "shm_total_bytes": host.shm_total_bytes, "thp_mode": host.thp_mode, "thp_enabled": host.thp_enabled}

    shm = host.shm_total_bytes
    if gpus >= 2:
        shm_fix = "give the container a bigger /dev/shm: docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with medium Memory"
        if shm is None:
            fails.append(f"{gpus} GPUs but no usable /dev/shm ({host.unavailable.get('shm_total_bytes', 'unknown')}): NCCL collectives will fail")
            fixes.append(shm_fix)
        elif shm <= SHM_FAIL_BYTES:
            fails.append(f"/dev/shm is {format_bytes(shm)} with {gpus} GPUs: NCCL fails with 'No space left on device'")
            fixes.append(shm_fix)
        elif shm < SHM_WARN_BYTES:
            warns.append(f"/dev/shm is {format_bytes(shm)} with {gpus} GPUs: NCCL may run out of shared memory")
            fixes.append(shm_fix)
        else:
            facts.append(f"/dev/shm {format_bytes(shm)} for {gpus} GPUs")
    elif shm is not None:
        facts.append(f"/dev/shm {format_bytes(shm)}")

    tpu_versions = [v for v in getattr(hw.tpu, "versions", ()) if v in THP_TPU_VERSIONS]
    if tpu_versions and host.thp_enabled is False:
        warns.append(
            f"transparent hugepages are {host.thp_mode or 'off'} (JAX wants [always]) on TPU {', '.join(tpu_versions)}: "
            "TPU runtime startup and shutdown are much slower"
        )
        fixes.append(thp_fix())
    elif tpu_versions:
        facts.append("transparent hugepages always (TPU v5e+)")

    if fails:
        return failed(join(fails + warns, 2), fixes[0], **details)
    if warns:
        return warned(join(warns, 2), fixes[0], **details)
    return passed(", ".join(facts) or "nothing host-level to check", **details)


def check_tpu(ctx: Context) -> Verdict:
    tpu = ctx.hardware().tpu
    wants_tpu = ctx.expectations.wants_platform("tpu")
    lock = tpu.lockfile
    details = {
        "chips": len(tpu.chips),
        "versions": list(tpu.versions),
        "lockfile": {"state": lock.state, "pids": [p.pid for p in lock.holders], "pid_in_file": lock.pid_in_file},
    }
    if not tpu.chips and lock.state in ("absent", "stale"):
        # A lockfile nobody holds on a machine without TPU is libtpu's leftover (0.0.52 leaves one after a clean
        # run, wherever it loads): it stands for nothing here.
        if wants_tpu:
            return failed("no TPU chip on this machine", "run this job on a TPU VM", **details)
        return skipped("no TPU chip on this machine", **details)
    fails, warns, fixes = [], [], []
    held: dict[int, tuple[ProcessRef, list[str]]] = {}
    for chip in tpu.chips:
        for p in chip.holders:
            held.setdefault(p.pid, (p, []))[1].append(chip.device_path)
        if not chip.device_path_exists:
            fails.append(f"TPU {chip.index} ({chip.pci_address}): {chip.device_path} does not exist")
            fixes.append("pass the TPU device nodes into the container (--privileged or --device), or recreate the VM")
        elif chip.accessible is False:
            fails.append(f"TPU {chip.index}: no read/write permission on {chip.device_path}")
            fixes.append(f"run privileged, or give this user access to {chip.device_path}")
        fails.extend(f"TPU {chip.index}: {n}" for n in chip.notes if n.startswith("no /dev/vfio/vfio"))
        if any(n.startswith("no /dev/vfio/vfio") for n in chip.notes):
            fixes.append("pass /dev/vfio/vfio into the container as well as the /dev/vfio/<group> nodes")
    if lock.state == "held":
        for p in lock.holders:
            held.setdefault(p.pid, (p, []))[1].append(lock.path)
    for pid, (p, paths) in sorted(held.items()):
        fails.insert(0, f"held by pid {pid} ({p.command or '?'}, user {p.user or '?'}): {', '.join(paths)}")
        fixes.insert(0, f"stop it (kill {pid}) when it is safe; libtpu lets one process own the TPU at a time")
    if lock.state == "stale":
        warns.append(f"stale {lock.path}" + (f" (pid {lock.pid_in_file} is not running)" if lock.pid_in_file else "") + ": no live process holds it")
        fixes.append(as_root(f"rm {lock.path}"))
    elif lock.state == "unknown":
        warns.append(f"{lock.path}: {lock.reason}")
        fixes.append(inspect_fix(lock.path))
    summary = f"{len(tpu.chips)} TPU {'/'.join(tpu.versions) or ''} chip(s)".replace("  ", " ")
    if fails:
        return failed(join(fails, 2), fixes[0], **details)
    if warns:
        return warned(f"{summary}; {join(warns, 2)}", fixes[0], **details)
    return passed(f"{summary}, none held by another process; lockfile {lock.state}", **details)
