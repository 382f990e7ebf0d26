"""libtpu's runtime metrics in `devctl memstats`: each TPU chip's HBM used and total and duty cycle, under the
process that holds it, from that process's own metrics service (devctl.discovery.tpu_runtime).

A process with nothing listening (not yet started libtpu, or metrics turned off) is a quiet note; a server
that does not answer within the timeout, or fails otherwise, is a problem that names it; a missing
`tpu-metrics` extra is one note saying how to install it.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

from devctl.hostroot import HostRoot
from devctl.model.memstats import MemDevice, MemProcess, TpuMetricsSource, TpuRuntimeChip


@dataclass
class RuntimeMetrics:
    chips: dict[str, TpuRuntimeChip] = field(default_factory=dict)  # device key ("tpu-chip:N") -> figures
    sources: list[TpuMetricsSource] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class TensorCoreWatch:
    """libtpu.sdk's TensorCore utilization without holding up a sample: the first sample waits for its child
    (bounded by the child's timeout); later ones (`--watch`) take the latest finished answer and start the
    next child, so a refresh never waits on the SDK. Asked only while a process holds a TPU chip and libtpu
    is installed beside devctl."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._box: list = []
        self._latest = None
        self._waited = False
        self._installed: bool | None = None

    def start(self, tpu) -> None:
        if self._thread is not None or not any(c.holders for c in (tpu.chips if tpu else ())):
            return
        from devctl.probe import tpu_sdk

        if self._installed is None:
            self._installed = tpu_sdk.libtpu_installed()
        if not self._installed:
            return
        box: list = []
        self._box = box
        self._thread = threading.Thread(target=lambda: box.append(tpu_sdk.ask_tensorcore_util()), name="devctl-tpu-sdk", daemon=True)
        self._thread.start()

    def latest(self, wait_s: float | None = None):
        """The newest answer (a devctl.probe.tpu_sdk.SdkAnswer), or None. The first call waits for the first child,
        at most `wait_s` (default: until the child's own watchdog ends it); the exporter's scrape passes its own
        time left, and a child still running then answers a later scrape."""
        if self._thread is None:
            return self._latest
        if not self._waited:
            from devctl.probe.tpu_sdk import TIMEOUT_S

            self._waited = True
            self._thread.join(TIMEOUT_S + 5 if wait_s is None else max(wait_s, 0.0))  # the child's watchdog ends it first
        if not self._thread.is_alive():
            self._latest = self._box[0] if self._box else None
            self._thread = None
        return self._latest


def runtime_metrics(root: HostRoot, tpu, timeout_s: float | None = None) -> RuntimeMetrics:
    """Ask every process holding a TPU chip of `tpu` (a TpuReport) for its chips' figures."""
    from devctl.discovery import tpu_runtime as rt

    out = RuntimeMetrics()
    held: dict[int, list[int]] = {}  # pid -> chip indexes it holds
    cores: dict[int, int] = {}  # chip index -> TensorCores the service reports for it
    for chip in tpu.chips if tpu else ():
        cores[chip.index] = chip.devices_per_chip or 1
        for h in chip.holders:
            held.setdefault(h.pid, []).append(chip.index)
    if not held:
        return out
    ports = {pid: rt.metrics_port(root, pid) for pid in sorted(held)}
    if not rt.grpc_available():
        out.notes.append(rt.INSTALL_HINT)
        out.sources = [TpuMetricsSource(pid, p.port, p.source, "no-grpc", rt.INSTALL_HINT, [], p.listening) for pid, p in ports.items()]
        return out
    # Processes that share a port (a parent and the child it forked with the chip open) are one server.
    by_port: dict[int, list[int]] = {}
    for pid, p in ports.items():
        if p.port is None:
            out.sources.append(TpuMetricsSource(pid, None, p.source, "not-served", p.note, [], None))
            out.notes.append(f"pid {pid}: {p.note}")
        elif p.listening is False:
            # Whatever answers there is another process: its figures would be shown under this pid.
            why = f"pid {pid} does not listen on localhost:{p.port} (from {p.source}); not asked"
            out.sources.append(TpuMetricsSource(pid, p.port, p.source, "absent", why, [], False))
            out.notes.append(f"no TPU runtime metrics from {why}")
        else:
            by_port.setdefault(p.port, []).append(pid)
    answers = rt.ask_ports(list(by_port), rt.TIMEOUT_S if timeout_s is None else timeout_s)
    for port, pids in by_port.items():
        answer = answers[port]
        chips = sorted({c for pid in pids for c in held[pid]})
        who = f"pid {pids[0]}" if len(pids) == 1 else "pids " + ", ".join(map(str, pids))
        keys: list[str] = []
        if answer.status == "ok":
            per_core = {cores[c] for c in chips}
            figures, note = rt.attribute(answer, chips, max(per_core) if len(per_core) == 1 else 1)
            if note:
                out.problems.append(f"{who}: {note}")
            for f in figures:
                key = f"tpu-chip:{f.chip}"
                keys.append(key)
                owner = next(pid for pid in pids if f.chip in held[pid])
                out.chips[key] = TpuRuntimeChip(
                    pid=owner, port=port, hbm_used_bytes=f.hbm_used_bytes, hbm_total_bytes=f.hbm_total_bytes,
                    duty_cycle_percent=f.duty_cycle_percent, hbm_utilization_percent=f.hbm_utilization_percent, cores=f.cores,
                )  # fmt: skip
        # How the port was chosen, where it is a guess (an unreadable environment, several ports).
        doubt = "; ".join(dict.fromkeys(n for pid in pids if (n := ports[pid].note)))
        if answer.status == "ok":
            if doubt:
                out.notes.append(f"TPU runtime metrics of {who} from localhost:{port}: {doubt}")
        elif answer.status == "absent":
            out.notes.append(f"no TPU runtime metrics from {who}: {answer.reason} ({doubt or ports[pids[0]].source})")
        else:
            out.problems.append(f"TPU runtime metrics of {who}: {answer.reason}" + (f" ({doubt})" if doubt else ""))
        for pid in pids:
            own = [k for k in keys if out.chips[k].pid == pid]
            out.sources.append(TpuMetricsSource(pid, port, ports[pid].source, answer.status, answer.reason, own, ports[pid].listening))
    out.sources.sort(key=lambda s: s.pid)
    return out


def with_runtime(devices: list[MemDevice], processes: list[MemProcess], metrics: RuntimeMetrics) -> tuple[list[MemDevice], list[MemProcess]]:
    """The chips with their figures, and each holder's row with the HBM it uses on that chip."""
    if not metrics.chips:
        return devices, processes
    devices = [dataclasses.replace(d, runtime=metrics.chips[d.key]) if d.key in metrics.chips else d for d in devices]
    out = []
    for p in processes:
        figures = metrics.chips.get(p.device) if p.source == "tpu" else None
        if figures is not None and figures.pid == p.pid and p.used_bytes is None:
            p = dataclasses.replace(p, used_bytes=figures.hbm_used_bytes)
        out.append(p)
    return devices, out


def with_tensorcore_util(metrics: RuntimeMetrics, sdk, tpu) -> None:
    """Add libtpu.sdk's per-core TensorCore utilization (a devctl.probe.tpu_sdk.SdkAnswer) to the chips that
    have figures. The daemon numbers the host's cores, in the order of the chips' PCI addresses (devctl's
    chip order): one figure per chip, or per core and then averaged; any other count is not attributed."""
    if sdk is None or sdk.status == "no-libtpu":
        return
    if sdk.status == "no-data":
        metrics.notes.append(f"no TensorCore utilization: {sdk.reason}")
        return
    if sdk.status != "ok":
        metrics.problems.append(f"TensorCore utilization: {sdk.reason}")
        return
    chips = [c.index for c in tpu.chips] if tpu else []
    values = sdk.values
    per_core = {c.devices_per_chip or 1 for c in tpu.chips} if tpu else {1}
    k = max(per_core) if len(per_core) == 1 else 1
    if chips and len(values) == len(chips):
        groups = [[v] for v in values]
    elif chips and k > 1 and len(values) == len(chips) * k:
        groups = [values[i * k : (i + 1) * k] for i in range(len(chips))]
    else:
        metrics.problems.append(f"TensorCore utilization: libtpu.sdk gave {len(values)} cores for {len(chips)} chips here: not attributed")
        return
    for chip, group in zip(chips, groups):
        key = f"tpu-chip:{chip}"
        if key in metrics.chips:
            metrics.chips[key] = dataclasses.replace(metrics.chips[key], tensorcore_utilization_percent=sum(group) / len(group))
