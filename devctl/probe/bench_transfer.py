"""Probe child for `devctl bench transfer` (`python -m devctl.probe.bench_transfer '<TransferOptions as JSON>'`): the
cells run, each transfer timed, verified and set against its roof. Events as every bench child's
(devctl.probe.bench), with `roof` {MemcpyRoof} once per size and `done` {pcie, pcie_reason}.

Method: docs/bench.md (bench transfer); the result of a call timed alone says the bytes moved (an alias of the source
is zero-copy, with no bandwidth). Beside it, by job: bench_transfer_plan (which cells, on which devices) and
bench_transfer_recipes (how each moves its bytes; host buffers, aliasing); the PCIe roof is at the end of this file.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from dataclasses import replace

from devctl.model import bench_transfer as m
from devctl.model import to_jsonable
from devctl.probe.bench import (
    MIN_CALLS,
    device_free_bytes,
    device_name,
    emit_plan,
    environment,
    failure_note,
    host_available_bytes,
    memory_kinds,
    room_problem,
    run_child,
    time_interleaved,
)
from devctl.probe.bench_transfer_plan import DEVICE_COPIES, Plan, Spec, devices_involved, zero_copy_note
from devctl.probe.bench_transfer_recipes import HostBuffers, Recipes, Transfer, moved_bytes, ranges
from devctl.probe.channel import emit, exit_child
from devctl.units import format_bytes

# The memcpy roof is the best of at least this many copies over at least this long: on a shared machine some
# of them run undisturbed.
ROOF_REPEATS = 10
ROOF_MIN_TIME_S = 0.05


def main() -> int:
    return run_child(m.TransferOptions, measure)


def measure(opts: m.TransferOptions, jax, np) -> dict:
    bench = Bench(opts, jax, np)
    bench.resolve()
    bench.run()
    return {"pcie": [to_jsonable(link) for link in bench.links.values()], "pcie_reason": bench.pcie_reason}


class Bench(Plan, Recipes):
    """Runs the planned cells: each transfer timed, verified and set against its roof."""

    def run(self) -> None:
        from devctl.discovery.nvml import nvml_session

        groups = self.plan()
        # One NVML session for the whole run, on GPUs only: the link reads right after transfers then cost no driver init.
        with nvml_session() if any(d.platform == "gpu" for d in self._devices_used()) else contextlib.nullcontext():
            self._read_pcie_links()
            cells = sum(not _no_pair(s) for g in groups for s in g)  # what the progress bar counts: cells that run
            emit_plan(self.local, environment=self._environment(), cells=cells, sizes_bytes=self.sizes)
            for size, specs in zip(self.sizes, groups):
                self._run_size(size, specs)

    def _run_size(self, size: int, specs: list[Spec]) -> None:
        np = self.np
        on_cpu = any(d.platform == "cpu" for d in self._devices_used())
        host_need = m.host_bytes_needed(
            self.opts, size, devices_in_host_memory=on_cpu, device_count=len(self.local), pinned_path=self.pinned_path
        )  # the estimate `--sizes` is checked against in collect, measured (model.bench)
        avail = host_available_bytes()
        why: str | None = None
        if avail is not None and host_need > avail * 0.8:
            why = f"skipped: needs about {format_bytes(host_need)} of host memory, {format_bytes(avail)} available"
        else:
            try:
                host = HostBuffers(np, size)
            except MemoryError:
                why = f"skipped: could not allocate {format_bytes(size)} of host memory"
        if why:
            emit("roof", **to_jsonable(m.MemcpyRoof(size, 0, None, None, why)))
            for s in specs:
                self._emit_cell(s, self._skipped(s, why))
            return
        roof = self._memcpy_roof(host)
        emit("roof", **to_jsonable(roof))
        for spec in specs:
            self._emit_cell(spec, self._run_cell(spec, host, roof))
            gc.collect()  # free this cell's device buffers before the next one allocates
        del host
        gc.collect()

    def _emit_cell(self, spec: Spec, cell: m.Cell) -> None:
        emit("cell", **to_jsonable(cell), **({"counted": False} if _no_pair(spec) else {}))

    def _memcpy_roof(self, host: HostBuffers) -> m.MemcpyRoof:
        # One thread, as JAX copies on CPU: XLA's CPU client moves each buffer with one std::memcpy
        # (xla/pjrt/cpu/raw_buffer.cc), and numpy copies on the calling thread. The best copy is the roof;
        # a median taken while the machine was busy let cells come out at 120% of it (issue 13).
        np = self.np
        src, dst = host.pattern, host.memcpy_dst

        def copy() -> float:
            t0 = time.perf_counter_ns()
            np.copyto(dst, src)
            return (time.perf_counter_ns() - t0) / 1e9

        opts = replace(self.opts, repeats=max(self.opts.repeats, ROOF_REPEATS), min_time_s=max(self.opts.min_time_s, ROOF_MIN_TIME_S))
        st = time_interleaved({"roof": None}, opts, timed_alone={"roof": copy})["roof"].stats()
        gbps = host.size / st["min_s"] / 1e9 if st["min_s"] else None
        return m.MemcpyRoof(host.size, st["samples"], st["median_s"], gbps, min_s=st["min_s"])

    def _run_cell(self, spec: Spec, host: HostBuffers, roof: m.MemcpyRoof) -> m.Cell:
        why = self._cannot_run(spec)
        if why:
            return self._skipped(spec, why)
        spec, note = self._fit_to_mesh(spec)
        transfer: Transfer | None
        try:
            transfer = self._transfer(spec, host)
            verified = self._verify(transfer, host, spec) if self.opts.verify else None
            # The verification is itself an untimed transfer of the same call: it counts as a warm-up.
            timing, moved = self._time(transfer, self._burst_limit(spec, transfer), warmed=verified is not None)
        except Exception as e:  # an out-of-memory or a backend refusal costs this cell, not the run
            return self._skipped(spec, failure_note(e))
        finally:
            transfer = None
            gc.enable()
        self._sample_links(spec)
        return self._cell(spec, timing, moved, verified, roof, note)

    def _cannot_run(self, spec: Spec) -> str | None:
        if _no_pair(spec) or (spec.layout != "single" and spec.direction == "d2d" and len(self.local) < 2):
            return "skipped: device-to-device needs at least 2 devices"
        if spec.variant == "pinned":
            dev = spec.dst if spec.direction == "h2d" else spec.src
            if "pinned_host" not in memory_kinds(dev):
                return f"skipped: {device_name(dev)} has no pinned_host memory"
        per_device = DEVICE_COPIES * spec.size // (len(spec.devices) if spec.layout == "sharded" else 1)
        return room_problem(self._spec_devices(spec), per_device, host_share=None)  # _run_size checked the host

    def _spec_devices(self, spec: Spec) -> list:
        if spec.devices:
            return list(spec.devices)
        return [d for d in (spec.src, spec.dst) if d is not None and d != "mesh"]

    def _fit_to_mesh(self, spec: Spec) -> tuple[Spec, str | None]:
        """A sharded array must split evenly: round down to a multiple of the device count, and say so."""
        n = len(spec.devices)
        if spec.layout != "sharded" or spec.size % n == 0:
            return spec, None
        size = spec.size - spec.size % n
        return replace(spec, size=size), f"rounded down to {size} bytes, a multiple of {n} devices"

    # ---- timing, verification, statistics -------------------------------------------------------

    def _verify(self, transfer: Transfer, host: HostBuffers, spec: Spec) -> bool:
        """One untimed repetition whose bytes are compared with what was sent: every copy of a replicated result
        (np.asarray reads one, and a d2d broadcast's first is the source itself, which stays home)."""
        np = self.np
        out = transfer.op(transfer.prepare())
        copies = [s.data for s in out.addressable_shards] if spec.layout == "replicated" and hasattr(out, "addressable_shards") else [out]
        want = host.pattern[: spec.size]
        ok = all(got.shape[0] == spec.size and bool(np.array_equal(got, want)) for got in (np.asarray(c).reshape(-1) for c in copies))
        del out, copies
        return ok

    def _burst_limit(self, spec: Spec, transfer: Transfer) -> int:
        """The most calls a burst of this cell may hold (results in flight, each `spec.size` bytes); 0 where the cell
        is timed call by call: a latency, a source that must be fresh each time, or no room for MIN_CALLS results."""
        if spec.size <= m.LATENCY_MAX_BYTES or transfer.burst is None:
            return 0
        if any(d.platform == "cpu" for d in self._spec_devices(spec)):
            # CPU devices: a call is a memcpy of host memory, ~0.05 ms of launch and sync, and bursts there time
            # something else. XLA's CPU client runs device_puts from one source side by side on its threads (a
            # burst of two 64 MiB puts took half the time a call of one alone did, on the 2-core VM), and a chained
            # copy waits on the one before's event (4 MiB: 2.0 ms a call in a burst, 0.25 ms alone).
            return 0
        if spec.direction == "d2h":
            frees = [host_available_bytes()]  # the results land in host memory
        else:
            landing = self._spec_devices(spec) if spec.direction == "d2d-self" or spec.layout != "single" else [spec.dst]
            frees = [device_free_bytes(d) for d in landing]
        room = min([m.BURST_MEMORY_BYTES] + [free // 4 for free in frees if free is not None])
        per_call = spec.size // len(spec.devices) if spec.layout == "sharded" and spec.devices else spec.size
        return int(room // max(per_call, 1))

    def _time(self, transfer: Transfer, limit: int, warmed: bool) -> tuple[dict, int | None]:
        """A cell's Timing fields (time_interleaved) and the bytes that moved, from a call timed alone's result."""
        moved: list[int] = []

        def alone() -> float:
            arg = transfer.prepare()
            src = transfer.sources(arg) if transfer.consumes_source else None  # see Transfer.consumes_source
            t0 = time.perf_counter_ns()
            out = transfer.op(arg)
            seconds = (time.perf_counter_ns() - t0) / 1e9
            moved.append(moved_bytes(ranges(out), transfer.sources(arg) if src is None else src))
            return seconds

        call = transfer.burst if limit >= MIN_CALLS else None
        timing = time_interleaved({"cell": call}, self.opts, timed_alone={"cell": alone}, limits={"cell": limit}, warmed=int(warmed))
        return timing["cell"].stats(), min(moved, default=None)

    def _cell(self, spec: Spec, st: dict, moved, verified, roof: m.MemcpyRoof, note) -> m.Cell:
        zero = moved == 0
        involved = devices_involved(spec)
        gbps = None if zero or moved is None or not st["median_s"] else moved / st["median_s"] / 1e9
        peak = None if gbps is None else moved / st["min_s"] / 1e9
        per_dev = None if gbps is None else gbps / involved
        roof_kind, roof_gbps, roof_reason = self._roof_for(spec, roof)
        pct, suspect = m.roof_verdict(gbps, roof_kind, roof_gbps)
        notes = [n for n in (note, zero_copy_note(spec) if zero else None) if n]
        if verified is False:
            notes.append("bytes did not arrive unchanged")
        return m.Cell(
            **self._what(spec),
            bytes_moved=moved,
            gbps=gbps,
            peak_gbps=peak,
            per_device_gbps=per_dev,
            zero_copy=zero,
            verified=verified,
            roof=roof_kind,
            roof_gbps=roof_gbps,
            pct_of_roof=pct,
            roof_reason=roof_reason,
            note="; ".join(notes) or None,
            suspect=suspect,
            **st,
        )

    def _roof_for(self, spec: Spec, roof: m.MemcpyRoof) -> tuple[str | None, float | None, str | None]:
        devs = self._spec_devices(spec)
        on_cpu = bool(devs) and all(d.platform == "cpu" for d in devs)
        if on_cpu and spec.layout != "single":
            # XLA's CPU client copies a mesh's shards at once, on its worker threads: one thread's memcpy is no limit.
            return None, None, "no roof for a mesh of CPU devices: their shards are copied in parallel, the memcpy roof is one thread's"
        if on_cpu:
            # CPU "devices" live in host memory: every direction is a host memory copy.
            if roof.gbps is None:
                return None, None, roof.note or "host memcpy not measured"
            return "host_memcpy", roof.gbps, None
        if spec.direction in ("h2d", "d2h") and devs:
            links = [self.links.get(d.id) for d in devs]
            peaks = [link.peak_gbps for link in links if link is not None and link.peak_gbps]
            if len(peaks) == len(links):  # every link known
                if spec.layout == "replicated" and spec.direction == "d2h":
                    peaks = peaks[:1]
                # Several devices at once: their links add up (the host side may still be the limit).
                return "pcie", sum(peaks), None
            known = [link.reason for link in links if link is not None and link.reason]
            reason = (known[0] if known else None) or self.pcie_reason or "PCIe link not known for this device"
            return None, None, reason
        return None, None, "no roof for this path (NVLink, ICI and HBM peaks are not queried)"

    def _endpoint(self, dev, spec: Spec) -> str:
        if dev is None:
            return "host"
        if dev == "mesh":
            return device_name(spec.devices[0]).split(":")[0] + ":all"
        return device_name(dev)

    def _skipped(self, spec: Spec, why: str) -> m.Cell:
        return m.Cell(**self._what(spec), skipped=True, note=why)

    def _what(self, spec: Spec) -> dict:
        """The fields that say which cell this is: the same whether it ran or was skipped."""
        d2d_alone = _no_pair(spec)  # one device: nothing to copy to
        return dict(
            direction=spec.direction,
            variant=spec.variant,
            layout=spec.layout,
            size_bytes=spec.size,
            src=self._endpoint(spec.src, spec),
            dst="none" if d2d_alone else self._endpoint(spec.dst, spec),
            devices_involved=devices_involved(spec),
        )

    # ---- PCIe (NVIDIA only) --------------------------------------------------------------------

    def _read_pcie_links(self) -> None:
        gpus = [d for d in self._devices_used() if d.platform == "gpu"]
        if not gpus:
            self.pcie_reason = "no GPU among the devices measured"
            return
        self.links, self.pcie_reason = read_nvml_links(gpus)

    def _sample_links(self, spec: Spec) -> None:
        """The link may train down when idle: read the current state right after a large transfer."""
        if not self.links or spec.direction not in ("h2d", "d2h") or spec.size < LINK_SAMPLE_MIN_BYTES:
            return
        for d in self._spec_devices(spec):
            link = self.links.get(d.id)
            if link is not None and link.reason is None:
                self.links[d.id] = sample_link(link)

    def _environment(self) -> dict:
        return environment(
            self.jax, self.np, self.local, self.opts, self.sweep_note, sizes_bytes=self.sizes, pairs_note=self.pairs_note,
            min_time_s=self.opts.min_time_s, verify=self.opts.verify, dtype="uint8",
        )  # fmt: skip


def _no_pair(spec: Spec) -> bool:
    """A d2d cell of a run with one device: planned so the report says why, never run, not counted as progress."""
    return spec.direction == "d2d" and spec.dst is None


# ---- the PCIe roof: each GPU's link from NVML (discovery.nvml) and its theoretical peak -------------------------

# Read the PCIe link state after transfers at least this large (small ones may not wake a power-saving link).
LINK_SAMPLE_MIN_BYTES = 1 << 20
# Generation -> (GT/s per lane, encoding efficiency), reference B.4/B.5.
PCIE_GEN = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 236 / 256),  # FLIT mode: 236 payload bytes per 256-byte flit (approximate)
}


def pcie_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical per-direction peak: GT/s x lanes x encoding / 8, decimal GB/s."""
    if gen not in PCIE_GEN or not width:
        return None
    gts, eff = PCIE_GEN[gen]
    return gts * width * eff / 8


def read_nvml_links(gpus: list) -> tuple[dict[int, m.PcieLink], str | None]:
    """Each GPU's PCIe link from NVML (discovery.nvml), keyed by jax device id; NVML's absence is normal and only recorded."""
    from devctl.discovery.nvml import pcie_links

    keys: dict[int, str | int] = {}
    unknown: dict[int, m.PcieLink] = {}
    for d in gpus:
        try:
            keys[d.id] = nvml_key(d)
        except Exception as e:  # which GPU NVML calls it is unknown: this device has no roof, the others still do
            unknown[d.id] = m.PcieLink(device=device_name(d), reason=f"NVML could not read the link: {e}")
    found, reason = pcie_links(list(keys.values()))
    if reason is not None:
        return {}, f"NVML unavailable: {reason}"
    read = dict(zip(keys, found))
    return {d.id: unknown[d.id] if d.id in unknown else roof_link(device_name(d), read[d.id]) for d in gpus}, None


def nvml_key(dev) -> str | int:
    """How NVML finds a jax GPU device: the PCI bus id CUDA gives for it, else its ordinal where that is NVML's index."""
    from devctl.probe.backends import cuda_pci_bus_id

    bus = getattr(dev, "pci_bus_id", None) or cuda_pci_bus_id(dev.local_hardware_id)
    if bus:
        return bus
    # No bus id (no libcuda to ask): CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's ordinals NVML's indexes.
    ordinal = dev.local_hardware_id if dev.local_hardware_id is not None else dev.id
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return int(ordinal)
    raise LookupError(f"cannot tell which NVML GPU is CUDA device {ordinal}: no PCI bus id from CUDA")


# Without these there is no roof: the peak is the maximum generation times the maximum width.
_ROOF_FIELDS = ("handle", "pci_bus_id", "pcie_link_gen_max", "pcie_link_width_max")


def roof_link(name: str, link) -> m.PcieLink:
    """The bench's link from NVML's facts (model.hardware.GpuPcieLink)."""
    missing = next((link.unavailable[f] for f in _ROOF_FIELDS if f in link.unavailable), None)
    if missing is not None:
        return m.PcieLink(device=name, reason=f"NVML could not read the link: {missing}")
    out = m.PcieLink(
        device=name,
        pci_bus_id=link.pci_bus_id,
        max_gen=link.pcie_link_gen_max,
        max_width=link.pcie_link_width_max,
        gpu_max_gen=link.pcie_link_gen_gpu_max,
        peak_gbps=pcie_peak_gbps(link.pcie_link_gen_max, link.pcie_link_width_max),
    )
    if out.peak_gbps is None:
        return replace(out, reason=f"unknown PCIe generation {link.pcie_link_gen_max}")
    return out


def sample_link(link: m.PcieLink) -> m.PcieLink:
    """Fold the current generation and width into the highest seen so far."""
    from devctl.discovery.nvml import pcie_links

    if link.pci_bus_id is None:  # NVML finds no GPU by a missing bus id: nothing new to fold in
        return link
    found, _ = pcie_links([link.pci_bus_id])
    now = found[0] if found else None
    if now is None or now.pcie_link_gen_current is None or now.pcie_link_width_current is None:
        return link
    seen_gen = max(now.pcie_link_gen_current, link.seen_gen or 0)
    seen_width = max(now.pcie_link_width_current, link.seen_width or 0)
    below = seen_gen < (link.max_gen or 0) or seen_width < (link.max_width or 0)
    return replace(link, seen_gen=seen_gen, seen_width=seen_width, below_max=below)


if __name__ == "__main__":
    exit_child(main)
