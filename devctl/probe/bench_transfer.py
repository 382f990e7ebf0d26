"""Probe child for `devctl bench transfer` (`python -m devctl.probe.bench_transfer '<TransferOptions as JSON>'`): the
cells run, each transfer timed, verified and set against its roof. Events as every bench child's
(devctl.probe.bench), with `roof` {MemcpyRoof} once per size and `done` {pcie, pcie_reason}.

Method (reference/monitoring-and-transfer.md B.6): host buffers filled before any timing, timed by the engine
(devctl.probe.bench.time_interleaved). A latency cell (LATENCY_MAX_BYTES and below), a cell that needs a fresh
source for every repetition (wherever JAX would cache or consume it) and any cell of CPU devices is timed call by
call; any other in bursts (at most BURST_MEMORY_BYTES of results in flight). The result of a call timed alone
says the bytes moved: an alias of the source is zero-copy, with no bandwidth.

Beside it, by job: bench_transfer_plan (which cells, on which devices), bench_transfer_recipes (how each moves
its bytes), bench_transfer_buffers (host buffers, aliasing) and bench_transfer_links (the PCIe roof).
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import replace

from devctl.model import bench_transfer as m
from devctl.model import to_jsonable
from devctl.probe.bench import MIN_CALLS, environment, failure_note, run_child, time_interleaved
from devctl.probe.bench_devices import device_free_bytes, device_info, device_name, host_available_bytes, memory_kinds
from devctl.probe.bench_transfer_buffers import HostBuffers, moved_bytes, ranges
from devctl.probe.bench_transfer_links import LINK_SAMPLE_MIN_BYTES, read_nvml_links, sample_link
from devctl.probe.bench_transfer_plan import DEVICE_COPIES, Plan, Spec, devices_involved, zero_copy_note
from devctl.probe.bench_transfer_recipes import Recipes, Transfer
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
            emit(
                "plan",
                devices=[to_jsonable(device_info(d)) for d in self.local],
                environment=self._environment(),
                cells=sum(not _no_pair(s) for g in groups for s in g),  # what the progress bar counts: cells that run
                sizes_bytes=self.sizes,
            )
            for size, specs in zip(self.sizes, groups):
                self._run_size(size, specs)

    def _run_size(self, size: int, specs: list[Spec]) -> None:
        np = self.np
        host_need = m.host_bytes_needed(
            self.opts, size, devices_in_host_memory=self._devices_share_host(), device_count=len(self.local),
            pinned_path=self.pinned_path,
        )  # the estimate `--sizes` is checked against in collect, measured (model.bench)
        avail = host_available_bytes()
        if avail is not None and host_need > avail * 0.8:
            why = f"skipped: needs about {format_bytes(host_need)} of host memory, {format_bytes(avail)} available"
            emit("roof", **to_jsonable(m.MemcpyRoof(size, 0, None, None, why)))
            for s in specs:
                emit("cell", **to_jsonable(self._skipped(s, why)), **({"counted": False} if _no_pair(s) else {}))
            return
        try:
            host = HostBuffers(np, size)
        except MemoryError:
            why = f"skipped: could not allocate {format_bytes(size)} of host memory"
            emit("roof", **to_jsonable(m.MemcpyRoof(size, 0, None, None, why)))
            for s in specs:
                emit("cell", **to_jsonable(self._skipped(s, why)), **({"counted": False} if _no_pair(s) else {}))
            return
        roof = self._memcpy_roof(host)
        emit("roof", **to_jsonable(roof))
        for spec in specs:
            cell = self._run_cell(spec, host, roof)
            emit("cell", **to_jsonable(cell), **({"counted": False} if _no_pair(spec) else {}))
            gc.collect()  # free this cell's device buffers before the next one allocates
        del host
        gc.collect()

    def _devices_share_host(self) -> bool:
        return any(d.platform == "cpu" for d in self._devices_used())

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
        if _no_pair(spec):
            return "skipped: device-to-device needs at least 2 devices"
        if spec.layout != "single" and spec.direction == "d2d" and len(self.local) < 2:
            return "skipped: device-to-device needs at least 2 devices"
        if spec.variant == "pinned":
            dev = spec.dst if spec.direction == "h2d" else spec.src
            if "pinned_host" not in memory_kinds(dev):
                return f"skipped: {device_name(dev)} has no pinned_host memory"
        need = DEVICE_COPIES * spec.size
        for d in self._spec_devices(spec):
            free = device_free_bytes(d)
            per_device = need // len(spec.devices) if spec.layout == "sharded" else need
            if free is not None and per_device > free:
                return f"skipped: needs about {format_bytes(per_device)} on {device_name(d)}, {format_bytes(free)} free"
        return None

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
        """A cell's Timing fields and the bytes that really moved, timed by the engine every bench uses
        (probe.bench.time_interleaved, with this one cell): bursts of K calls (at most `limit`) and one
        block_until_ready, or, where `limit` is under MIN_CALLS, call by call. A call timed alone (op: dispatch and
        wait, its fresh source prepared untimed) is a sample of the latter, and beside the first bursts of the
        former; its result's buffers say how many bytes moved (an alias of the source moved none)."""
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
        if devs and all(d.platform == "cpu" for d in devs) and spec.layout != "single":
            # XLA's CPU client copies a mesh's shards at once, on its worker threads: one thread's memcpy is no limit.
            return None, None, "no roof for a mesh of CPU devices: their shards are copied in parallel, the memcpy roof is one thread's"
        if devs and all(d.platform == "cpu" for d in devs):
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
        links, reason = read_nvml_links(gpus)
        self.links, self.pcie_reason = links, reason

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


if __name__ == "__main__":
    exit_child(main)
