"""`devctl doctor`'s assembly: gather the scene (discovery, every check), run the diagnosis, build the report and its overview.

What the doctor knows is data in devctl.checks.catalogue; how it recognizes
each entry is the rules in devctl.checks (diagnosis, rules_*).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time

from devctl.checks.diagnosis import diagnose, explanations
from devctl.checks.scene import Scene
from devctl.model.doctor import DOCTOR_SCHEMA, DoctorFinding, DoctorReport, Overview
from devctl.model.list_ import BackendStatus
from devctl.units import format_bytes
from devctl.version import __version__


def overview(s: Scene, findings: list[DoctorFinding]) -> Overview:
    """What devctl sees on this machine, and what JAX will use, in short lines.

    A backend that does not start is said with the finding that explains it (the same cause, the same fix, its
    code), so the two halves of doctor never disagree; only a backend no finding explains keeps its own advice."""
    inv, hw, host = s.inv, s.hw, s.inv.host
    sees = []
    cores = f"{host.logical_cores} CPUs" if host.logical_cores else "CPUs unknown"
    shm = f", /dev/shm {format_bytes(host.shm_total_bytes)}" if host.shm_total_bytes is not None else ""
    sees.append(f"host {host.hostname or '?'}: {host.os_name or 'unknown OS'}, {cores}, {format_bytes(host.memory_total_bytes)} memory{shm}")
    stack = ", ".join(f"{p.name} {p.version}" for p in s.env.packages if p.version and p.role in ("jax", "jaxlib", "plugin", "pjrt", "libtpu"))
    sees.append(f"software: {stack or 'jax not installed'}")
    plugins = ", ".join(f"{p.name} ({p.status.value})" for p in inv.plugins)
    sees.append(f"JAX plugins: {plugins or 'none'}")
    nvml = hw.nvidia
    if getattr(nvml, "gpus", None):
        names = sorted({g.name or "?" for g in nvml.gpus})
        sees.append(f"NVIDIA: {len(nvml.gpus)} GPU(s) ({', '.join(names)}), driver {nvml.driver_version}, CUDA {nvml.cuda_driver_version_str}")
    elif hw.nvidia_pci:
        drivers = sorted({f.driver or "no driver" for f in hw.nvidia_pci})
        sees.append(f"NVIDIA: {len(hw.nvidia_pci)} GPU(s) on the PCI bus ({', '.join(drivers)}); NVML: {nvml.reason}")
    else:
        sees.append("NVIDIA: no GPU")
    if s.facts.nvswitches:
        fm = f"running (pid {s.facts.fabric_manager.pid})" if s.facts.fabric_manager else "not running"
        sees.append(f"NVSwitch: {len(s.facts.nvswitches)} bridge(s); fabric manager {fm}")
    tpu = hw.tpu
    if tpu.chips:
        sees.append(f"TPU: {len(tpu.chips)} {'/'.join(tpu.versions)} chip(s); lockfile {tpu.lockfile.state}")
    else:
        sees.append("TPU: no chip" + (f"; lockfile {tpu.lockfile.state}" if tpu.lockfile.state != "absent" else ""))
    amd = getattr(hw.amd, "gpus", None) or ()
    sees.append(f"AMD: {len(amd)} GPU(s)" if amd else "AMD: no GPU")
    if inv.unused_accelerators:
        sees.append(f"accelerators JAX does not use: {len(inv.unused_accelerators)}")

    will = []
    default = inv.default_platform
    devices = [d for d in inv.devices if default and (d.platform == default or (default in ("cuda", "rocm") and d.platform == "gpu"))]
    kinds = sorted({d.device_kind for d in devices})
    outcome = getattr(inv, "jax_outcome", None)
    if outcome is not None and outcome.fails:
        will.append(f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit}")
    elif default:
        will.append(f"default backend {default}: {len(devices)} device(s) ({', '.join(kinds)})")
    else:
        will.append("no backend: jax.devices() raises")
    if s.environ.get("JAX_PLATFORMS"):
        will.append(f"JAX_PLATFORMS={s.environ['JAX_PLATFORMS']} decides which backends JAX starts")
    explained = explanations(findings)
    for b in inv.backends:
        f = explained.get(b.platform) if b.status is not BackendStatus.OK else None
        if f is not None:
            will.append(f"{b.platform}: {b.status.value}, {f.title} [{f.code}]: {f.fix}")
        elif b.skipped_quietly:  # as JAX does: a TPU backend on a machine without one is not news
            will.append(f"{b.platform}: {b.hint or 'skipped'}")
        elif b.platform != default:
            state = b.status.value if b.status is not BackendStatus.OK else f"ok ({b.device_count} device(s))"
            why = f": {b.hint or b.error}" if b.status is not BackendStatus.OK and (b.hint or b.error) else ""
            will.append(f"{b.platform}: {state}{why}")
    return Overview(
        sees=sees, jax_will_use=will, default_platform=default, device_count=len(devices), device_kinds=kinds, jax_outcome=inv.jax_outcome
    )


# A post-mortem this recent is said in the overview: the job that died of it is likely the one being debugged.
RECENT_POSTMORTEM_S = 24 * 3600


def _postmortem_lines() -> list[str]:
    """A line per post-mortem of the last day that this user's jobs left (devctl memstats --postmortem)."""
    from devctl.discovery.holders import read_postmortems
    from devctl.errors import DevctlError
    from devctl.model.holders import requested_text
    from devctl.text import printable, program_name
    from devctl.units import format_bytes

    try:
        report = read_postmortems()
    except DevctlError:
        return []  # an unsafe snapshot directory: memstats says why
    lines = []
    for pm in report.postmortems:
        if time.time() - pm.timestamp > RECENT_POSTMORTEM_S:
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(pm.timestamp))
        asked = f" {text}" if (text := requested_text(pm)) else ""
        top = pm.sites[0] if pm.sites else None
        held = f"; most of its {format_bytes(pm.total_bytes)} held at {top.site}" if top and top.site else ""
        lines.append(printable(
            f"Out of memory: job {pm.pid} ({program_name(pm.command)}) died of RESOURCE_EXHAUSTED at {when}{asked}{held} "
            f"(devctl memstats --postmortem --pid {pm.pid})"
        ))  # fmt: skip
    return lines[:3]


def doctor(host_root: str = "/", timeout_s: float = 30.0) -> DoctorReport:
    """Discovery, every check without expectations, and the diagnosis."""
    from devctl.checks import CHECK_NAMES
    from devctl.collect.check import run_checks
    from devctl.collect.check_context import Context
    from devctl.discovery.machine_facts import machine_facts
    from devctl.model.check import Expectations

    started = time.monotonic()
    with Context(Expectations(timeout_s=timeout_s), host_root, list(CHECK_NAMES)) as ctx:
        results = run_checks(ctx)
        scene = Scene(
            inv=ctx.inventory(),
            env=ctx.environment(),
            facts=machine_facts(ctx.root),
            nvml=ctx.nvml(),
            checks={r.name: r for r in results},
            environ=dict(os.environ),
        )
    findings = diagnose(scene)
    seen = overview(scene, findings)
    seen = dataclasses.replace(seen, sees=[*seen.sees, *_postmortem_lines()])
    return DoctorReport(
        schema=DOCTOR_SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=socket.gethostname(),
        status="problems" if any(f.severity != "info" for f in findings) else "ok",
        overview=seen,
        findings=findings,
        checks=results,
        elapsed_s=round(time.monotonic() - started, 3),
    )
