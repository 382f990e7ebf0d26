"""`--distributed`: one inventory, one memory headroom and one verdict across every process of a JAX cluster.

Every process runs the same devctl command. Each builds its local report
(the single-host document: devctl.list/1 or devctl.memstats/2) from a probe
that runs after `jax.distributed.initialize`, and the reports travel through
JAX's coordination service (devctl.probe.distributed); process 0 assembles
them here: hosts, devices with their process, the processes that differ
from the majority, and the smallest memory headroom anywhere.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from devctl.model import from_dict
from devctl.model.distributed import (
    CLUSTER_PARTS,
    LIST_SCHEMA,
    MEMSTATS_SCHEMA,
    ClusterDevice,
    ClusterFinding,
    ClusterHeadroom,
    ClusterParams,
    ClusterReport,
    Joined,
    ProcessSummary,
)
from devctl.model.list_ import DeviceInfo
from devctl.model.memstats import MemDevice, usable_memory
from devctl.version import __version__

# ---------------------------------------------------------------- the exchange, for any command


def gather_reports(report: Any, params: ClusterParams, *, timeout_s: float, all_print: bool = False) -> list[Any] | None:
    """Share this process's JSON-able `report`; every process's report in process order on process 0.

    `report` may be a function taking no argument: it is called while the
    child imports jax and joins the cluster, so its work overlaps the join.
    Every process must call this, whatever its own report says. Returns None
    on the other processes (unless `all_print`). Raises DevctlError naming
    the processes that never joined or sent no report, and a bad-input error
    (exit 2) when JAX rejects the cluster parameters.
    """
    from devctl.probe.distributed import exchange

    if callable(report):
        return exchange(params, timeout_s=timeout_s, all_print=all_print, make_report=report).reports
    return exchange(params, timeout_s=timeout_s, all_print=all_print, report=report).reports


# ---------------------------------------------------------------- devctl list --distributed


def cluster_inventory(
    params: ClusterParams, *, platforms: list[str] | None, timeout_s: float, host_root: str = "/", all_print: bool = False
) -> ClusterReport | None:
    """Every process's inventory, assembled on process 0 (and every process with `all_print`); None elsewhere."""
    from devctl.collect.list_ import discover_hardware
    from devctl.collect.plugins import plugins_report
    from devctl.discovery import tpu
    from devctl.discovery.host import host_info
    from devctl.discovery.versions import installed_packages
    from devctl.hostroot import HostRoot
    from devctl.model import to_jsonable
    from devctl.probe.distributed import exchange

    started = time.monotonic()
    root = HostRoot(host_root)
    tpu_report = tpu.tpu_info(root)
    platforms = _without_held_tpu(platforms, tpu_report)
    with ThreadPoolExecutor(max_workers=4) as pool:
        # Discovery runs while the child imports jax and waits for its peers.
        hardware_f = pool.submit(discover_hardware, root, tpu_report)
        plugins_f = pool.submit(plugins_report, timeout_s=timeout_s)
        host_f = pool.submit(host_info, root)
        packages_f = pool.submit(installed_packages)

        def build(local_probe: dict, joined: Joined, progress) -> dict:
            probe = backends_probe(local_probe, progress)
            inv = _inventory(probe, hardware_f.result(), plugins_f.result(), host_f.result(), started)
            summary = process_summary(joined, inv.hostname, probe, local_probe, packages_f.result(), hardware_f.result().nvidia)
            return {"summary": to_jsonable(summary), "report": to_jsonable(inv)}

        probe_request = {"platforms": platforms, "memory_stats": True}
        done = exchange(params, timeout_s=timeout_s, all_print=all_print, probe=probe_request, build_report=build)
    if done.reports is None:
        return None
    return assemble(LIST_SCHEMA, done, _list_devices, started)


def _without_held_tpu(platforms: list[str] | None, tpu_report) -> list[str] | None:
    """Never race a running job for its TPU (libtpu allows one owner): leave TPU out of the probe while it is held."""
    from devctl.discovery.tpu import held_reason

    if not held_reason(tpu_report):
        return platforms
    return [p for p in platforms or ("cpu", "cuda", "rocm") if p != "tpu"]


def _inventory(probe, hardware, plugins, host, started: float):
    """collect_inventory's assembly, on a probe made after joining the cluster."""
    from devctl.collect.list_ import assemble_inventory

    return assemble_inventory(probe, hardware, plugins, host, started)


def backends_probe(local_probe: dict, progress):
    """The child's backend events as the single-host probe's result."""
    from devctl.model.list_ import BackendInfo, DeviceInfo
    from devctl.probe.backends import BackendsProbe

    by_platform: dict[str, BackendInfo] = {}
    for event in progress.plugin_events:
        if event.get("status") != "ok":
            info = BackendInfo.from_plugin_event(event)
            by_platform[info.platform] = info
    devices = []
    for event in local_probe.get("backends") or []:
        info = BackendInfo.from_event(event)
        by_platform[info.platform] = info
        devices += [DeviceInfo.from_event(d) for d in event.get("devices") or []]
    return BackendsProbe(
        backends=list(by_platform.values()),
        devices=devices,
        jax_version=progress.versions.get("jax"),
        jaxlib_version=progress.versions.get("jaxlib"),
        default_platform=local_probe.get("default_platform"),
    )


def _list_devices(payload: dict, index: int, hostname: str) -> list[ClusterDevice]:
    report = payload["report"]
    free = {g.get("index"): _int(g.get("memory_free_bytes")) for g in ((report.get("hardware") or {}).get("nvidia") or {}).get("gpus") or []}
    out = []
    for d in report.get("devices") or []:
        limit = _int((d.get("memory_stats") or {}).get("bytes_limit"))
        gpu = d.get("nvml_gpu") or {}
        usable, _ = usable_memory(limit, free.get(gpu.get("index")) if gpu else None)
        out.append(
            ClusterDevice(
                process_index=index, hostname=hostname, key=f"{d['platform']}:{d['id']}", platform=d["platform"], id=d["id"],
                device_kind=d["device_kind"], jax_process_index=d.get("process_index"), bytes_limit=limit,
                peak_bytes_in_use=None, usable_bytes=usable, detail=from_dict(DeviceInfo, d),
            )
        )  # fmt: skip
    return out


# ---------------------------------------------------------------- devctl memstats --distributed


def cluster_memstats(params: ClusterParams, *, timeout_s: float, host_root: str = "/", all_print: bool = False) -> ClusterReport | None:
    """Every process's memstats snapshot, assembled on process 0 (and every process with `all_print`); None elsewhere."""
    from devctl.collect.memstats import MemstatsSampler
    from devctl.discovery import tpu
    from devctl.discovery.versions import installed_packages
    from devctl.hostroot import HostRoot
    from devctl.model import to_jsonable
    from devctl.probe.distributed import exchange

    started = time.monotonic()
    sampler = MemstatsSampler(device_filter=None, timeout_s=timeout_s, host_root=host_root)
    sampler.tpu = tpu.tpu_info(HostRoot(host_root))
    platforms = _without_held_tpu(None, sampler.tpu)
    with ThreadPoolExecutor(max_workers=2) as pool:
        packages_f = pool.submit(installed_packages)
        nvml_f = pool.submit(_nvml_if_real, sampler.root)

        def build(local_probe: dict, joined: Joined, progress) -> dict:
            sampler.probe = backends_probe(local_probe, progress)
            snapshot = sampler.sample()
            summary = process_summary(joined, snapshot.hostname, sampler.probe, local_probe, packages_f.result(), nvml_f.result())
            jax_view = {f"{d.platform}:{d.id}": d.process_index for d in sampler.probe.devices}
            return {"summary": to_jsonable(summary), "report": to_jsonable(snapshot), "jax_process_index": jax_view}

        probe_request = {"platforms": platforms, "memory_stats": True}
        done = exchange(params, timeout_s=timeout_s, all_print=all_print, probe=probe_request, build_report=build)
    if done.reports is None:
        return None
    return assemble(MEMSTATS_SCHEMA, done, _memstats_devices, started)


def _nvml_if_real(root):
    from devctl.discovery.nvml import nvml_report

    return nvml_report() if root.is_real else None


def _memstats_devices(payload: dict, index: int, hostname: str) -> list[ClusterDevice]:
    jax_view = payload.get("jax_process_index") or {}
    out = []
    for d in payload["report"].get("devices") or []:
        out.append(
            ClusterDevice(
                process_index=index, hostname=hostname, key=d["key"], platform=d["platform"], id=d.get("id"),
                device_kind=d["device_kind"], jax_process_index=jax_view.get(d["key"]),
                bytes_limit=d.get("bytes_limit"), peak_bytes_in_use=d.get("peak_bytes_in_use"),
                usable_bytes=d.get("usable_bytes"), detail=from_dict(MemDevice, d),
            )
        )  # fmt: skip
    return out


# ---------------------------------------------------------------- per process


def process_summary(joined: Joined, hostname: str, probe, local_probe: dict, packages, nvml) -> ProcessSummary:
    """This process's row of the hosts table, made where the facts are (its own packages, driver and devices)."""
    by_name = {p.name: p.version for p in packages}
    default = local_probe.get("default_platform")
    backends = {b["platform"]: b for b in local_probe.get("backends") or []}
    notes = [note for b in backends.values() if (note := _single_process_note(b, joined))]
    # What jax.devices() gives a program on this host: the default backend's devices (a TPU host's CPU device is not one).
    devices = ((backends.get(default) or {}).get("devices") or []) if default else []
    return ProcessSummary(
        process_index=joined.process_index,
        hostname=hostname,
        device_count=len(devices),
        device_kinds=sorted({d["device_kind"] for d in devices}),
        default_platform=default,
        jax_version=by_name.get("jax") or probe.jax_version,
        jaxlib_version=by_name.get("jaxlib") or probe.jaxlib_version,
        libtpu_version=by_name.get("libtpu") or by_name.get("libtpu-nightly"),
        plugin_versions={p.name: p.version for p in packages if p.role in ("plugin", "pjrt") and p.version},
        driver_version=getattr(nvml, "driver_version", None),
        global_device_count=(backends.get(default) or {}).get("global_device_count") if default else None,
        notes=notes,
    )


def _single_process_note(backend: dict, joined: Joined) -> str | None:
    """A backend that ignores the cluster: it lists only this process's devices, or numbers this process wrongly."""
    if backend.get("status") != "ok" or joined.num_processes < 2 or not backend.get("devices"):
        return None
    own, seen = len(backend["devices"]), backend.get("global_device_count")
    if backend.get("process_index") != joined.process_index or seen == own:
        return f"{backend['platform']}: no multi-process support here (JAX on this process sees only its own {own} device(s))"
    return None


# ---------------------------------------------------------------- on process 0


def assemble(schema: str, done, devices_of, started: float) -> ClusterReport:
    joined, payloads = done.joined, done.reports
    summaries = [_summary_from(p, i) for i, p in enumerate(payloads)]
    devices = [d for i, p in enumerate(payloads) for d in devices_of(p, i, summaries[i].hostname)]
    return ClusterReport(
        schema=schema,
        devctl_version=__version__,
        timestamp=time.time(),
        coordinator=joined.coordinator,
        num_processes=joined.num_processes,
        processes=summaries,
        devices=devices,
        findings=consistency_findings(summaries),
        headroom=cluster_headroom(schema, payloads, summaries, devices),
        reports=[from_dict(CLUSTER_PARTS[schema][0], p["report"]) for p in payloads],
        elapsed_s=time.monotonic() - started,
        join_s=done.join_s,
        gather_s=done.gather_s,
    )


def _summary_from(payload: dict, index: int) -> ProcessSummary:
    s = dict(payload["summary"])
    s["process_index"] = index  # the slot it was gathered from is authoritative
    return ProcessSummary(**s)


_COMPARED = (
    # (field, code, severity, what it is called in a message)
    ("jax_version", "version-mismatch", "error", "jax"),
    ("jaxlib_version", "version-mismatch", "error", "jaxlib"),
    ("libtpu_version", "version-mismatch", "error", "libtpu"),
    ("plugin_versions", "version-mismatch", "error", "JAX plugins"),
    ("device_kinds", "device-kind-mismatch", "error", "device kind"),
    ("device_count", "device-count-mismatch", "error", "device count"),
    ("driver_version", "driver-mismatch", "warning", "NVIDIA driver"),
)


def consistency_findings(processes: list[ProcessSummary]) -> list[ClusterFinding]:
    """Processes whose versions, device kind, device count or driver differ from the majority, named."""
    findings = []
    for name, code, severity, label in _COMPARED:
        finding = _odd_ones(processes, name, code, severity, label)
        if finding is not None:
            findings.append(finding)
    findings += _single_process_findings(processes)
    return findings


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    return value


def _shown(value: Any) -> str:
    if value is None or value == {} or value == []:
        return "none"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return str(value)


def _odd_ones(processes: list[ProcessSummary], name: str, code: str, severity: str, label: str) -> ClusterFinding | None:
    values = [getattr(p, name) for p in processes]
    counts = Counter(_hashable(v) for v in values)
    if len(counts) < 2:
        return None
    (top, top_n), (_, second_n) = counts.most_common(2)
    if top_n > second_n:
        odd = [p for p, v in zip(processes, values) if _hashable(v) != top]
        majority = next(v for v in values if _hashable(v) == top)
        message = (
            f"{_named(odd)} {'has' if len(odd) == 1 else 'have'} {label} {_list_values(odd, name)}; "
            f"the other {top_n} {'process has' if top_n == 1 else 'processes have'} {_shown(majority)}"
        )
    else:  # no majority: name every group
        odd, majority = list(processes), None
        groups: dict[Any, tuple[Any, list[ProcessSummary]]] = {}  # _hashable(value) -> (value, processes)
        for p, v in zip(processes, values):
            groups.setdefault(_hashable(v), (v, []))[1].append(p)
        message = f"{label} differs across processes with no majority: " + "; ".join(
            f"{_shown(v)} on {_named(ps)}" for v, ps in groups.values()
        )
    return ClusterFinding(
        code=code, severity=severity, field=name, message=message,
        processes=[p.process_index for p in odd], hostnames=[p.hostname for p in odd],
        values=[getattr(p, name) for p in odd], majority_value=majority,
        hint=_hint(code, label, majority),
    )  # fmt: skip


def _hint(code: str, label: str, majority: Any) -> str | None:
    if code != "version-mismatch":
        return None
    if majority is None or label == "JAX plugins":
        return "install the same versions on every host"
    return f"install {label} {_shown(majority)} there, as on the other hosts"


def _list_values(odd: list[ProcessSummary], name: str) -> str:
    shown = list(dict.fromkeys(_shown(getattr(p, name)) for p in odd))
    return " / ".join(shown)


def _named(processes: list[ProcessSummary]) -> str:
    """'process 2 (host-c)' or 'processes 2, 5 (host-c, host-f)', cut short for a big cluster."""
    limit = 8
    shown = processes[:limit]
    ids = ", ".join(str(p.process_index) for p in shown)
    hosts = ", ".join(p.hostname for p in shown)
    more = f" and {len(processes) - limit} more" if len(processes) > limit else ""
    word = "process" if len(processes) == 1 else "processes"
    return f"{word} {ids} ({hosts}){more}"


def _single_process_findings(processes: list[ProcessSummary]) -> list[ClusterFinding]:
    noted = [p for p in processes if p.notes]
    if not noted:
        return []
    return [
        ClusterFinding(
            code="not-multi-process", severity="warning", field=None,
            message=f"{_named(noted)}: {noted[0].notes[0]}" + (" (and others)" if sum(len(p.notes) for p in noted) > 1 else ""),
            processes=[p.process_index for p in noted], hostnames=[p.hostname for p in noted],
            values=[p.notes for p in noted],
            hint="on CPU, cross-process collectives need gloo: JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo",
        )
    ]  # fmt: skip


def cluster_headroom(schema: str, payloads: list[Any], summaries: list[ProcessSummary], devices: list[ClusterDevice]) -> ClusterHeadroom:
    """The smallest usable memory over every device of every process (and, for memstats, every publishing job's
    headroom, which each process's own report has already weighed)."""
    candidates: list[tuple[int, int, str, str | None]] = [
        (d.usable_bytes, d.process_index, d.hostname, d.key) for d in devices if d.usable_bytes is not None
    ]
    if schema == MEMSTATS_SCHEMA:
        for i, p in enumerate(payloads):
            h = p["report"].get("headroom") or {}
            if h.get("min_bytes") is not None:
                candidates.append((h["min_bytes"], i, summaries[i].hostname, h.get("where")))
    if not candidates:
        return ClusterHeadroom(None, None, None, None, None, "no device of any process reports bytes_limit or the driver's free memory (CPU has no allocator statistics)")
    value, index, hostname, where = min(candidates, key=lambda c: (c[0], c[1]))
    return ClusterHeadroom(value, index, hostname, where, value // 3)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None
