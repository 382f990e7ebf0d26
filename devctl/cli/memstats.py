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
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
    csv_out: CsvOpt = False,
    *,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """Device memory: the allocator view (memory_stats), the driver view (NVML), the host view, and running jobs' own views."""
    check_output_format(json_out, csv_out)
    if cluster is not None:
        _memstats_cluster(json_out, csv_out, timeout, host_root, cluster, all_print, device=device, watch=watch, count=count, interval=interval)
        return

    interval_s = _interval(interval)
    samples = _count(count)
    if interval is not None and not watch and samples is None:
        # Said rather than ignored: the user expected a refreshing view and would get one snapshot.
        raise UsageError("--interval needs --watch (or --count N): without them memstats takes one snapshot")
    if samples is not None and not watch:
        watch = True  # --count N alone: N samples, as `watch -n` users expect
    device_filter = parse_devices("--device", device, physical_views=True)
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)

    from devctl.collect.memstats import MemstatsSampler

    sampler = MemstatsSampler(device_filter=device_filter, timeout_s=timeout_s, host_root=root)
    first = sampler.first()
    if not watch:
        from devctl.render import emit

        emit(first, json_out, csv_out=csv_out)
        return
    _watch(sampler, first, interval_s, samples, "json" if json_out else "csv" if csv_out else "table")


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
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"--count must be a whole number of at least 1, got {text!r}")
    return int(text)


def _watch(sampler, first, interval_s: float, samples: int | None, output: str) -> None:
    """Sample until Ctrl-C or --count: a live view on a terminal; off one, every sample in full with its time
    (`output` "table"), one JSON document per line ("json"), or CSV rows under one header ("csv"), as a log."""
    from devctl.discovery.nvml import nvml_session
    from devctl.model import to_jsonable
    from devctl.render.console import out, print_json_line, stdout_is_terminal
    from devctl.render.emit import write_csv
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
                    print_json_line(to_jsonable(snapshot))
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
