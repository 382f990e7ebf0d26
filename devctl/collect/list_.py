"""Assemble `devctl list`: the probe's backends and devices beside what discovery finds on the machine.

Discovery (NVML, sysfs, plugin metadata and library probes) runs in a thread
while the backend probe child imports jax, so the whole costs little more
than the probe.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from devctl.hostroot import HostRoot
from devctl.model.list_ import (
    SCHEMA,
    BackendInfo,
    BackendStatus,
    DeviceInfo,
    Hardware,
    Inventory,
    JaxOutcome,
    UnusedAccelerator,
)
from devctl.version import __version__


def discover_hardware(root: HostRoot, tpu_report=None) -> Hardware:
    from devctl.discovery import amd, tpu
    from devctl.discovery.nvidia_pci import nvidia_device_nodes, nvidia_pci_devices
    from devctl.discovery.nvml import nvml_report
    from devctl.model.hardware import NvmlReport

    if root.is_real:
        nvml = nvml_report()
    else:
        reason = "not read under --host-root: NVML talks to this machine's driver, not to a host tree"
        nvml = NvmlReport("unavailable", reason, None, None, None, ())
    return Hardware(
        nvidia=nvml,
        nvidia_device_nodes=nvidia_device_nodes(root),
        nvidia_pci=nvidia_pci_devices(root),
        tpu=tpu_report or tpu.tpu_info(root),
        amd=amd.amd_report(root),
    )


def collect_inventory(
    platforms: list[str] | None = None, timeout_s: float | None = None, host_root: str = "/"
) -> Inventory:
    """Everything `devctl list` shows. Never raises for a broken backend or plugin."""
    from devctl.collect.plugins import plugins_report
    from devctl.discovery.host import host_info
    from devctl.discovery.tpu import held_reason, tpu_info
    from devctl.probe.backends import probe_backends
    from devctl.probe.runner import DEFAULT_TIMEOUT_S

    timeout_s = timeout_s or DEFAULT_TIMEOUT_S
    root = HostRoot(host_root)
    started = time.monotonic()
    # Before probing: never race a running job for its TPU (cheap where there is no TPU chip).
    tpu_report = tpu_info(root)
    held = held_reason(tpu_report)
    with ThreadPoolExecutor(max_workers=3) as pool:
        hardware_f = pool.submit(discover_hardware, root, tpu_report)
        plugins_f = pool.submit(plugins_report, timeout_s=timeout_s)
        host_f = pool.submit(host_info, root)
        probe = probe_backends(platforms, timeout_s=timeout_s, hold_off={"tpu": held} if held else None)
        hardware, plugins, host = hardware_f.result(), plugins_f.result(), host_f.result()
    return assemble_inventory(probe, hardware, plugins, host, started, platforms=platforms)


def assemble_inventory(probe, hardware: Hardware, plugins: list, host, started: float, platforms: list[str] | None = None) -> Inventory:
    """The inventory from a backend probe and discovery's findings (also used per process under --distributed)."""
    devices = match_nvml(probe.devices, hardware.nvidia)
    quiet = [quiet_tpu_without_chips(b, hardware) for b in probe.backends]
    backends = [with_hint(b, hardware, quiet) for b in quiet]
    return Inventory(
        schema=SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=socket.gethostname(),
        jax_version=probe.jax_version,
        jaxlib_version=probe.jaxlib_version,
        default_platform=probe.default_platform,
        backends=backends,
        devices=devices,
        unused_accelerators=unused_accelerators(backends, devices, hardware),
        plugins=plugins,
        host=host,
        hardware=hardware,
        elapsed_s=time.monotonic() - started,
        jax_outcome=with_advice(probe.outcome, backends, hardware),
        platforms=list(platforms) if platforms else None,
    )


def match_nvml(devices: list[DeviceInfo], nvml) -> list[DeviceInfo]:
    """Attach to each CUDA device the NVML GPU with the same PCI bus id."""
    from devctl.discovery.pci import normalize_pci_bus_id

    gpus = {normalize_pci_bus_id(g.pci_bus_id): g for g in (getattr(nvml, "gpus", None) or ()) if g.pci_bus_id}
    out = []
    for d in devices:
        bus_id = d.attributes.get("pci_bus_id")
        gpu = gpus.get(normalize_pci_bus_id(bus_id)) if bus_id else None
        if gpu is not None:
            d = dataclasses.replace(d, nvml_gpu={"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id})
        out.append(d)
    return out


def unused_accelerators(backends: list[BackendInfo], devices: list[DeviceInfo], hw: Hardware) -> list[UnusedAccelerator]:
    """Accelerators on the machine that no initialized JAX backend uses, each with the reason."""
    ok = {b.platform for b in backends if b.status is BackendStatus.OK}
    by_platform = {b.platform: b for b in backends}
    out: list[UnusedAccelerator] = []

    used_bus_ids = {d.nvml_gpu["pci_bus_id"] for d in devices if d.nvml_gpu}
    cuda_devices = [d for d in devices if d.platform in ("gpu", "cuda")]
    gpus = list(getattr(hw.nvidia, "gpus", None) or ())
    if gpus and "cuda" not in ok:
        reason = _why_not(by_platform.get("cuda"), "no CUDA backend: install it with pip install -U 'jax[cuda13]' (or 'jax[cuda12]')")
        for g in gpus:
            out.append(UnusedAccelerator("nvidia-gpu", g.name or "NVIDIA GPU", g.pci_bus_id or f"nvml index {g.index}", reason))
    elif gpus and used_bus_ids:
        for g in gpus:
            if g.pci_bus_id not in used_bus_ids:
                hidden = "not among JAX's CUDA devices: CUDA_VISIBLE_DEVICES or JAX_LOCAL_DEVICE_IDS hides it"
                out.append(UnusedAccelerator("nvidia-gpu", g.name or "NVIDIA GPU", g.pci_bus_id or f"nvml index {g.index}", hidden))
    elif gpus and len(cuda_devices) < len(gpus):
        # CUDA gave no PCI bus ids to match by: the count is all that can be told.
        missing = len(gpus) - len(cuda_devices)
        out.append(
            UnusedAccelerator(
                "nvidia-gpu", gpus[0].name or "NVIDIA GPU", f"{missing} of {len(gpus)} GPUs (which ones: unknown)",
                f"JAX's CUDA backend has {len(cuda_devices)} device(s) for {len(gpus)} GPUs: CUDA_VISIBLE_DEVICES or JAX_LOCAL_DEVICE_IDS hides the rest",
            )
        )  # fmt: skip
    elif not gpus and "cuda" not in ok:
        # No NVML (no driver, or --host-root): the PCI bus still shows the GPUs.
        nodes = any(n.rsplit("/", 1)[-1].startswith("nvidia") for n in hw.nvidia_device_nodes)
        for f in hw.nvidia_pci:
            if f.driver not in (None, "nvidia"):
                reason = f"bound to the {f.driver} driver, not nvidia (passed through to a VM?)"
            elif f.driver is None:
                reason = "no kernel driver bound: install the NVIDIA driver"
            elif not nodes:
                reason = "no /dev/nvidia* device node: in a container, start it with --gpus all"
            else:
                reason = _why_not(by_platform.get("cuda"), "no CUDA backend: pip install -U 'jax[cuda13]' (or 'jax[cuda12]')")
            out.append(UnusedAccelerator("nvidia-gpu", f"NVIDIA GPU {f.device_id}", f.address, reason))

    tpu_chips = list(getattr(hw.tpu, "chips", None) or ())
    if tpu_chips and "tpu" not in ok:
        reason = _why_not(by_platform.get("tpu"), "no TPU backend: pip install -U 'jax[tpu]'")
        for chip in tpu_chips:
            held = ", ".join(f"pid {p.pid} ({p.command or '?'})" for p in chip.holders)
            out.append(UnusedAccelerator("tpu-chip", f"TPU {chip.version}", chip.pci_address, f"held by {held}" if held else reason))

    amd = list(getattr(hw.amd, "gpus", None) or ())
    if amd and "rocm" not in ok:
        reason = _why_not(by_platform.get("rocm"), "no ROCm backend: pip install -U 'jax[rocm]' (see JAX's ROCm install guide)")
        for g in amd:
            out.append(UnusedAccelerator("amd-gpu", g.name or "AMD GPU", g.pci_address or f"kfd node {g.node}", reason))
    return out


def _why_not(backend: BackendInfo | None, default: str) -> str:
    if backend is None or backend.status is BackendStatus.OK:
        return default
    return f"{backend.platform} backend {backend.status.value}: {backend.error}"


def with_hint(b: BackendInfo, hw: Hardware, backends: list[BackendInfo] | None = None) -> BackendInfo:
    """The row with its one-line advice and finding code (the same that check and doctor give)."""
    from devctl.checks.advice import for_row

    if b.status is BackendStatus.OK or b.hint:
        return b
    advice = for_row(b, hw, backends=backends)
    if advice is None:
        return b
    return dataclasses.replace(b, hint=advice.fix, code=advice.code, summary=advice.summary, remedies=list(advice.remedies))


def with_advice(outcome: JaxOutcome | None, backends: list[BackendInfo], hw: Hardware) -> JaxOutcome | None:
    from devctl.checks.advice import for_outcome

    if outcome is None:
        return None
    advice = for_outcome(outcome, backends, hw)
    if advice is None:
        return outcome
    return dataclasses.replace(outcome, code=advice.code, summary=advice.summary, fix=advice.fix, fix_env=advice.fix_env, remedies=list(advice.remedies))


def quiet_tpu_without_chips(b: BackendInfo, hw: Hardware) -> BackendInfo:
    """JAX tries TPU (and the IFRT proxy) on every machine and ignores the failure: where that is expected, so does devctl."""
    if b.status is not BackendStatus.FAILED or not b.fail_quietly:
        return b
    if b.platform == "tpu" and not getattr(hw.tpu, "chips", None):
        return dataclasses.replace(b, status=BackendStatus.SKIPPED, hint="no TPU chip on this machine; JAX ignores this backend")
    if b.platform == "proxy" and not os.environ.get("JAX_BACKEND_TARGET"):
        return dataclasses.replace(b, status=BackendStatus.SKIPPED, hint="no JAX_BACKEND_TARGET: JAX ignores the IFRT proxy backend")
    return b
