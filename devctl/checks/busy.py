"""The busy check: is any accelerator busier than --max-busy (someone else is using the GPU this job is about to
time), or idler than --min-busy (the job that should keep it busy is stalled or gone)?

One figure per accelerator, the best this machine has, and the message says which: GPM's SM active over the
window devctl sampled (Hopper and newer), else NVML's utilization (a kernel was running) over the driver's
last sample period; on TPU, the TensorCore duty cycle libtpu's runtime metrics give for the process holding the
chip, and 0% for a chip no process holds. The figures are read before check's own probes start
(collect.check_context.Context.busy), so devctl's own work is not in them.

No accelerator is a skip; an accelerator without a figure is a warning (--strict fails it): devctl does not pass
what it could not read, nor fail a runner for a counter its driver lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from devctl.checks.verdict import Verdict, failed, join, passed, skipped, warned
from devctl.model.busy import GpuBusy

if TYPE_CHECKING:
    # collect/ runs the checks and hands each its Context: named here for the checker only (no runtime import upward).
    from devctl.collect.check_context import BusyReading, Context


@dataclass(frozen=True)
class Figure:
    """One accelerator's busy-ness as one figure, said with what it is and over what."""

    device: str  # "cuda:0" (a GPU JAX uses), "nvml:3" (a GPU it does not), "tpu-chip:0"; a MIG instance adds " MIG 1"
    ratio: float | None  # 0..1; None: no figure, and `why` says why
    measure: str  # "SM active", "kernel running", "TensorCore duty cycle", "idle"
    over: str  # over what, from where: "over 1 s (GPM)"
    source: str  # "gpm", "nvml-utilization", "tpu-runtime", "no-holder"
    why: str | None = None

    @property
    def way(self) -> str:
        """What the figure is and over what: "SM active over 1.0 s (GPM)"."""
        return f"{self.measure} {self.over}"

    def said(self) -> str:
        """This device's figure alone, after its way: "cuda:0 64%"; a chip nobody holds is named only."""
        if self.ratio is None:
            return f"{self.device}: {self.why}"
        return self.device if self.source == "no-holder" else f"{self.device} {_pct(self.ratio)}"


def _pct(ratio: float) -> str:
    return f"{100 * ratio:.0f}%"


def _grouped(found: list[Figure]) -> str:
    """The figures by the way each was measured: "SM active over 1.0 s (GPM): cuda:0 64%, cuda:1 70%"; every
    device named (a scheduler drains exactly these)."""
    ways: dict[str, list[str]] = {}
    for f in found:
        ways.setdefault(f.way, []).append(f.said())
    return "; ".join(f"{way}: {', '.join(devices)}" for way, devices in ways.items())


def gpu_figures(device: str, b: GpuBusy) -> list[Figure]:
    """The figure of one NVIDIA GPU: GPM's SM active where it has it (each MIG instance's, in MIG mode), else NVML's
    utilization, said as what it is."""
    if b.source == "gpm":
        over = f"over {b.window_s:.1f} s (GPM)" if b.window_s is not None else "(GPM)"
        if b.counters.sm_active_ratio is not None:
            return [Figure(device, b.counters.sm_active_ratio, "SM active", over, "gpm")]
        if b.mig:
            return [
                Figure(f"{device} MIG {m.gpu_instance_id}", m.counters.sm_active_ratio, "SM active", over, "gpm",
                       None if m.counters.sm_active_ratio is not None else f"GPM gave no SM active: {m.unavailable.get('counters') or m.unavailable.get('sm_active_ratio') or 'unknown'}")
                for m in b.mig
            ]  # fmt: skip
    if b.kernel_active_ratio is not None:
        return [Figure(device, b.kernel_active_ratio, "kernel running", "in NVML's last sample period (NVML utilization; no GPM)", "nvml-utilization")]
    why = b.unavailable.get("kernel_active_ratio") or b.unavailable.get("counters") or "unknown"
    return [Figure(device, None, "", "", b.source, f"NVML gave no utilization: {why}")]


def figures(reading: BusyReading, jax_names: dict[int, str]) -> tuple[list[Figure], list[str]]:
    """Every accelerator's figure, and the GPUs left out: where JAX uses some NVIDIA GPUs (`jax_names`, NVML index ->
    its JAX device), only those are judged (a job under CUDA_VISIBLE_DEVICES=3 asks about GPU 3, not its neighbours')."""
    out: list[Figure] = []
    left_out: list[str] = []
    for index, b in sorted(reading.gpus.items()):
        if jax_names and index not in jax_names:
            left_out.append(f"nvml:{index}")
            continue
        out += gpu_figures(jax_names.get(index, f"nvml:{index}"), b)
    tpu = reading.tpu
    chips = reading.runtime.chips if reading.runtime is not None else {}
    problems = (reading.runtime.problems + reading.runtime.notes) if reading.runtime is not None else []
    for chip in tpu.chips if tpu is not None else ():
        key = f"tpu-chip:{chip.index}"
        figures_ = chips.get(key)
        if not chip.holders:
            unseen = tpu.uninspectable_processes if tpu is not None else 0
            over = "(no process holds it" + (f"; {unseen} process(es) devctl could not inspect)" if unseen else ")")
            out.append(Figure(key, 0.0, "idle", over, "no-holder"))
        elif figures_ is not None and figures_.duty_cycle_percent is not None:
            ratio = min(max(figures_.duty_cycle_percent / 100, 0.0), 1.0)
            out.append(Figure(key, ratio, "TensorCore duty cycle", "in libtpu's last sample period (TPU runtime metrics)", "tpu-runtime"))
        else:
            pids = ", ".join(str(h.pid) for h in chip.holders)
            why = f"held by pid {pids}, whose TPU runtime metrics gave no duty cycle" + (f" ({join(problems, 1)})" if problems else "")
            out.append(Figure(key, None, "", "", "tpu-runtime", why))
    return out, left_out


def check_busy(ctx: Context) -> Verdict:
    most, least = ctx.expectations.max_busy_percent, ctx.expectations.min_busy_percent
    if most is None and least is None:
        return skipped("not asked (--max-busy fails when an accelerator is busier than PCT, --min-busy when one is idler)")
    reading = ctx.busy()
    jax_names = {d.nvml_gpu["index"]: f"{d.platform}:{d.id}" for d in ctx.inventory().devices if d.nvml_gpu}
    found, left_out = figures(reading, jax_names)
    expected = " and ".join(
        part for part in (f"at most {most:g}%" if most is not None else "", f"at least {least:g}%" if least is not None else "") if part
    )
    details = {
        "figures": {f.device: {"percent": None if f.ratio is None else round(100 * f.ratio, 2), "measure": f.way if f.ratio is not None else None, "source": f.source, "why": f.why} for f in found},
        "window_s": reading.window_s,
        "expected_max_percent": most,
        "expected_min_percent": least,
        "not_judged": left_out,
    }  # fmt: skip
    if not found:
        nvml = f"NVML: {reading.nvml_reason}" if reading.nvml_reason else "NVML sees no GPU"
        return skipped(f"no accelerator to judge ({nvml}; no TPU chip)", **details)
    too_busy = [f for f in found if f.ratio is not None and most is not None and 100 * f.ratio > most]
    too_idle = [f for f in found if f.ratio is not None and least is not None and 100 * f.ratio < least]
    unread = [f for f in found if f.ratio is None]
    if too_busy or too_idle:
        parts = [f"{_grouped(too_busy)}; expected at most {most:g}% (--max-busy)"] if too_busy else []
        parts += [f"{_grouped(too_idle)}; expected at least {least:g}% (--min-busy)"] if too_idle else []
        if unread:
            parts.append(f"not read: {', '.join(f.device for f in unread)}")
        remedy = (
            "another process is using it: see devctl memstats (its processes and SM/TC/DRAM %) and wait, or run on another accelerator"
            if too_busy
            else "the job that should keep it busy is stalled or gone: see devctl memstats --watch for its processes and busy-ness"
        )
        return failed(join(parts, len(parts)), remedy, **details)
    if unread:
        return warned(
            f"could not read how busy {join([f.said() for f in unread], len(unread))}; expected {expected}",
            "GPM needs a Hopper or newer GPU and NVML; a TPU's duty cycle needs its holder's runtime metrics (pip install 'jax-devctl[tpu-metrics]')",
            **details,
        )
    note = f"; {len(left_out)} GPU(s) JAX does not use not judged" if left_out else ""
    return passed(f"{_grouped(found)}; expected {expected}{note}", **details)
