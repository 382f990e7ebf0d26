"""What the checks share: one inventory (one backend probe), one environment report, one health child.

Each piece is computed at most once, in the background as soon as the
selected checks are known to need it, so twelve checks cost two JAX starts
(the backend probe and the health child) and not twelve.

The time of each piece is its own (phases_s), not the time of whichever check
happened to ask first: a check's duration is its own work, without its waits
for shared pieces (take_wait_s), and the report shows the pieces apart.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from devctl.hostroot import HostRoot
from devctl.model.check import Expectations, HealthProbeResult
from devctl.model.list_ import BackendStatus

if TYPE_CHECKING:
    from devctl.collect.tpu_runtime import RuntimeMetrics
    from devctl.model.busy import GpuBusy
    from devctl.model.env import EnvironmentReport
    from devctl.model.hardware import HostInfo, NvmlHealth, TpuReport
    from devctl.model.list_ import Hardware, Inventory
    from devctl.probe.runner import Child

# What each check reads; the runner starts what the selection needs before the first check runs.
NEEDS: dict[str, frozenset[str]] = {
    "versions": frozenset({"environment", "inventory"}),
    "plugins": frozenset({"inventory"}),
    "backends": frozenset({"inventory"}),
    "devices": frozenset({"inventory"}),
    "compute": frozenset({"inventory", "health"}),
    "transfer": frozenset({"inventory", "health"}),
    "memory": frozenset({"inventory"}),
    "bandwidth": frozenset({"inventory", "health"}),
    # The benchmarks run only when an expectation asks for them, one at a time after the health child (each
    # alone on the machine, as their figures need): on demand, never started early (Context.bench).
    "memory-bw": frozenset({"inventory"}),
    "matmul": frozenset({"inventory"}),
    "busbw": frozenset({"inventory"}),
    "stragglers": frozenset({"inventory"}),
    # Read before anything else starts, when an expectation asks (Context.start): check's own probes would be in it.
    "busy": frozenset({"inventory"}),
    "nvml-health": frozenset({"hardware", "nvml"}),
    "host": frozenset({"hardware", "host"}),
    "tpu": frozenset({"hardware"}),
    "env": frozenset({"environment"}),
}


# How long GPM's two samples are apart: long enough that a job between two steps (a data-loader pause) still shows,
# short enough not to hold up the checks (nothing else starts until it is read).
BUSY_WINDOW_S = 1.0


@dataclass(frozen=True)
class BusyReading:
    """How busy every accelerator was, read before check's own probes started (the busy check judges it)."""

    gpus: dict[int, GpuBusy]  # by NVML index
    nvml_reason: str | None  # why there is no GPU figure at all (no driver, a --host-root tree)
    tpu: TpuReport | None
    runtime: RuntimeMetrics | None  # the TPU chips' holders' runtime metrics
    window_s: float


def _end_children() -> None:
    """Kill the process groups of this process's own children (the probe children)."""
    import os
    import signal

    import psutil

    for child in psutil.Process().children(recursive=False):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Context:
    def __init__(self, expectations: Expectations, host_root: str, checks: list[str]):
        self.expectations = expectations
        self.root = HostRoot(host_root)
        self.checks = list(checks)
        self.needs: set[str] = set().union(*(NEEDS[c] for c in checks)) if checks else set()
        self.phases_s: dict[str, float] = {}
        self._runner = threading.get_ident()  # the thread that runs the checks, whose waits are counted
        self._waited_s = 0.0
        self._lock = threading.Lock()
        self._futures: dict[str, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="devctl-check")
        self._health_child: Child | None = None  # started early, so jax imports while the backend probe runs

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Begin the slow shared work the selected checks need."""
        exp = self.expectations
        if "busy" in self.checks and (exp.max_busy_percent is not None or exp.min_busy_percent is not None):
            # First and alone: the backend probe and the health child would be busy-ness of check's own. Waited for,
            # not read: a reading that raised is the busy row's failure (run_checks), not the whole command's.
            wait([self._submit("busy", self._read_busy)])
        if "inventory" in self.needs:
            self._submit("inventory", self._collect_inventory)
        if "environment" in self.needs:
            self._submit("environment", self._collect_environment)
        if "health" in self.needs:
            from devctl.probe.health import start_health_probe

            self._health_child = start_health_probe()
            self._submit("health", self._run_health)
        if "nvml" in self.needs:
            self._submit("nvml", self._collect_nvml)
        if "inventory" not in self.needs:  # else both come with the inventory
            if "hardware" in self.needs:
                self._submit("hardware", self._discover_hardware)
            if "host" in self.needs:
                self._submit("host", self._host_info)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        child, self._health_child = self._health_child, None
        if child is not None:  # started but never asked (a check raised first): let it go
            from devctl.probe.health import cancel_health_probe

            cancel_health_probe(child)

    def __enter__(self) -> Context:
        self.start()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self._interrupt()
        self.close()

    def _interrupt(self) -> None:
        """Ctrl-C: the probes run in worker threads, which the interrupt does not reach, and in their own
        sessions, which the terminal's SIGINT does not reach. End their children until they stop starting
        new ones (the backend probe retries after a child dies)."""
        deadline = time.monotonic() + 10
        while any(not f.done() for f in self._futures.values()) and time.monotonic() < deadline:
            _end_children()
            wait(list(self._futures.values()), timeout=0.1)

    # ---- shared data --------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        """The backend probe and discovery, as `devctl list` reports them."""
        return self._get("inventory", self._collect_inventory)

    def environment(self) -> EnvironmentReport:
        """Package versions and their findings."""
        return self._get("environment", self._collect_environment)

    def health(self) -> HealthProbeResult | None:
        """The health child's results; None when no backend initialized (nothing to run it on)."""
        return self._get("health", self._run_health)

    def busy(self) -> BusyReading:
        """How busy every accelerator was before check's own probes started."""
        return self._get("busy", self._read_busy)

    def nvml(self) -> NvmlHealth:
        """Per-GPU health counters from NVML."""
        return self._get("nvml", self._collect_nvml)

    def hardware(self) -> Hardware:
        """From the inventory when it is being collected anyway."""
        if "inventory" in self.needs or "inventory" in self._futures:
            return self.inventory().hardware
        return self._get("hardware", self._discover_hardware)

    def host(self) -> HostInfo:
        """The inspected root's."""
        if "inventory" in self.needs or "inventory" in self._futures:
            return self.inventory().host
        return self._get("host", self._host_info)

    def ok_platforms(self) -> list[str]:
        """Platforms whose backend initialized: expected ones first, then by JAX's priority."""
        ok = [b for b in self.inventory().backends if b.status is BackendStatus.OK and not b.plugin]
        ok.sort(key=lambda b: (not self.expectations.wants_platform(b.platform), -(b.priority or 0)))
        return [b.platform for b in ok]

    def health_platforms(self) -> list[str]:
        """Where the health child runs: the expected platforms that initialized (none: nothing to run on, and the
        checks say so; a CPU must not stand in for a missing GPU), else every platform that initialized."""
        ok = self.ok_platforms()
        if self.expectations.platforms:
            return [p for p in ok if self.expectations.wants_platform(p)]
        return ok

    def bench_platform(self) -> tuple[str | None, str | None]:
        """The platform the benchmarks measure (JAX's default backend, as a job would use), or None and why not."""
        default = self.inventory().default_platform
        if default is None:
            return None, "no JAX backend initialized, so there is no device to measure (see the backends check)"
        expected = self.expectations.platforms
        if expected and not self.expectations.wants_platform(default):
            scope = "/".join(expected)
            return None, f"JAX's default backend is {default}, not {scope}: no {scope} device to measure (see the backends check)"
        return default, None

    def bench(self, kind: str) -> tuple[Any, str | None]:
        """A short benchmark of JAX's default backend ("memory", "matmul" or "collective"), run once for every check
        that reads it: its report, or None and why it could not run."""
        return self._get(f"bench-{kind}", lambda: self._run_bench(kind))

    def take_wait_s(self) -> float:
        """Seconds the checks' thread waited for shared pieces since the last call (the runner subtracts them)."""
        waited, self._waited_s = self._waited_s, 0.0
        return waited

    # ---- how each piece is made -----------------------------------------------------------------

    def _submit(self, key: str, fn: Callable[[], Any]) -> Future:
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._pool.submit(self._timed, key, fn)
            return self._futures[key]

    def _get(self, key: str, fn: Callable[[], Any]) -> Any:
        future = self._submit(key, fn)
        if future.done() or threading.get_ident() != self._runner:
            return future.result()
        started = time.monotonic()
        try:
            return future.result()
        finally:
            self._waited_s += time.monotonic() - started

    def _timed(self, key: str, fn: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return fn()
        finally:
            # The health child waits for the inventory first: it records its own time, from its request on
            # (_run_health), and none when there was nothing to run it on.
            if key != "health":
                self.phases_s[key] = round(time.monotonic() - started, 3)

    def _collect_inventory(self) -> Inventory:
        from devctl.collect.list_ import collect_inventory

        # Every backend, not only the expected ones: a broken plugin breaks the user's jax.devices() too.
        return collect_inventory(platforms=None, timeout_s=self.expectations.timeout_s, host_root=self.root.root)

    def _collect_environment(self) -> EnvironmentReport:
        from devctl.collect.env import collect_environment

        return collect_environment()

    def _run_health(self) -> HealthProbeResult | None:
        from devctl.probe.health import cancel_health_probe, run_health_probe

        platforms = self.health_platforms()  # waits for the inventory (if that raises, close() cancels the child)
        child, self._health_child = self._health_child, None
        if not platforms:
            if child is not None:
                cancel_health_probe(child)
            return None
        started = time.monotonic()
        try:
            return run_health_probe(
                platforms,
                child=child,
                skip_plugins=[b.plugin for b in self.inventory().backends if b.plugin],
                compute="compute" in self.checks,
                transfer="transfer" in self.checks,
                bandwidth="bandwidth" in self.checks,
                bandwidth_all_devices=self.expectations.min_h2d_gbps is not None,
                timeout_s=self.expectations.timeout_s,
            )
        finally:
            self.phases_s["health"] = round(time.monotonic() - started, 3)

    def _run_bench(self, kind: str) -> tuple[Any, str | None]:
        from devctl.checks.performance import bench_options
        from devctl.errors import DevctlError

        health = self._futures.get("health")
        if health is not None:  # still measuring: a benchmark beside it would measure both of them
            wait([health])
        platform, why = self.bench_platform()
        if platform is None:
            return None, why
        count = sum(b.device_count for b in self.inventory().backends if b.platform == platform and b.status is BackendStatus.OK)
        opts, why = bench_options(kind, platform, count)
        if opts is None:
            return None, why
        timeout_s = self.expectations.timeout_s
        try:
            if kind == "memory":
                from devctl.collect.bench_memory import run_memory

                return run_memory(opts, timeout_s), None
            if kind == "matmul":
                from devctl.collect.bench_matmul import run_matmul

                return run_matmul(opts, timeout_s), None
            from devctl.collect.bench_collective import run_collective

            return run_collective(opts, timeout_s), None
        except DevctlError as e:  # a failed or hung child: the verdict names it, the other checks go on
            return None, str(e)

    def _read_busy(self) -> BusyReading:
        from devctl.collect.tpu_runtime import runtime_metrics
        from devctl.discovery import tpu
        from devctl.discovery.gpm import BusyReader

        if self.root.is_real:
            gpus, reason = BusyReader(window_s=BUSY_WINDOW_S).read()
        else:  # NVML reads this machine's GPUs, never the tree's
            gpus, reason = {}, f"NVML reads this machine, not the tree at {self.root.root}"
        info = tpu.tpu_info(self.root)
        runtime = runtime_metrics(self.root, info) if any(c.holders for c in info.chips) else None
        return BusyReading(gpus, reason, info, runtime, BUSY_WINDOW_S)

    def _collect_nvml(self) -> NvmlHealth:
        from devctl.discovery.nvml import nvml_health

        return nvml_health(self.root)

    def _discover_hardware(self) -> Hardware:
        from devctl.collect.list_ import discover_hardware

        return discover_hardware(self.root)

    def _host_info(self) -> HostInfo:
        from devctl.discovery.host import host_info

        return host_info(self.root)
