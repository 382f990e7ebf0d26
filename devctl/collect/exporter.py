"""`devctl exporter`: what one scrape collects, source by source, each bounded in time.

At start, one probe child asks JAX what a new process gets on each device (bytes_limit), as `devctl memstats`
does, and exits: no JAX client stays open in the exporter, so it holds no device between scrapes. Each scrape
then reads the publishers' snapshot files, NVML, GPM, the TPU chips, libtpu's runtime metrics and the host, in
parallel threads, and waits at most `timeout_s` for them: a source that fails or is late is reported
(devctl_collect_success 0) and leaves out only its own metrics (a source that read part of what it reads, as
libtpu's metrics when one process of several stalls, keeps that part). A source still running from an earlier
scrape is not started twice.

GPM's figures are the counters between two samples. A serving exporter keeps one BusyReader, and its last
sample of each GPU, inside an NVML session as long as the process: each scrape's figures cover the whole time
since the previous scrape, and no scrape waits for a window. The first scrape has no sample to start from and
takes a one-shot window (gpm.ONE_SHOT_WINDOW_S, in the gpm source's own thread), as `--once` does every time;
devctl_gpu_busy_window_seconds says which.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import AbstractSet, Any, Callable, Sequence

from devctl.discovery.kubernetes import PublisherPids
from devctl.hostroot import HostRoot
from devctl.model.exporter import JOB_MAX, Collection, Sample, SourceResult
from devctl.model.memstats import job_headroom_bytes, usable_memory
from devctl.text import program_name

# A job's command line in a label (--command-label only): one line, bounded (Prometheus keeps labels per series).
COMMAND_LABEL_CHARS = 200
# Scrapes within this many seconds of a collection's start share it (Exporter.shared).
SHARE_S = 1.0
# The allocator's own names for what the job metrics export (PJRT's memory_stats keys).
_JOB_STATS = {
    "devctl_job_memory_in_use_bytes": "bytes_in_use",
    "devctl_job_memory_peak_bytes": "peak_bytes_in_use",
    "devctl_job_memory_limit_bytes": "bytes_limit",
    "devctl_job_memory_pool_bytes": "pool_bytes",
    "devctl_job_memory_largest_free_block_bytes": "largest_free_block_bytes",
}


class Exporter:
    def __init__(self, *, host_root: str = "/", publisher_dir: str | None = None, per_process: bool = False, command_label: bool = False,
                 probe_timeout_s: float = 30.0, keep_busy: bool = True):  # fmt: skip
        self.root = HostRoot(host_root)
        self.publisher_dir = publisher_dir
        self.per_process = per_process  # pid-labelled series; else job series summed by program and device
        self.command_label = command_label  # the full command line as a label
        self.probe_timeout_s = probe_timeout_s
        self.probed: list[Any] = []  # the probe's MemDevices (source "jax"): what a new process gets
        self.machine: Any = None  # collect.memstats.MachineKeys: a job's device as this machine's device key
        self.probe_error: str | None = None
        self.versions: dict[str, str] = {}
        self._running: dict[str, _Call] = {}
        self._pids = PublisherPids(self.root)
        self._lock = threading.Lock()
        self._last: tuple[float, Collection] | None = None  # (when it started, the collection)
        # GPM: keep each GPU's last sample between scrapes (a server, a textfile), or a one-shot window (--once).
        self.keep_busy = keep_busy
        self._busy: Any = None  # devctl.discovery.gpm.BusyReader, made by the first gpm read
        self._session = contextlib.ExitStack()  # the NVML session the held GPM samples live in
        self._timeout_s = 5.0  # the scrape's, for the sources that bound their own waits within it
        self._tensorcore: Any = None  # devctl.collect.tpu_runtime.TensorCoreWatch: libtpu.sdk in a child
        self._tpu_scan: _Once = _Once(lambda: None)  # this collection's TPU chips and their holders (collect() renews it)

    def start(self) -> None:
        """Probe JAX once (the child exits) and read the versions; a bad --publisher-dir is bad input here."""
        from devctl.collect.memstats import MachineKeys, MemstatsSampler
        from devctl.errors import DevctlError, InputRejected

        sampler = MemstatsSampler(device_filter=None, timeout_s=self.probe_timeout_s, host_root=self.root.root, publisher_dir=self.publisher_dir)
        self.machine = MachineKeys([])
        try:
            snapshot = sampler.first()
            self.probed = [d for d in snapshot.devices if d.source == "jax"]
            self.machine = MachineKeys(sampler.probe.devices if sampler.probe else [])
        except InputRejected:  # bad input (an unsafe snapshot directory named): exit 2
            raise
        except DevctlError as e:  # the probe failed: said by devctl_collect_success{source="probe"}, the rest goes on
            self.probe_error = str(e)
        self.versions = _versions()
        if self.keep_busy:
            from devctl.discovery.nvml import nvml_session

            self._session.enter_context(nvml_session())

    def close(self) -> None:
        """Free the held GPM samples and end the NVML session. A gpm read still running (stuck in the driver)
        keeps its samples: the process is ending, and freeing them under it would be worse."""
        running = self._running.get("gpm")
        if self._busy is not None and (running is None or running.done()):
            self._busy.close()
        self._session.close()

    def shared(self, timeout_s: float, reuse_s: float = SHARE_S) -> Collection:
        """The collection for a scrape, safe to call from the server's threads at once: one collection runs at a
        time, and one that started less than `reuse_s` ago is everyone's answer. collect() is not re-entrant
        (its bookkeeping of running sources; NVML's init and shutdown are process-wide), and two Prometheus
        servers scraping together, or a burst of scrapes, should cost one collection, not one each."""
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < reuse_s:
                return self._last[1]
            started = time.monotonic()
            collection = self.collect(timeout_s)
            self._last = (started, collection)
            return collection

    def collect(self, timeout_s: float) -> Collection:
        """One collection, afresh; not re-entrant: concurrent callers go through shared()."""
        from devctl.discovery.tpu import tpu_info

        started = time.monotonic()
        self._timeout_s = timeout_s
        # The tpu and tpu_runtime sources both need the chips and who holds them: one scan of /proc a collection.
        self._tpu_scan = _Once(lambda: tpu_info(self.root))
        readers: dict[str, Callable[[], list[Sample]]] = {
            "publishers": self._publishers,
            "nvml": self._nvml,
            "gpm": self._gpm,
            "tpu": self._tpu,
            "tpu_runtime": self._tpu_runtime,
            "host": self._host,
        }
        futures: dict[str, _Call] = {}
        busy: list[str] = []
        for name, read in readers.items():
            previous = self._running.get(name)
            if previous is not None and not previous.done():
                busy.append(name)
                continue
            futures[name] = self._running[name] = _Call(name, read)
        deadline = started + timeout_s
        for call in futures.values():
            call.join(max(0.0, deadline - time.monotonic()))
        out = Collection()
        for name in busy:
            out.sources[name] = SourceResult(False, 0.0, "still running since an earlier scrape")
        for name, future in futures.items():
            if not future.done():
                out.sources[name] = SourceResult(False, round(time.monotonic() - started, 6), f"no answer within {timeout_s:g} s")
                continue
            samples, seconds, error = future.result()
            out.sources[name] = SourceResult(error is None, round(seconds, 6), error)
            out.samples.extend(samples)
        out.samples.extend(self._probe_samples())
        out.samples.extend(self._usable(out.samples, nvml_answered=out.sources.get("nvml", SourceResult(False, 0.0)).success))
        out.sources["probe"] = SourceResult(self.probe_error is None, 0.0, self.probe_error)
        out.samples.append(Sample("devctl", self.versions, 1.0))
        out.sources["versions"] = SourceResult(True, 0.0)
        out.samples.extend(_headroom(out.samples, gpus={d.key for d in self.probed if d.driver is not None}, per_process=self.per_process))
        if not self.per_process:
            out.samples[:] = _by_program(out.samples)
        return out

    # ---- the sources ----------------------------------------------------------------------------

    def _publishers(self) -> list[Sample]:
        from devctl.discovery.publishers import read_publishers
        from devctl.text import printable

        report = read_publishers(self.publisher_dir)
        self._pids.new_collection()
        samples = []
        for p in report.publishers:
            # Per process here, always: the headroom is a process's; collect() sums them by program after it.
            here = self._pids.find(p.pid, p.command)
            job = {**self._who(here, p.command, hostname=p.hostname), "pid": str(p.pid)}
            samples.append(Sample("devctl_job_processes", job, 1.0))
            if p.age_s is not None:
                samples.append(Sample("devctl_job_snapshot_age_seconds", job, max(p.age_s, 0.0)))
            for d in p.devices:
                labels = {**job, "process_index": str(d.process_index), "device": self.machine.key(d) if self.machine else f"{d.platform}:{d.id}",
                          "platform": d.platform, "device_kind": printable(d.device_kind, 120)}  # fmt: skip
                for metric, key in _JOB_STATS.items():
                    value = (d.memory_stats or {}).get(key)
                    if isinstance(value, int) and value >= 0:
                        samples.append(Sample(metric, labels, float(value)))
                samples.append(Sample("devctl_job_live_array_bytes", labels, float(d.live_bytes)))
                samples.append(Sample("devctl_job_live_arrays", labels, float(d.live_arrays)))
        return samples

    def _who(self, pid: int | None, argv: Sequence[str], *, hostname: str | None = None) -> dict[str, str]:
        """A process's labels but its pid: its program, its command line with --command-label, and its pod where
        it runs under Kubernetes (`pid`: the process in this root's /proc, None where it is not there)."""
        from devctl.discovery.kubernetes import NO_POD, process_pod
        from devctl.text import printable

        pod = process_pod(self.root, pid, hostname=hostname) if pid is not None else NO_POD
        labels = {"program": program_name(argv), **pod.labels(container_id=self.per_process)}
        if self.command_label:
            labels["command"] = printable(" ".join(argv), COMMAND_LABEL_CHARS) or "?"
        return labels

    def _probe_samples(self) -> list[Sample]:
        return [
            Sample("devctl_device_memory_limit_bytes", {"device": d.key, "platform": d.platform, "device_kind": d.device_kind}, float(d.bytes_limit))
            for d in self.probed
            if d.bytes_limit is not None
        ]

    def _usable(self, samples: list[Sample], *, nvml_answered: bool) -> list[Sample]:
        """What a new JAX process can allocate on each probed device now (`devctl memstats`' usable figure): its
        bytes_limit, bounded by the driver's free memory of this scrape. A GPU whose driver did not answer this
        time has no figure rather than the allocator's alone, which would over-state it."""
        free = {s.labels["device"]: int(s.value) for s in samples if s.name == "devctl_gpu_memory_free_bytes" and s.labels.get("device")}
        out = []
        for d in self.probed:
            if d.driver is not None and (not nvml_answered or d.key not in free):
                continue
            usable, _ = usable_memory(d.bytes_limit, free.get(d.key))
            if usable is not None:
                out.append(Sample("devctl_device_memory_usable_bytes", {"device": d.key, "platform": d.platform, "device_kind": d.device_kind}, float(usable)))
        return out

    def _nvml(self) -> list[Sample]:
        from devctl.discovery.nvml import nvml_health, nvml_report, nvml_session, utilization

        with nvml_session():
            report = nvml_report(processes=self.per_process)
            if report.status == "unavailable":
                return []  # no driver or library: a CPU host, no GPU metrics (and not a failure)
            if report.status != "ok":
                raise RuntimeError(report.reason or "NVML failed")
            health = {h.index: h for h in nvml_health(self.root).gpus}
            rates = utilization()
        # The JAX device each GPU is, where the probe matched them (by PCI bus id, as `devctl memstats` does).
        jax_key = {d.driver["index"]: d.key for d in self.probed if d.driver}
        samples: list[Sample] = []
        for g in report.gpus:
            device = jax_key.get(g.index, "")
            labels = {"gpu": str(g.index), "uuid": g.uuid or "", "pci_bus_id": g.pci_bus_id or "", "name": g.name or "", "device": device}
            add = _adder(samples, labels)
            add("devctl_gpu_memory_used_bytes", g.memory_used_bytes)
            add("devctl_gpu_memory_total_bytes", g.memory_total_bytes)
            add("devctl_gpu_memory_free_bytes", g.memory_free_bytes)
            add("devctl_gpu_temperature_celsius", g.temperature_c)
            add("devctl_gpu_power_watts", g.power_draw_w)
            add("devctl_gpu_power_limit_watts", g.power_limit_w)
            add("devctl_gpu_pcie_link_generation", g.pcie_link_gen_current, state="current")
            add("devctl_gpu_pcie_link_generation", g.pcie_link_gen_max, state="max")
            add("devctl_gpu_pcie_link_width", g.pcie_link_width_current, state="current")
            add("devctl_gpu_pcie_link_width", g.pcie_link_width_max, state="max")
            gpu_rate, memory_rate = rates.get(g.index, (None, None))
            add("devctl_gpu_utilization_ratio", gpu_rate)
            add("devctl_gpu_memory_utilization_ratio", memory_rate)
            h = health.get(g.index)
            if h is not None:
                add("devctl_gpu_ecc_uncorrected_errors_total", h.ecc_uncorrected_volatile, scope="volatile")
                add("devctl_gpu_ecc_uncorrected_errors_total", h.ecc_uncorrected_aggregate, scope="aggregate")
                add("devctl_gpu_remapped_rows_uncorrectable", h.remapped_rows_uncorrectable)
                for reason in h.throttle_reasons:
                    add("devctl_gpu_throttle_active", 1, reason=reason)
            if self.per_process:
                for proc in report.processes:
                    if proc.gpu_index == g.index and proc.used_memory_bytes is not None:
                        who = self._who(proc.pid, (proc.command or "").split()) if proc.pid_visible else {"program": "?"}
                        add("devctl_gpu_process_memory_used_bytes", proc.used_memory_bytes, **who, pid=str(proc.pid))
        return samples

    def _gpm(self) -> list[Sample]:
        """GPM's counters of each GPU that has them, and of each MIG GPU instance; a GPU without GPM has only the
        nvml source's devctl_gpu_utilization_ratio (NVML's utilization: a kernel was running)."""
        from devctl.discovery.gpm import BusyReader
        from devctl.discovery.nvml import NvmlUnavailable, nvml_initialized

        try:
            with nvml_initialized():
                identity = _gpu_identities()
        except NvmlUnavailable as e:
            if e.status == "unavailable":
                return []  # no driver or library: a CPU host (not a failure)
            raise RuntimeError(e.reason) from None
        if self._busy is None:
            self._busy = BusyReader(keep=self.keep_busy)
        busy, reason = self._busy.read()
        if reason is not None:
            raise RuntimeError(reason)
        jax_key = {d.driver["index"]: d.key for d in self.probed if d.driver}
        samples: list[Sample] = []
        for index, b in sorted(busy.items()):
            if b.source != "gpm":
                continue
            labels = {**identity.get(index, {"gpu": str(index)}), "device": jax_key.get(index, "")}
            _busy_counters(_adder(samples, labels), b.counters)
            for m in b.mig:
                _busy_counters(_adder(samples, {**labels, "gpu_instance": str(m.gpu_instance_id)}), m.counters)
            _adder(samples, labels)("devctl_gpu_busy_window_seconds", b.window_s)
        return samples

    def _tpu_runtime(self) -> list[Sample]:
        """libtpu's figures of each held chip, asked of its holder's runtime metrics service. The asks end before
        the scrape's deadline, so a server that stalls or fails is this source's failure, named, while the chips
        of the processes that answered keep their series. Nothing listening (a process not yet in libtpu) and no
        grpc installed are quiet: no series."""
        from devctl.collect.tpu_runtime import TensorCoreWatch, runtime_metrics, with_tensorcore_util

        started = time.monotonic()
        budget = max(0.05, self._timeout_s * 0.8 - 0.25)  # the ask's threads get 0.25 s of grace beyond it
        tpu = self._tpu_scan()
        if self._tensorcore is None:
            self._tensorcore = TensorCoreWatch()
        self._tensorcore.start(tpu)  # a child, only where a chip is held and libtpu is installed here
        metrics = runtime_metrics(self.root, tpu, timeout_s=budget)
        with_tensorcore_util(metrics, self._tensorcore.latest(wait_s=budget - (time.monotonic() - started)), tpu)
        chips = {chip.index: chip for chip in tpu.chips}
        samples: list[Sample] = []
        for key, f in metrics.chips.items():
            index = int(key.partition(":")[2])
            chip = chips.get(index)
            holder = next((h for h in chip.holders if h.pid == f.pid), None) if chip is not None else None
            labels = {"chip": str(index), "version": chip.version if chip is not None else "",
                      **self._who(f.pid, ((holder.command if holder else None) or "").split()), "pid": str(f.pid)}  # fmt: skip
            add = _adder(samples, labels)
            add("devctl_tpu_hbm_used_bytes", f.hbm_used_bytes)
            add("devctl_tpu_hbm_total_bytes", f.hbm_total_bytes)
            add("devctl_tpu_duty_cycle_ratio", _percent_ratio(f.duty_cycle_percent))
            add("devctl_tpu_hbm_bandwidth_utilization_ratio", _percent_ratio(f.hbm_utilization_percent))
            add("devctl_tpu_tensorcore_utilization_ratio", _percent_ratio(f.tensorcore_utilization_percent))
        if metrics.problems:
            raise Partial(samples, "; ".join(metrics.problems))
        return samples

    def _tpu(self) -> list[Sample]:
        samples: list[Sample] = []
        for chip in self._tpu_scan().chips:
            if chip.hbm_bytes is not None:
                samples.append(Sample("devctl_tpu_chip_hbm_bytes", {"chip": str(chip.index), "version": chip.version, "pci_address": chip.pci_address}, float(chip.hbm_bytes)))
            for holder in chip.holders:
                labels = {"chip": str(chip.index), "version": chip.version, **self._who(holder.pid, (holder.command or "").split()), "pid": str(holder.pid)}
                samples.append(Sample("devctl_tpu_chip_holder", labels, 1.0))
        return samples

    def _host(self) -> list[Sample]:
        from devctl.discovery.host import host_info

        h = host_info(self.root)
        samples: list[Sample] = []
        add = _adder(samples, {})
        add("devctl_host_memory_total_bytes", h.memory_total_bytes)
        add("devctl_host_memory_available_bytes", h.memory_available_bytes)
        add("devctl_host_shm_total_bytes", h.shm_total_bytes)
        if h.shm_total_bytes is not None and h.shm_free_bytes is not None:
            add("devctl_host_shm_used_bytes", h.shm_total_bytes - h.shm_free_bytes)
        return samples


class _Once:
    """A value made by the first caller, from any thread, and given to every caller after it."""

    def __init__(self, make: Callable[[], Any]):
        self._make, self._lock, self._made = make, threading.Lock(), False
        self._value: Any = None

    def __call__(self) -> Any:
        with self._lock:
            if not self._made:
                self._value, self._made = self._make(), True
            return self._value


class _Call:
    """One source's read in a daemon thread of its own: waited for up to the scrape's deadline, never joined at
    exit (a driver call that hangs must not keep the exporter alive after SIGTERM)."""

    def __init__(self, name: str, read: Callable[[], list[Sample]]):
        self._result: tuple[list[Sample], float, str | None] | None = None
        self._thread = threading.Thread(target=self._run, args=(read,), name=f"devctl-exporter-{name}", daemon=True)
        self._thread.start()

    def _run(self, read: Callable[[], list[Sample]]) -> None:
        self._result = _timed(read)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def done(self) -> bool:
        return self._result is not None

    def result(self) -> tuple[list[Sample], float, str | None]:
        assert self._result is not None
        return self._result


class Partial(Exception):
    """A source that read part of what it reads: the samples it has go out, and the source says it failed."""

    def __init__(self, samples: list[Sample], reason: str):
        super().__init__(reason)
        self.samples = samples


def _timed(read: Callable[[], list[Sample]]) -> tuple[list[Sample], float, str | None]:
    """A source's samples, its seconds and its error (one line); a failing source is an error, never a crash."""
    started = time.monotonic()
    try:
        return read(), time.monotonic() - started, None
    except Partial as e:
        return e.samples, time.monotonic() - started, " ".join(str(e).split())[:300]
    except Exception as e:  # any source's fault is that source's: reported, the others go on
        return [], time.monotonic() - started, f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


def _adder(samples: list[Sample], labels: dict[str, str]) -> Callable[..., None]:
    def add(name: str, value: float | int | None, **extra: str) -> None:
        if value is not None:
            samples.append(Sample(name, {**labels, **extra}, float(value)))

    return add


# BusyCounters field -> the series it is exported as.
_BUSY_SERIES = {
    "sm_active_ratio": "devctl_gpu_sm_active_ratio",
    "sm_occupancy_ratio": "devctl_gpu_sm_occupancy_ratio",
    "tensor_active_ratio": "devctl_gpu_tensor_active_ratio",
    "dram_active_ratio": "devctl_gpu_dram_active_ratio",
    "gr_engine_active_ratio": "devctl_gpu_gr_engine_active_ratio",
    "pcie_tx_bytes_per_s": "devctl_gpu_pcie_transmit_bytes_per_second",
    "pcie_rx_bytes_per_s": "devctl_gpu_pcie_receive_bytes_per_second",
    "nvlink_tx_bytes_per_s": "devctl_gpu_nvlink_transmit_bytes_per_second",
    "nvlink_rx_bytes_per_s": "devctl_gpu_nvlink_receive_bytes_per_second",
}


def _busy_counters(add: Callable[..., None], counters: Any) -> None:
    for field, name in _BUSY_SERIES.items():
        add(name, getattr(counters, field))


def _percent_ratio(percent: float | None) -> float | None:
    return min(max(percent / 100, 0.0), 1.0) if percent is not None else None


def _gpu_identities() -> dict[int, dict[str, str]]:
    """Each GPU's labels but its JAX device (inside an NVML session): the nvml source's, read alone, since the
    two sources run side by side."""
    from devctl.discovery.nvml import query
    from devctl.discovery.pci import normalize_pci_bus_id

    count, _ = query("nvmlDeviceGetCount")
    out: dict[int, dict[str, str]] = {}
    for index in range(count or 0):
        handle, _ = query("nvmlDeviceGetHandleByIndex", index)
        uuid = name = bus = None
        if handle is not None:
            uuid, _ = query("nvmlDeviceGetUUID", handle)
            name, _ = query("nvmlDeviceGetName", handle)
            pci, _ = query("nvmlDeviceGetPciInfo", handle)
            bus = normalize_pci_bus_id(pci.busId) if pci is not None else None
        out[index] = {"gpu": str(index), "uuid": uuid or "", "pci_bus_id": bus or "", "name": name or ""}
    return out


def _headroom(samples: list[Sample], gpus: AbstractSet[str] = frozenset(), *, per_process: bool = False) -> list[Sample]:
    """The least memory a new JAX process (a device's usable memory) or a running job (its limit less its peak,
    bounded by the driver's free memory) can still get, and where: `devctl memstats`' headroom. A job on a GPU
    (`gpus`) whose driver did not answer this scrape has no figure, as the device has none. Each process is
    its own (samples per process); `where` names it by program, by pid only with --per-process (a pid in a
    label value would start a new series at every restart)."""
    free = {s.labels["device"]: int(s.value) for s in samples if s.name == "devctl_gpu_memory_free_bytes" and s.labels.get("device")}
    jobs: dict[tuple[str, str], dict[str, int | None]] = {}
    names: dict[tuple[str, str], str] = {}
    room: dict[str, float] = {}
    for s in samples:
        if s.name == "devctl_device_memory_usable_bytes":
            room[s.labels["device"]] = s.value
        elif (key := _JOB_STATS.get(s.name)) is not None:
            process = (s.labels.get("pid", ""), s.labels["device"])
            jobs.setdefault(process, {})[key] = int(s.value)
            names[process] = f"pid {process[0]}" if per_process else s.labels.get("program") or "?"
    for (pid, device), stats in jobs.items():
        if device in gpus and device not in free:
            continue
        held = job_headroom_bytes(stats, free.get(device))
        if held is not None:
            where = f"{device} ({names[(pid, device)]})"
            room[where] = min(room.get(where, float(held)), float(held))
    if not room:
        return []
    where, least = min(room.items(), key=lambda kv: (kv[1], kv[0]))
    return [Sample("devctl_headroom_bytes", {"where": where}, least)]


def _by_program(samples: list[Sample]) -> list[Sample]:
    """Process series (those with a pid) as one series per program and the rest of their labels, as
    dcgm-exporter exports per GPU and pod rather than per process: summed (bytes, arrays, processes), or the
    largest for JOB_MAX. Other series pass through, in order."""
    out: list[Sample] = []
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for s in samples:
        if "pid" not in s.labels:
            out.append(s)
            continue
        labels = {k: v for k, v in s.labels.items() if k not in ("pid", "container_id")}
        key = (s.name, tuple(sorted(labels.items())))
        at = merged.get(key)
        if at is None:
            merged[key] = len(out)
            out.append(Sample(s.name, labels, s.value))
        else:
            value = max(out[at].value, s.value) if s.name in JOB_MAX else out[at].value + s.value
            out[at] = Sample(s.name, labels, value)
    return out


def _versions() -> dict[str, str]:
    from devctl.discovery.nvml import nvml_report
    from devctl.discovery.versions import installed_packages
    from devctl.version import __version__

    packages = installed_packages()
    version = {p.name: p.version or "" for p in packages}
    plugins = ",".join(f"{p.name}=={p.version}" for p in packages if p.role in ("plugin", "pjrt", "libtpu") and p.version)
    nvml = nvml_report()
    return {"devctl": __version__, "jax": version.get("jax", ""), "jaxlib": version.get("jaxlib", ""), "plugins": plugins, "driver": nvml.driver_version or ""}
