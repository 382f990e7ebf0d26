"""`devctl memstats`: device memory as the allocator, the driver and the host see it; `--watch` keeps it live."""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.cluster import cluster_options
from devctl.cli.options import (
    CsvOpt,
    HostRootOpt,
    JsonOpt,
    TimeoutOpt,
    check_host_root,
    check_output_format,
    check_timeout,
    parse_devices,
)
from devctl.errors import InputRejected, UsageError
from devctl.model.distributed import ClusterParams

MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0

DeviceOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--device",
        "-d",
        metavar="ID",
        autocompletion=completion.devices(physical_views=True),
        help="Only this device: a JAX id (0: the accelerator's when there is one), platform:id (cuda:1, cpu:0, tpu:0), "
        "or a chip or GPU JAX does not use (tpu-chip:0, nvml:3). Repeatable or comma-separated; all: every device.",
    ),
]


@cluster_options
def memstats(
    json_out: JsonOpt = False,
    device: DeviceOpt = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh every --interval seconds until Ctrl-C or --count.")] = False,
    interval: Annotated[Optional[str], typer.Option("--interval", "-n", metavar="SECONDS", help="Seconds between refreshes with --watch (default 1).")] = None,
    count: Annotated[Optional[str], typer.Option("--count", "-c", metavar="N", help="Stop after N refreshes.")] = None,
    leak_samples: Annotated[
        Optional[str],
        typer.Option("--leak-samples", metavar="K", help="With --watch: name a job whose live arrays grew in each of the last K samples without falling, and the lines whose arrays grew (default 10; 0: off)."),
    ] = None,
    pid: Annotated[Optional[str], typer.Option("--pid", metavar="PID", help="A publishing job: with --top (or --pprof), what it holds; with --postmortem, its post-mortems.")] = None,
    top: Annotated[
        Optional[str],
        typer.Option("--top", metavar="N", help="With --pid: the job's N largest live arrays, each with the line that created it, and its bytes by line. "
        "With --distributed instead: every publishing job of every process."),
    ] = None,
    pprof: Annotated[
        Optional[str],
        typer.Option("--pprof", metavar="FILE", autocompletion=completion.files, help="With --pid: also write the job's device memory profile (pprof, as jax.profiler.device_memory_profile gives it) to FILE."),
    ] = None,
    postmortem: Annotated[bool, typer.Option("--postmortem", help="What jobs that died of RESOURCE_EXHAUSTED held (newest first; --pid: that job's).")] = False,
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
    csv_out: CsvOpt = False,
    *,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """Device memory: the allocator view (memory_stats), the driver view (NVML), the host view, and running jobs' own views."""
    check_output_format(json_out, csv_out)
    if pid is not None or top is not None or pprof is not None or postmortem:
        _holders(pid, top, pprof, postmortem, timeout, json_out, csv_out, cluster=cluster, device=device, watch=watch, count=count, interval=interval, leak_samples=leak_samples, all_print=all_print)
        return
    if cluster is not None:
        _memstats_cluster(json_out, csv_out, timeout, host_root, cluster, all_print, device=device, watch=watch, count=count, interval=interval, leak_samples=leak_samples)
        return

    interval_s = _interval(interval)
    samples = _count(count)
    if interval is not None and not watch and samples is None:
        # Said rather than ignored: the user expected a refreshing view and would get one snapshot.
        raise UsageError("--interval needs --watch (or --count N): without them memstats takes one snapshot")
    if samples is not None and not watch:
        watch = True  # --count N alone: N samples, as `watch -n` users expect
    window = _leak_samples(leak_samples)
    if leak_samples is not None and not watch:
        raise UsageError("--leak-samples needs --watch: a job's growth shows across samples")
    device_filter = parse_devices("--device", device, physical_views=True)
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)

    from devctl.collect.memstats import MemstatsSampler

    sampler = MemstatsSampler(device_filter=device_filter, timeout_s=timeout_s, host_root=root)
    if watch and window:
        from devctl.collect.leaks import LeakWatch

        sampler.leak_watch = LeakWatch(window)
    if not watch:
        from devctl.render import emit

        emit(sampler.first(), json_out, csv_out=csv_out)
        return
    from devctl.discovery.gpm import BusyReader
    from devctl.discovery.nvml import nvml_session

    # The watch keeps each GPU's last GPM sample, so every refresh measures the whole interval since the last;
    # the samples live as long as the NVML session they were taken in.
    sampler.busy = BusyReader(keep=True)
    with nvml_session():
        try:
            _watch(sampler, sampler.first(), interval_s, samples, "json" if json_out else "csv" if csv_out else "table")
        finally:
            sampler.busy.close()


def _memstats_cluster(json_out: bool, csv_out: bool, timeout, host_root: str, params: ClusterParams, all_print: bool, **single_host_only) -> None:
    from devctl.collect.distributed import cluster_memstats

    # The cluster view is one snapshot of every device of every process.
    instead = {
        "watch": "watch one host with devctl memstats --watch, or take a snapshot of the cluster again",
        "device": "filter the --json output by process_index and device id (e.g. with jq)",
        "count": "it counts --watch samples",
        "interval": "it paces --watch samples",
    }
    for name, value in single_host_only.items():
        if value is not None and value is not False:
            raise UsageError(f"--{name} is not supported with --distributed: {instead.get(name, 'leave it out')}")
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)
    report = cluster_memstats(params, timeout_s=timeout_s, host_root=root, all_print=all_print)
    if report is not None:  # None: not process 0, which prints the cluster
        from devctl.render import emit

        emit(report, json_out, csv_out=csv_out)


def _holders(pid: str | None, top: str | None, pprof: str | None, postmortem: bool, timeout, json_out: bool, csv_out: bool, **others) -> None:
    """--pid with --top/--pprof (ask a running job), or --postmortem (read what dead jobs left)."""
    from devctl.cli.options import check_output_path, write_output

    what = "--postmortem" if postmortem else "--top"
    cluster = others.pop("cluster")
    all_print = bool(others.pop("all_print", False))
    for name, value in others.items():
        if value not in (None, False):
            raise UsageError(f"--{name} is not supported with {what}: it asks jobs once, not sample by sample")
    if cluster is not None:
        if postmortem or pid is not None or pprof is not None or top is None:
            raise UsageError("with --distributed, give --top N alone: every process asks the jobs it sees (--pid, --pprof and --postmortem are for one host)")
        from devctl.collect.holders import cluster_tops
        from devctl.render import emit

        fleet = cluster_tops(cluster, _top(top), timeout_s=check_timeout(timeout), all_print=all_print)
        if fleet is not None:  # None: not process 0, which prints the cluster
            emit(fleet, json_out, csv_out=csv_out)
        return
    if postmortem and (top is not None or pprof is not None):
        raise UsageError("--postmortem reads what dead jobs left; --top and --pprof ask a running one: give one or the other")
    job = _pid(pid) if pid is not None else None
    if postmortem:
        from devctl.discovery.holders import read_postmortems
        from devctl.render import emit

        emit(read_postmortems(job), json_out, csv_out=csv_out)
        return
    if job is None:
        raise UsageError(f"{'--top' if top is not None else '--pprof'} needs --pid PID (a job that calls devctl.publish.publish())")
    n = _top(top) if top is not None else 20
    if pprof is not None:
        check_output_path("--pprof", pprof)
    timeout_s = check_timeout(timeout)
    from devctl.discovery.holders import request_top
    from devctl.render import emit

    report, profile = request_top(job, n, pprof=pprof is not None, timeout_s=timeout_s)
    if pprof is not None and profile is not None:
        write_output("--pprof", pprof, profile)
    emit(report, json_out, csv_out=csv_out)


def _leak_samples(text: str | None) -> int:
    from devctl.collect.leaks import DEFAULT_WINDOW

    if text is None:
        return DEFAULT_WINDOW
    n = _whole(text, 0, 1000)
    if n is None or n == 1:
        raise UsageError(f"--leak-samples must be 0 (off) or a whole number from 2 to 1000, got {text!r}")
    return n


def _pid(text: str) -> int:
    n = _whole(text, 1, 9_999_999)
    if n is None:
        raise UsageError(f"--pid must be a process id (a whole number of at least 1), got {text!r}")
    return n


def _top(text: str) -> int:
    from devctl.model.holders import MAX_TOP

    n = _whole(text, 1, MAX_TOP)
    if n is None:
        raise UsageError(f"--top must be a whole number from 1 to {MAX_TOP}, got {text!r}")
    return n


def _whole(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high`: ASCII digits only ('²' is a digit to str.isdigit), and few
    of them (int() of thousands of digits raises); None otherwise."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
        return None
    n = int(digits)
    return n if low <= n <= high else None


def _interval(text: str | None) -> float:
    if text is None:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (MIN_INTERVAL_S <= value <= MAX_INTERVAL_S):
        raise UsageError(f"--interval must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds, got {text!r}")
    return value


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    n = _whole(text, 1, 10**18)
    if n is None:
        raise UsageError(f"--count must be a whole number of at least 1, got {text!r}")
    return n


def _watch(sampler, first, interval_s: float, samples: int | None, output: str) -> None:
    """Sample until Ctrl-C or --count: a live view on a terminal; off one, every sample in full with its time
    (`output` "table"), one JSON document per line ("json"), or CSV rows under one header ("csv"), as a log."""
    from devctl.discovery.nvml import nvml_session
    from devctl.model import to_jsonable
    from devctl.render.console import out, stdout_is_terminal
    from devctl.render.emit import emit_json_line, write_csv
    from devctl.render.memstats import WatchView, csv_rows, render_snapshot, stamp

    view = WatchView()
    live = None
    if output == "table" and stdout_is_terminal():
        from rich.live import Live

        live = Live(console=out(), auto_refresh=False, transient=False)
    n = 0
    next_at = time.monotonic()
    snapshot = first
    with nvml_session():
        if live is not None:
            live.start()
        try:
            while True:
                n += 1
                view.add(snapshot)
                if output == "json":
                    emit_json_line(to_jsonable(snapshot))
                elif output == "csv":
                    header, rows = csv_rows(snapshot)
                    write_csv(header if n == 1 else None, rows)
                elif live is not None:
                    live.update(view.renderable(snapshot, interval_s, n), refresh=True)
                else:
                    out().print(f"sample {n} at {stamp(snapshot.timestamp)}", markup=False, highlight=False)
                    render_snapshot(snapshot)
                    out().print("")
                if samples is not None and n >= samples:
                    break
                next_at += interval_s
                time.sleep(max(0.0, next_at - time.monotonic()))
                snapshot = _safe_sample(sampler, snapshot)
        finally:
            if live is not None:
                live.stop()  # restores the cursor, also on Ctrl-C


def _safe_sample(sampler, previous):
    """A transient fault (NVML hiccup, a GPU lost, a file vanishing mid-read) becomes a problem line; the watch goes on."""
    import dataclasses

    try:
        return sampler.sample()
    except (UsageError, InputRejected, KeyboardInterrupt):
        raise
    except Exception as e:
        return dataclasses.replace(previous, timestamp=time.time(), problems=[f"sample failed: {type(e).__name__}: {e}"])
