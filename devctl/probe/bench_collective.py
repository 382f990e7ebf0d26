"""Probe child for `devctl bench collective` (`python -m devctl.probe.bench_collective '<CollectiveOptions as JSON>'`).
Events as every bench child's (devctl.probe.bench), with `hosts` {figures} (--distributed, process 0: every
process's own medians), `done` {sweep_note} and error kind `join`.

Method: docs/bench.md (bench collective), as nccl-tests and a JAX user would time a collective. With --distributed
every choice that depends on a timing is process 0's (Agreement, below), so every process runs the same calls.
"""

from __future__ import annotations

import gc
import json
import math
import socket
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from devctl.model import bench_collective as m
from devctl.model import to_jsonable
from devctl.model.bench import ChipOptions
from devctl.probe.bench import (
    CPU_DEVICES_HINT,
    MIN_CALLS,
    ChildProblem,
    UsageProblem,
    chained,
    device_name,
    emit_plan,
    environment,
    failure_note,
    room_problem,
    run_child,
    single_call,
    time_interleaved,
)
from devctl.probe.bench_collective_ops import (
    Layout,
    axis_groups,
    build_mesh,
    compiled_collective,
    elements,
    import_shard_map,
    make_input,
    output_is_right,
)
from devctl.probe.channel import emit, exit_child
from devctl.text import first_line
from devctl.units import format_seconds, format_size_short

# Outputs a burst may have in flight at once (calls of a burst whose outputs are not chained each allocate one).
BURST_MEMORY_BYTES = 1 << 30
# Device memory a cell may take: its input and output, and XLA's scratch, against what is free.
MEMORY_FACTOR = 1.5
# Host memory forced CPU devices may take together, of what is available: the machine keeps working.
HOST_SHARE = 0.5


def main() -> int:
    return run_child(m.CollectiveOptions, measure)


def measure(opts: m.CollectiveOptions, jax, np) -> dict:
    agreement = Agreement()
    if opts.cluster is not None:
        try:
            agreement = join_cluster(jax, opts.cluster)
        except Exception as e:
            raise JoinProblem(f"distributed: could not join the cluster: {type(e).__name__}: {first_line(e)}") from e
    try:
        bench = Bench(opts, jax, np, agreement)
        bench.resolve()
    except UsageProblem:
        leave(jax, agreement)  # every process sees the same mesh: they all leave here
        raise
    except Exception as e:  # no backend could start: one line
        raise ChildProblem(f"JAX found no usable device: {type(e).__name__}: {first_line(e)}") from e
    bench.run()
    leave(jax, agreement)
    return {"sweep_note": bench.sweep_note()}


class JoinProblem(ChildProblem):
    kind = "join"


@dataclass
class Series:
    """One collective on one axis in one dtype, swept over sizes: what the default sweep predicts the next size from."""

    points: list[tuple[int, float]] = field(default_factory=list)  # (size, median call) measured so far
    stopped: bool = False
    figures: list[dict] = field(default_factory=list)

    def predict(self, size: int) -> float | None:
        """A call's time at `size`, from the last two sizes: their marginal cost per byte carried on (small sizes
        cost their latency, not size / their bandwidth, so one point alone would stop the sweep too early)."""
        if len(self.points) < 2:
            return None
        (s1, t1), (s2, t2) = self.points[-2:]
        per_byte = max((t2 - t1) / (s2 - s1), 0.0) if s2 > s1 else 0.0
        return t2 + per_byte * (size - s2)


class Bench:
    def __init__(self, opts: m.CollectiveOptions, jax, np, agreement: Agreement):
        self.opts, self.jax, self.np, self.agreement = opts, jax, np, agreement
        # Every device of the cluster in process order (one process: jax.devices() as it lists them).
        self.devices = sorted(jax.devices(), key=lambda d: (getattr(d, "process_index", 0), d.id))
        self.processes = max(getattr(d, "process_index", 0) for d in self.devices) + 1
        self.sweep_notes: list[str] = []
        self.layout: Layout | None = None
        self.axes: list[m.MeshAxis] = []
        self.unmeasured_axes: tuple[str, ...] = ()

    # ---- the mesh ----------------------------------------------------------------------------------

    def resolve(self) -> None:
        n = len(self.devices)
        if n < 2:
            name = device_name(self.devices[0]) if self.devices else "none"
            hint = CPU_DEVICES_HINT if self.devices and self.devices[0].platform == "cpu" else ""
            raise UsageProblem(f"one device here ({name}): a collective needs at least 2 devices, so there is nothing to measure{hint}")
        axes = self.opts.mesh or self._default_axes()
        product = math.prod(size for _, size in axes)
        if product != n:
            shown = ",".join(f"{a}={s}" for a, s in axes)
            raise UsageProblem(f"--mesh {shown} has {product} devices, but there are {n}: the axis sizes must multiply to {n}")
        self.layout = build_mesh(self.jax, self.np, self.devices, axes)
        self.unmeasured_axes = tuple(name for name, size in axes if size < 2)  # one device: nothing to exchange
        for name, size in axes:
            if size < 2:
                continue
            groups = axis_groups(self.layout, self.np, name)
            crosses = any(len({getattr(d, "process_index", 0) for d in g}) > 1 for g in groups)
            self.axes.append(m.MeshAxis(name, size, len(groups), "inter-host" if crosses else "intra-host", tuple(device_name(d) for d in groups[0])))
        if not self.axes:
            raise UsageProblem("--mesh has no axis of 2 or more devices: a collective over one device exchanges nothing")

    def _default_axes(self) -> tuple[tuple[str, int], ...]:
        """One axis over every device; across processes, one axis within each process and one across them,
        so the intra-host links (NVLink, ICI) and the inter-host network are measured apart."""
        n = len(self.devices)
        if self.processes == 1:
            return (("devices", n),)
        per = n // self.processes
        if per * self.processes != n:
            raise UsageProblem(f"the {self.processes} processes hold {n} devices, not the same number each: give --mesh to say how to arrange them")
        return (("hosts", self.processes), ("local", per))

    # ---- running ------------------------------------------------------------------------------------

    def sizes(self) -> tuple[int, ...]:
        if self.opts.sizes_bytes is not None:
            return self.opts.sizes_bytes
        return m.QUICK_SIZES if self.opts.quick else m.DEFAULT_SIZES

    def run(self) -> None:
        sizes = self.sizes()
        cells = len(self.opts.dtypes) * len(self.axes) * len(self.opts.collectives) * len(sizes)
        if self.opts.all_pairs:
            cells += sum(a.size * (a.size - 1) for a in self.axes) * len(self.opts.dtypes)
        emit_plan(self.devices, axes=[to_jsonable(a) for a in self.axes], environment=self._environment(), cells=cells)
        figures: list[dict] = []
        for dtype in self.opts.dtypes:
            for axis in self.axes:
                ring_sizes: list[int] = []
                for collective in self.opts.collectives:
                    series = Series()
                    ran = 0
                    for size in sizes:
                        cell = self._sweep_cell(series, collective, axis, size, dtype)
                        if cell is not None:
                            ran += 1
                            emit("cell", **to_jsonable(cell))
                            if not cell.skipped and collective == "ppermute":
                                ring_sizes.append(size)
                    if ran < len(sizes):  # the default sweep stopped this series: its other cells will not run
                        emit("dropped", cells=len(sizes) - ran)
                    figures += series.figures
                if self.opts.all_pairs:
                    self._pairs(axis, dtype, max(ring_sizes) if ring_sizes else max(sizes))
        gathered = self.agreement.gather(figures)
        if gathered is not None and self.processes > 1:
            emit("hosts", figures=gathered)

    def _sweep_cell(self, series: Series, collective: str, axis: m.MeshAxis, size: int, dtype: str) -> m.CollectiveCell | None:
        """One size of a series; None once the default sweep has stopped growing it (the sweep note says where)."""
        if series.stopped:
            return None
        predicted = series.predict(size)
        cost = predicted * (max(self.opts.warmups, 1) + self.opts.repeats) if predicted is not None else None
        # Asked once per cell whatever this process measured so far (a cell skipped here alone must not shift which
        # of process 0's answers the next question reads); process 0's cost is the one said.
        stop = self.agreement.agree([self.opts.sizes_bytes is None and cost is not None and cost > self.opts.cell_cap_s, cost])
        if stop[0]:
            series.stopped = True
            where = f"{collective} on {axis.name}" + (f" ({dtype})" if len(self.opts.dtypes) > 1 else "")
            self.sweep_notes.append(f"{where} after {format_size_short(series.points[-1][0]) if series.points else 'its first size'} (about {format_seconds(stop[1])})")
            return None
        cell = self._cell(collective, axis, size, dtype)
        if not cell.skipped and cell.median_s:
            series.points.append((cell.size_bytes, cell.median_s))
            series.figures = [self._figure(cell)]  # the largest measured size is the one compared across hosts
        return cell

    def sweep_note(self) -> str | None:
        if not self.sweep_notes:
            return None
        return (
            f"the default sweep stops a collective where its next cell would take over {self.opts.cell_cap_s:g} s: "
            f"{'; '.join(self.sweep_notes)}; --sizes measures any size"
        )

    def _pairs(self, axis: m.MeshAxis, dtype: str, size: int) -> None:
        """ppermute between every ordered pair of the axis, alone: one link at a time (a link matrix)."""
        named = axis.groups == 1  # one group: a pair is two devices; several: the same pair in every group at once
        label = lambda i: axis.first_group[i] if named else f"{axis.name}[{i}]"
        for i in range(axis.size):
            for j in range(axis.size):
                if i == j:
                    continue
                cell = self._cell("ppermute-pair", axis, size, dtype, pair=(i, j), src=label(i), dst=label(j))
                emit("cell", **to_jsonable(cell))

    def _cell(self, collective: str, axis: m.MeshAxis, size: int, dtype: str, *, pair=None, src=None, dst=None) -> m.CollectiveCell:
        n = 2 if pair is not None else axis.size
        name = "ppermute-pair" if pair else collective
        itemsize = self.jax.numpy.dtype(dtype).itemsize
        local_elements, measured = elements("ppermute" if pair else collective, size, axis.size, itemsize)
        what = {"collective": collective, "axis": axis.name, "ranks": n, "size_bytes": max(measured, 1), "dtype": dtype, "src": src, "dst": dst}
        note = None if measured == size else f"rounded down to {measured} bytes, whole elements in each of {axis.size} pieces"
        if local_elements < 1:
            return m.CollectiveCell(**what, skipped=True, note=f"skipped: {format_size_short(size)} is less than one {dtype} element per device")
        why = self.agreement.agree(self._cannot_fit(collective, measured, axis.size))
        if why:
            return m.CollectiveCell(**what, skipped=True, note=why)
        assert self.layout is not None  # resolve() made it
        x = compiled = None
        try:
            x = make_input(self.jax, self.layout, local_elements, dtype, axis.name)
            t0 = time.perf_counter()
            compiled = compiled_collective(self.jax, self.layout, name, axis.name, axis.size, x, pair)
            compile_s = time.perf_counter() - t0
            stats = self._time(
                compiled, x, burst=measured > m.LATENCY_MAX_BYTES, out_bytes=m.output_bytes(collective, measured, axis.size),
                chain=name in ("all-reduce", "all-to-all", "ppermute", "ppermute-pair"),
            )  # fmt: skip
            # The result of one more call, checked: a collective that moved the wrong blocks, or none, has no figure.
            verified = output_is_right(self.np, self.layout, axis.name, name, compiled(x), pair)
        except Exception as e:  # an out-of-memory or a backend refusal costs this cell, not the run
            return m.CollectiveCell(**what, skipped=True, note=failure_note(e))
        finally:
            del x, compiled
            gc.collect()  # free this cell's buffers before the next one allocates
        algbw, busbw = m.bandwidths(collective, measured, n, stats["median_s"]) if verified else (None, None)
        if not verified:
            note = "; ".join(filter(None, [note, "the result was wrong (not what the collective gives on these inputs): no bandwidth reported"]))
        return m.CollectiveCell(
            **what, **stats, algbw_gbps=algbw, busbw_gbps=busbw, compile_s=round(compile_s, 6), verified=verified, note=note
        )

    def _cannot_fit(self, collective: str, size: int, n: int) -> str | None:
        per_device = int((m.input_bytes(collective, size, n) + m.output_bytes(collective, size, n)) * MEMORY_FACTOR)
        # This process's own devices; forced CPU devices all live in host memory.
        return room_problem([d for d in self.devices if getattr(d, "process_index", 0) == self.agreement.me], per_device, host_share=HOST_SHARE)

    def _time(self, compiled, x, *, burst: bool, out_bytes: int, chain: bool) -> dict:
        """The cell's Timing fields from time_interleaved, every choice agreed by every process; chained where the
        output has the input's shape."""
        budget = ChipOptions(repeats=self.opts.repeats, min_time_s=self.opts.budget_s, warmups=max(self.opts.warmups, int(burst)))
        limit = max(MIN_CALLS, BURST_MEMORY_BYTES // max(out_bytes, 1)) if burst else 0
        if self.devices[0].platform == "cpu":
            limit = min(limit, m.CPU_MAX_BURST)
        timing = time_interleaved(
            {"cell": chained(x, compiled) if chain else lambda: compiled(x)}, budget, timed_alone={"cell": partial(single_call, lambda: compiled(x))},
            limits={"cell": limit}, agree=self.agreement.agree,
        )["cell"]  # fmt: skip
        return timing.stats()

    def _figure(self, cell: m.CollectiveCell) -> dict:
        return {k: getattr(cell, k) for k in ("collective", "axis", "size_bytes", "dtype", "median_s", "busbw_gbps")}

    def _environment(self) -> dict:
        _, where = import_shard_map()
        return environment(
            self.jax, self.np, self.jax.local_devices(), self.opts, None, shard_map=where, device_kind=self.devices[0].device_kind,
            process_count=self.processes, process_index=self.agreement.me, budget_s=self.opts.budget_s,
            axes_note=f"{' and '.join(self.unmeasured_axes)}: one device along it, nothing to exchange, not measured"
            if self.unmeasured_axes else None,
        )  # fmt: skip


# ---- --distributed: join the cluster, agree on every choice, share figures ------------------------------------
# Every process runs the same jitted collectives in the same order, or they wait on each other forever. So every
# choice that depends on a timing (how many samples a cell takes, whether the default sweep goes on to a larger
# size, whether a size fits) is made once, by process 0, and read by the others from JAX's key-value store
# (`Agreement`). Joining reuses the bounded join of `devctl list --distributed` (devctl.probe.distributed_runtime).
_AGREE_KEY = "devctl/collective/agree/{}"
_FIGURES_KEY = "devctl/collective/figures/{}"
_LEAVE_BARRIER = "devctl/collective/leave"
# A process waits this long for process 0's choice beyond the cell it is timing: a slow cell is not a dead peer.
_AGREE_WAIT_S = 120


class Agreement:
    """One process alone: its own choice. In a cluster: process 0's choice, the same on every process."""

    def __init__(self, client=None, me: int = 0, n: int = 1, timeout_s: float = 30.0):
        self.client, self.me, self.n, self.timeout_s = client, me, n, timeout_s
        self._count = 0

    def agree(self, value: Any) -> Any:
        if self.client is None or self.n == 1:
            return value
        self._count += 1
        key = _AGREE_KEY.format(self._count)
        if self.me == 0:
            self.client.key_value_set(key, json.dumps(value))
            return value
        wait_ms = int((self.timeout_s + _AGREE_WAIT_S) * 1000)
        try:
            return json.loads(self.client.blocking_key_value_get(key, wait_ms))
        except Exception as e:
            raise ChildProblem(
                f"distributed: process 0 gave no answer within {wait_ms / 1000:g} s (it stopped, or hangs): {type(e).__name__}: {first_line(e)}"
            ) from e

    def gather(self, figures: list[dict]) -> list[dict] | None:
        """Every process's own figures, on process 0 (each with its process index and hostname); None elsewhere."""
        mine = [dict(f, process_index=self.me, hostname=socket.gethostname()) for f in figures]
        if self.client is None or self.n == 1:
            return mine
        self.client.key_value_set(_FIGURES_KEY.format(self.me), json.dumps(mine))
        if self.me != 0:
            return None
        out: list[dict] = []
        for i in range(self.n):
            try:
                out += json.loads(self.client.blocking_key_value_get(_FIGURES_KEY.format(i), int(self.timeout_s * 1000)))
            except Exception:  # a process that sent nothing: its figures are missing, the cells still stand
                pass
        return out


def join_cluster(jax, cluster: dict) -> Agreement:
    """jax.distributed.initialize, bounded by --timeout as `devctl list --distributed` bounds it; raises on failure."""
    from jax._src import distributed

    from devctl.probe.distributed_runtime import JOIN_GRACE_S, give_up_joining_at, join, prefer_gloo

    timeout_s = float(cluster.get("timeout_s") or 30)
    prefer_gloo(jax)
    emit("phase", kind="join", name=cluster.get("coordinator") or "auto-detect")
    deadline = time.monotonic() + timeout_s
    joined = give_up_joining_at(deadline + JOIN_GRACE_S)
    join(jax, distributed, cluster, timeout_s, deadline)
    joined.set()
    state = distributed.global_state
    emit("joined", process_index=state.process_id, num_processes=state.num_processes, coordinator=state.coordinator_address)
    return Agreement(state.client, state.process_id, state.num_processes, timeout_s)


def leave(jax, agreement: Agreement) -> None:
    """Leave together: process 0 hosts the key-value store the others may still be reading."""
    if agreement.client is None:
        return
    try:
        agreement.client.wait_at_barrier(_LEAVE_BARRIER, int(agreement.timeout_s * 1000))
        jax.distributed.shutdown()
    except Exception:
        pass


if __name__ == "__main__":
    exit_child(main)
